"""nanoGPT logs: ``iter N: loss X, time Yms, mfu Z%``.

``train.py`` prints, every ``log_interval`` iterations (master process only)::

    iter 200: loss 3.2418, time 412.37ms, mfu 38.12%

(before February 2023 without ``, mfu Z%``: such lines are read as well;
fields are read by name, and a line needs only its ``time``)

and, every ``eval_interval`` iterations, before that iteration's own line,
``step N: train loss X, val loss Y``.

Conversions:

* ``time`` is the wall time of that one iteration (``dt``, between the ends
  of two consecutive iterations), including all its gradient-accumulation
  micro-steps: each line is a record of one step; with ``log_interval > 1``
  the lines are a sample of the steps, and ``elapsed_s`` is the time of the
  sampled steps (``steps`` counts them, so rates are exact).
* An iteration that ran an evaluation (its ``step N:`` line precedes it)
  includes the evaluation's time: it is left out of the window
  (``extra_excluded_records``) and of the steps table.
* ``mfu`` is a running average (``0.9 · previous + 0.1 · current`` over the
  printed iterations) of ``6·N + 12·L·d·T`` FLOPs per token (N: parameters
  without the position embedding) against the A100 bf16 dense peak of 312
  TFLOP/s, per process; it prints ``-100.00%`` for the first five
  iterations (read as not reported). Kept as ``reported_mfu`` (a fraction),
  with ``reported_peak_tflops_per_gpu = 312``.
* ``tokens per iteration will be: T`` (whole job, per optimizer step) gives
  each record's ``tokens``; ``number of parameters: P M`` gives ``n_params``
  (the count nanoGPT's MFU uses); ``Overriding: key = value`` lines give
  ``n_layers`` (``n_layer``), ``n_heads`` (``n_head``), ``d_model``
  (``n_embd``), ``seq_len`` (``block_size``), ``micro_batch_size``
  (``batch_size``) and ``precision`` (``dtype``). Defaults of ``train.py``
  that are not printed are not assumed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.errors import DataError
from trainperf.hardware import normalize_precision
from trainperf.importers import records
from trainperf.importers.core import APPROXIMATE, LineFormat
from trainperf.importers.text import NUMBER, CutLine, LineError, number, rank_prefix, step_seconds
from trainperf.schema import APPROXIMATE_INPUTS

NAN = math.nan
NANOGPT_PEAK_TFLOPS = 312.0
"""nanoGPT's ``estimate_mfu`` divides by the A100 bf16 dense peak, 312 TFLOP/s."""
REPORTED = ("mfu",)
_ITER_START = re.compile(r"iter \d+:")
_ITER = re.compile(r"iter (\d+):")
_LOSS = re.compile(rf"\bloss ({NUMBER}),")
_TIME = re.compile(rf"\btime ({NUMBER})ms")
_MFU = re.compile(rf"\bmfu ({NUMBER})%")
"""The fields of an iteration line, read by name: ``mfu`` only since February 2023 (an older train.py prints
none); a line needs only its time."""
_EVAL = re.compile(rf"\bstep (\d+): train loss ({NUMBER}), val loss ({NUMBER})")
_TOKENS = re.compile(r"tokens per iteration will be: ([\d,]+)")
_PARAMS = re.compile(rf"number of parameters: ({NUMBER})M")
_OVERRIDE = re.compile(r"Overriding: (\w+) = (.+?)\s*$")
_OVERRIDES = {"n_layer": "n_layers", "n_head": "n_heads", "n_embd": "d_model", "block_size": "seq_len",
              "batch_size": "micro_batch_size"}


