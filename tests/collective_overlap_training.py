"""Steps with a gradient-sized all-reduce that computation hides, or not,
profiled with sampled communication windows (``comm_sampling=True``). Run by
the profiler tests under ``torchrun`` (gloo):

    python tests/collective_overlap_training.py RUNS_DIR

Two run folders: ``overlapped``, where each step starts an asynchronous
all-reduce and multiplies matrices on the training thread until it has
completed (the collective is hidden, except for the last multiplication's
tail); ``waited``, where each step waits for a synchronous all-reduce, then
does the same amount of multiplication (the collective is all exposed).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainperf import StepProfiler

STEPS = 4
WARMUP = 1
ELEMENTS = 1 << 21
"""All-reduced floats per step (8 MiB)."""
SIDE = 256
"""Side of the multiplied matrices: a product takes about half a millisecond on one core, so the
training thread's time between products (Python, the profiler's own records) is a small share of
the hidden collective even on a loaded machine."""


def main() -> None:
    dist.init_process_group("gloo")
    runs = Path(sys.argv[1])
    buffer = torch.ones(ELEMENTS)
    a = torch.randn(SIDE, SIDE) / SIDE**0.5
    for overlapped in (True, False):
        prof = StepProfiler(runs / ("overlapped" if overlapped else "waited"), warmup_steps=WARMUP,
                            comm_sampling=True, comm_sample_every=STEPS, comm_sample_steps=STEPS - WARMUP)
        for _ in range(STEPS):
            with prof.step(samples=1):
                with prof.phase("forward"):
                    work = dist.all_reduce(buffer, async_op=overlapped)
                    products = 0
                    while (work is not None and not work.is_completed()) or products < 20:
                        a = torch.tanh(a @ a)
                        products += 1
                    if work is not None:
                        work.wait()
        prof.close()
    del buffer, a
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
