"""MaxText logs: ``completed step: N, seconds: X, TFLOP/s/device: Y, Tokens/s/device: Z, ...``.

``MetricLogger.log_metrics`` prints, for every step (process 0, through
absl logging: ``I0804 08:14:00.123 140 metric_logger.py:196] ...``)::

    completed step: 9, seconds: 24.706, TFLOP/s/device: 332.463, Tokens/s/device: 1326.307,
    total_weights: 8388608, loss: 0.045

(one line; older versions stop after ``loss``, newer add fields).

Conversions:

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

import math
import re
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import LineFormat, rate_from_reported
from trainperf.importers.text import NUMBER, LineError, field_number, number, rank_prefix, step_seconds, whole

NAN = math.nan
REPORTED = ("tflops_per_gpu", "tokens_per_s_per_gpu")
_STEP = re.compile(r"completed step:\s*(\d+),")
_FIELD = re.compile(rf"\b(seconds|TFLOP/s/device|Tokens/s/device|total_weights|loss):\s*({NUMBER})")
_EVAL = re.compile(rf"eval metrics after step:\s*\d+,\s*loss=({NUMBER})")


def parse_step(line: str) -> tuple[Any, ...]:
    """``(rank, step, seconds, tokens, loss, tflops/device, tokens/s/device)`` (NaN where absent)."""
    rank, body = rank_prefix(line)
    match = _STEP.search(body)
    if match is None:
        raise LineError("no 'completed step: N,' field")
    if _STEP.search(body, match.end()):
        raise LineError("two records on one line (interleaved output of several processes)")
    fields = dict(_FIELD.findall(body, match.end()))
    if "seconds" not in fields:
        raise LineError("no 'seconds:' field")
    seconds = step_seconds(number(fields["seconds"]), "seconds")
    return (rank, whole(match.group(1), "step"), seconds, field_number("total_weights", fields.get("total_weights")),
            field_number("loss", fields.get("loss")), field_number("TFLOP/s/device", fields.get("TFLOP/s/device")),
            field_number("Tokens/s/device", fields.get("Tokens/s/device")))


class MaxTextParser(records.IntervalParser[records.Run]):
    anchors = ("completed step:", "eval metrics after step")
    start = _STEP

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "completed step:" in line:
            return self.read_record(lines, i, number_, parse_step, "step line")
        match = _EVAL.search(line)
        if match and self.run is not None:
            self.run.val_loss = records.finite(number(match.group(1)))
        return 1

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, {}, REPORTED)

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, step, seconds, tokens, loss, tflops, rate = parsed
        records.step_time_records(self, line, self.rank_of(label, step), step, seconds,
                                    tokens if tokens > 0 else NAN, NAN, loss, (tflops, rate))
        return ""

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        measured, steps = records.aggregate(run.records, config, origin=0, least_warmup=2)
        measured["extra_time_source"] = "step times printed by the log"
        if math.isfinite(run.val_loss):
            measured["val_loss"] = run.val_loss
        rate_from_reported(measured, config)
        return measured, steps


class MaxText(LineFormat):
    name = "maxtext"
    title = "a MaxText log"
    patterns = (re.compile(r"completed step:\s*\d+, seconds:"),)
    parser_class = MaxTextParser
