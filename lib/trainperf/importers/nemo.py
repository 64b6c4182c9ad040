"""NeMo logs: ``train_step_timing in s`` with ``global_step`` (NeMo 1 progress
bar, NeMo 2 / Megatron-Bridge console lines).

NeMo 1 (PyTorch Lightning's progress bar; a terminal keeps its last redraw,
a redirected log every one)::

    Epoch 0: : 100%|##########| 100/100 [10:48<00:00, reduced_train_loss=0.0172, global_step=99.00,
    consumed_samples=25600.0, train_step_timing in s=3.130]

NeMo 2::

    Training epoch 0, iteration 1/249 | lr: 3.922e-06 | global_batch_size: 8 | global_step: 1 |
    reduced_train_loss: 1.653 | train_step_timing in s: 2.505 | consumed_samples: 16

(one line each).

Conversions:

* ``train_step_timing in s`` is the wall time of the step ``global_step``
  (counted from 0): each line is a record of one step. Step 0 is warm-up; a
  log that starts later (a progress bar's last redraw) is measured whole. A
  line needs only its timing: one without ``global_step`` is the next step
  of its rank (the first such line step 0).
* ``consumed_samples`` counts the whole job's samples up to and including
  the step: a record's ``samples`` is its change from the previous line where
  that line is the step before, else ``global_batch_size`` where printed.
* ``reduced_train_loss`` gives ``train_loss``; ``global_batch_size`` gives the
  run's ``global_batch_size``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import LineFormat
from trainperf.importers.text import NUMBER, LineError, field_number, number, rank_prefix, step_seconds

NAN = math.nan
_TIMING = re.compile(rf"train_step_timing in s\s*[=:]\s*({NUMBER})")
_FIELD = re.compile(rf"\b(global_step|consumed_samples|reduced_train_loss|global_batch_size|val_loss)\s*[=:]\s*"
                    rf"({NUMBER})")


def parse_step(line: str) -> tuple[Any, ...]:
    """``(rank, global step, seconds, consumed samples, global batch, loss)``
    (NaN where absent; the step None where the line prints none)."""
    rank, body = rank_prefix(line)
    timing = _TIMING.search(body)
    if timing is None:
        raise LineError("no 'train_step_timing in s' field")
    if _TIMING.search(body, timing.end()):
        raise LineError("two records on one line (interleaved output of several processes)")
    fields = dict(_FIELD.findall(body))
    step = field_number("global_step", fields.get("global_step"))
    if "global_step" in fields and not (math.isfinite(step) and step >= 0 and step == int(step)):
        raise LineError(f"global_step {step:g} is not a step number")
    return (rank, int(step) if "global_step" in fields else None,
            step_seconds(number(timing.group(1)), "train_step_timing"),
            field_number("consumed_samples", fields.get("consumed_samples")),
            field_number("global_batch_size", fields.get("global_batch_size")),
            field_number("reduced_train_loss", fields.get("reduced_train_loss")))


class NeMoParser(records.IntervalParser[records.Run]):
    anchors = ("train_step_timing in s", "val_loss")
    start = _TIMING

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "train_step_timing in s" in line:
            return self.read_record(lines, i, number_, parse_step, "step line")
        return 1

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, {}, ())

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, step, seconds, consumed, batch, loss = parsed
        if step is None:
            step = self.count_step(label) - 1  # counted from 0, as NeMo counts
        rank = self.rank_of(label, step)
        previous = self.run.previous.get(rank) if self.run is not None else None
        samples = batch if batch > 0 else NAN
        if previous is not None and len(previous) == 2 and previous[0] == step - 1 and consumed - previous[1] > 0:
            samples = consumed - previous[1]
        run = records.step_time_records(self, line, rank, step, seconds, NAN, samples, loss, ())
        run.previous[rank] = (step, consumed)
        if batch > 0:
            run.config["global_batch_size"] = int(batch)
        return ""

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        measured, steps = records.aggregate(run.records, config, origin=0)
        measured["extra_time_source"] = "step times printed by the log"
        return measured, steps


class NeMo(LineFormat):
    name = "nemo"
    title = "a NeMo log"
    patterns = (_TIMING,)
    parser_class = NeMoParser
