"""llm.c logs (``train_gpt2cu``): ``step N/M | loss X | norm Y | lr Z | T ms | U% bf16 MFU | V tok/s``.

``train_gpt2.cu`` prints, for every optimizer step (process 0 only)::

    step   10/32000 | loss 9.072879 (+nanz)| norm 10.5923 (+nanz)| lr 8.57e-06 | 2749.40 ms | 47.3% bf16 MFU | 381369 tok/s

(older versions: ``step 10/74: train loss 4.367 (acc 4.367) (2749.40 ms, 381369 tok/s)``; the CPU
trainer ``train_gpt2.c``: ``step 1: train loss 4.301069 (took 1288.673000 ms)``, counting from 0).

Conversions:

* ``T ms`` is the time of that one step (CUDA events around the whole
  step, every gradient-accumulation micro-step included): each line is a
  record of one step. The first step (cuBLAS / cuDNN set-up) is warm-up, as
  llm.c itself treats it.
* ``V tok/s`` is a running average (an exponential moving average with
  factor 0.95, bias-corrected) of the whole job's rate, so it lags the step
  times: kept as ``reported_tokens_per_s`` (averaged over the window), never
  used as the measurement while step times are printed.
* ``U% MFU`` is ``(6·N + 6·L·C·T)`` FLOPs per token (the ``llmc`` convention
  of ``trainperf.flops``) times one process's tokens over the step time,
  against llm.c's own peak for the device (``peak TFlops`` in the header);
  it prints ``-100.0%`` for a device it does not know (read as not
  reported). Kept as ``reported_mfu`` (a fraction).
* The header gives ``n_params`` (``num_parameters: N``), ``micro_batch_size``
  (``B=``), ``seq_len`` (``T=``), ``gpus`` (``num_processes=``), the tokens
  of a step (``total_batch_size=``: whole job), ``grad_accum_steps``
  (``=> setting grad_accum_steps=A``); its table gives ``n_layers``
  (``num_layers L``), ``n_heads`` (``num_heads NH``), ``d_model``
  (``channels C``), ``vocab_size`` (``vocab_size V``), ``platform``
  (``device``), ``precision`` and ``reported_peak_tflops_per_gpu`` (``peak
  TFlops``). ``val loss X`` gives ``val_loss``.
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
from trainperf.importers.core import LineFormat
from trainperf.importers.text import NUMBER, LineError, field_number, number, rank_prefix, step_seconds, whole

NAN = math.nan
REPORTED = ("tokens_per_s", "mfu")
_STEP = re.compile(r"\bstep\s+(\d+)(?:/(\d+))?\s*[|:]")
_USUAL = re.compile(r"\bstep\s+(\d+)/\d+ \| loss (\S+) [^|]*\| norm [^|]*\| lr [^|]*\| (\S+) ms \| (\S+)% [\w ]*MFU \| "
                    r"(\S+) tok/s\s*$")
"""The fields in the order llm.c prints them today (other layouts are read field by field)."""
_LOSS = re.compile(rf"\bloss\s+({NUMBER})")
_MS = re.compile(rf"\(?({NUMBER})\s*ms\b")
_MFU = re.compile(rf"({NUMBER})%\s*[\w ]*MFU")
_TOKS = re.compile(rf"({NUMBER})\s*tok/s")
_HEADER = re.compile(r"batch_size B=(\d+) \* seq_len T=(\d+) \* num_processes=(\d+) and total_batch_size=(\d+)")
_ACCUM = re.compile(r"=> setting grad_accum_steps=(\d+)")
_PARAMS = re.compile(r"num_parameters:\s*(\d+)")
_TABLE = re.compile(r"^\|\s*([A-Za-z_ ()]+?)\s*\|\s*(.*?)\s*\|\s*$")
_VAL = re.compile(rf"^val loss\s+({NUMBER})")
_INT_ROWS = {"num_layers L": "n_layers", "num_heads NH": "n_heads", "channels C": "d_model",
             "vocab_size V": "vocab_size", "num_parameters": "n_params", "micro batch size B": "micro_batch_size",
             "sequence length T": "seq_len", "num_processes": "gpus"}
"""Rows of the header table read as whole numbers, and their columns."""


def parse_step(line: str) -> tuple[Any, ...]:
    """``(rank, step, loss, seconds, tok/s, mfu fraction)`` of a step line (NaN where absent)."""
    rank, body = rank_prefix(line)
    usual = _USUAL.search(body)
    if usual is not None and body.count("step ") == 1:
        step, loss, ms, mfu, rate = usual.groups()
        mfu_value = field_number("MFU", mfu) / 100.0
        return (rank, int(step), field_number("loss", loss), step_seconds(field_number("ms", ms) / 1000.0, "step time"),
                field_number("tok/s", rate), mfu_value if mfu_value >= 0 else NAN)
    match = _STEP.search(body)
    if match is None:
        raise LineError("no 'step N/M |' field")
    if _STEP.search(body, match.end()):
        raise LineError("two records on one line (interleaved output of several processes)")
    rest = body[match.end():]
    ms = _MS.search(rest)
    if ms is None:
        raise LineError("no 'ms' step time")
    seconds = step_seconds(number(ms.group(1)) / 1000.0, "step time")
    loss, mfu, rate = (_LOSS.search(rest), _MFU.search(rest), _TOKS.search(rest))
    mfu_value = field_number("MFU", mfu.group(1) if mfu else None) / 100.0
    return (rank, whole(match.group(1), "step"), field_number("loss", loss.group(1) if loss else None), seconds,
            field_number("tok/s", rate.group(1) if rate else None), mfu_value if mfu_value >= 0 else NAN)


class LlmcParser(records.IntervalParser[records.Run]):
    anchors = ("step ", "batch_size B=", "grad_accum_steps=", "num_parameters", "| ", "val loss")
    start = _STEP

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.config: dict[str, Any] = {}
        self.tokens = NAN
        self.val_loss = NAN

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "step " in line and _STEP.search(line):
            return self.read_record(lines, i, number_, parse_step, "step line")
        body = rank_prefix(line)[1]
        if match := _HEADER.search(body):
            micro, seq, processes, total = (int(x) for x in match.groups())
            self.config.update(micro_batch_size=micro, seq_len=seq, gpus=processes)
            self.tokens = float(total)
        elif match := _ACCUM.search(body):
            self.config["grad_accum_steps"] = int(match.group(1))
        elif match := _VAL.search(body):
            if self.run is not None:
                self.run.val_loss = records.finite(number(match.group(1)))
        elif match := _TABLE.match(body):
            self._table_row(number_, *match.groups())
        elif match := _PARAMS.search(body):
            self.config["n_params"] = float(match.group(1))
        self._share_config()
        return 1

    def _table_row(self, line: int, key: str, value: str) -> None:
        if key in _INT_ROWS:
            if value.isdigit() and int(value) > 0:
                self.config[_INT_ROWS[key]] = int(value) if key != "num_parameters" else float(value)
        elif key == "total batch size" and value.isdigit():
            self.tokens = float(value)
        elif key == "device" and value:
            self.config["platform"] = value
        elif key == "peak TFlops":
            try:
                peak = number(value)
            except LineError:
                return
            if 0 < peak < math.inf:
                self.config["reported_peak_tflops_per_gpu"] = peak
        elif key == "precision":
            try:
                self.config["precision"] = normalize_precision(value.lower())
            except DataError:
                self.skip(line, f"precision {value!r} is not a known precision")

    def _share_config(self) -> None:
        """The configuration read so far also belongs to a run that has no records yet."""
        if self.run is not None and not len(self.run.records):
            self.run.config.update(self.config)

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, dict(self.config), REPORTED)

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        """Add a step line's record (each line times its own step)."""
        label, step, loss, seconds, rate, mfu = parsed
        records.step_time_records(self, line, self.rank_of(label, step), step, seconds, self.tokens, NAN, loss,
                                    (rate, mfu))
        return ""

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        return records.printed_step_times(run, config, "step times printed by the log", "llmc", origin=1)


class Llmc(LineFormat):
    name = "llmc"
    title = "an llm.c log"
    # "step(?<=\bstep)" is "\bstep" with the word first: the engine then scans the head for it quickly
    patterns = (re.compile(r"step(?<=\bstep)\s+\d+/\d+\s*\|[^\n]*\bms\b"),
                re.compile(r"step(?<=\bstep)\s+\d+/\d+: train loss"),
                re.compile(r"step(?<=\bstep)\s+\d+: train loss [^\n]*\(took [\d.]+ ms\)"))
    parser_class = LlmcParser