def parse_iter(line: str) -> tuple[int, float, float, float]:
    """``(iteration, loss, seconds, mfu fraction)`` of an iteration line (NaN
    where absent). A line without ``mfu`` (the field printed last since
    February 2023) may be wrapped: :class:`~trainperf.importers.text.CutLine`,
    with what it gives."""
    body = rank_prefix(line)[1]
    match = _ITER.search(body)
    if match is None:
        raise LineError("no 'iter N:' field")
    if _ITER_START.search(body, match.end()):
        raise LineError("two records on one line (interleaved output of several processes)")
    time, loss, mfu = (pattern.search(body, match.end()) for pattern in (_TIME, _LOSS, _MFU))
    if time is None:
        raise LineError("no 'time Yms' field")
    seconds = step_seconds(number(time.group(1)) / 1000.0, "time")
    fraction = number(mfu.group(1)) / 100.0 if mfu is not None else NAN
    record = (int(match.group(1)), number(loss.group(1)) if loss is not None else NAN, seconds,
              fraction if fraction >= 0 else NAN)
    if mfu is None:
        raise CutLine("no 'mfu Z%' field (an older train.py, or a wrapped line)", record)
    return record


class NanoGPTParser(records.IntervalParser[records.Run]):
    anchors = ("iter ", "step ", "tokens per iteration", "number of parameters", "Overriding:")
    start = _ITER_START

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.config: dict[str, Any] = {"reported_peak_tflops_per_gpu": NANOGPT_PEAK_TFLOPS}
        self.tokens = NAN
        self.pending_eval: tuple[int, float] | None = None

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "iter " in line and _ITER_START.search(line):
            return self.read_record(lines, i, number_, parse_iter, "iteration line")
        if match := _EVAL.search(line):
            self.pending_eval = (int(match.group(1)), records.finite(number(match.group(3))))
        elif match := _TOKENS.search(line):
            self.tokens = float(match.group(1).replace(",", ""))
        elif match := _PARAMS.search(line):
            millions = number(match.group(1))
            if 0 < millions < math.inf:
                self.config["n_params"] = millions * 1e6
                half = 0.5 * 10.0 ** -len(match.group(1).partition(".")[2]) / millions  # half the last digit
                if half > APPROXIMATE:
                    self.config[APPROXIMATE_INPUTS] = (f"n_params from the printed {match.group(1)}M, rounded: "
                                                       f"up to {half * 100:.1f} % off, and the FLOPs with it")
            else:
                self.skip(number_, f"number of parameters: {millions:g}M is not a count")
        elif match := _OVERRIDE.search(line):
            self._override(number_, *match.groups())
        return 1

    def _override(self, line: int, key: str, value: str) -> None:
        value = value.strip().strip("'\"")
        if key == "dtype":
            try:
                self.config["precision"] = normalize_precision(value)
            except DataError:
                self.skip(line, f"Overriding: dtype = {value!r} is not a known precision")
        elif key in _OVERRIDES:
            if value.isdigit() and int(value) > 0:
                self.config[_OVERRIDES[key]] = int(value)
            else:
                self.skip(line, f"Overriding: {key} = {value!r} is not a positive whole number")

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, dict(self.config), REPORTED)

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        """Add an iteration line's record (each line times its own step, so every interval is usable)."""
        iteration, loss, seconds, mfu = parsed
        rank = self.rank_of(None, iteration)
        run = self.run_at(line, rank, iteration)
        excluded = 0.0
        if self.pending_eval is not None:
            evaluated, val_loss = self.pending_eval
            run.val_loss = val_loss
            excluded = 1.0 if evaluated == iteration else 0.0
            if evaluated != iteration:  # every rank's line of the evaluated iteration is excluded
                self.pending_eval = None
        run.records.add((rank, iteration, 1.0, seconds, seconds, NAN, self.tokens, loss, NAN, excluded, NAN, mfu))
        return ""

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        return records.printed_step_times(run, config, "iteration times printed by the log", "palm",
                                          origin=0)


class NanoGPT(LineFormat):
    name = "nanogpt"
    title = "a nanoGPT log"
    patterns = (_ITER_START,)
    parser_class = NanoGPTParser
