"""MaxText logs: ``completed step: N, seconds: X, TFLOP/s/device: Y, Tokens/s/device: Z, ...``.

``MetricLogger.log_metrics`` prints, for every step (process 0, through
absl logging: ``I0804 08:14:00.123 140 metric_logger.py:196] ...``)::

    completed step: 9, seconds: 24.706, TFLOP/s/device: 332.463, Tokens/s/device: 1326.307,
    total_weights: 8388608, loss: 0.045

(one line; older versions stop after ``loss``, newer add fields).

What the vocabulary gets from it (``trainperf.importers.generic.Stack``):

* ``seconds`` (``perf/step_time_seconds``) is the host's time of that one
  step: each line is a record of one step. Steps count from 0; step 0
  includes compilation, and step 1, dispatched asynchronously right after
  it, prints the time of its dispatch only (0.631 s for a 10.6 s step in a
  2026 Gemma log, AI-Hypercomputer/maxtext#4847): both are warm-up unless
  the run states its own (a log that starts later, e.g. one line quoted
  from a long run, is measured whole).
* ``total_weights`` is the number of (non-padding) target tokens of the
  whole step: the record's ``tokens``.
* ``Tokens/s/device`` (per device: the step's tokens over its time and the
  devices) is kept as ``reported_tokens_per_s_per_gpu``; where
  ``total_weights`` is not printed and no batch size is given, it times
  ``gpus`` is the run's throughput. ``TFLOP/s/device`` (MaxText's own FLOPs
  count, ``calculate_tflops_training_per_device``) is kept as
  ``reported_tflops_per_gpu``.
* ``eval metrics after step: N, loss=X`` gives ``val_loss``.
"""

from __future__ import annotations

from trainperf.importers.generic import Stack, StackFormat
from trainperf.importers.text import NUMBER

MAXTEXT = Stack(
    "maxtext", "a MaxText log",
    keys={"completed step": "step", "seconds": "step_time_s", "TFLOP/s/device": "tflops_per_gpu",
          "Tokens/s/device": "tokens_per_s_per_gpu", "total_weights": "tokens", "loss": "loss"},
    start=r"completed step:", time="seconds", anchors=("completed step:", "eval metrics after step"),
    sniff=r"completed step:\s*\d+, seconds:", val_loss=rf"eval metrics after step:\s*\d+,\s*loss=(?P<loss>{NUMBER})",
    warmup=2)
parse_step = MAXTEXT.parse


class MaxText(StackFormat):
    def __init__(self) -> None:
        super().__init__(MAXTEXT)
