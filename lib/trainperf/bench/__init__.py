"""The reference workload: a small GPT-style model trained under the profiler (``trainperf bench``, ``make bench``;
docs/bench.md). Its modules import torch; the package itself imports nothing, so that registering the command does
not.
"""
