"""MaxText logs: ``MetricLogger.log_metrics`` prints, for every step (process 0, through absl logging:
``I0804 08:14:00.123 140 metric_logger.py:196] ...``)::

    completed step: 9, seconds: 24.706, TFLOP/s/device: 332.463, Tokens/s/device: 1326.307,
    total_weights: 8388608, loss: 0.045

(one line; older versions stop after ``loss``, newer add fields). Read as the :data:`MAXTEXT` stack: each line is
a record of its one step (``seconds``: ``perf/step_time_seconds``), steps 0 and 1 warm-up; ``TFLOP/s/device`` is
``calculate_tflops_training_per_device``'s. What each figure means and why step 1 is warm-up: docs/importers.md
("What each log says").
"""

from __future__ import annotations

from trainperf.importers.generic import Stack
from trainperf.importers.text import NUMBER

MAXTEXT = Stack(
    "maxtext", "a MaxText log",
    keys={"completed step": "step", "seconds": "step_time_s", "TFLOP/s/device": "tflops_per_gpu",
          "Tokens/s/device": "tokens_per_s_per_gpu", "total_weights": "tokens", "loss": "loss"},
    start=r"completed step:", time="seconds", anchors=("completed step:", "eval metrics after step"),
    sniff=r"completed step:\s*\d+, seconds:", val_loss=rf"eval metrics after step:\s*\d+,\s*loss=(?P<loss>{NUMBER})",
    warmup=2)
parse_step = MAXTEXT.parse
