"""llm.c logs: ``train_gpt2.cu`` (``train_gpt2cu``) prints, for every optimizer step (process 0 only)::

    step   10/32000 | loss 9.072879 (+nanz)| norm 10.5923 (+nanz)| lr 8.57e-06 | 2749.40 ms | 47.3% bf16 MFU | 381369 tok/s

(older versions: ``step 10/74: train loss 4.367 (acc 4.367) (2749.40 ms, 381369 tok/s)``; the CPU
trainer ``train_gpt2.c``: ``step 1: train loss 4.301069 (took 1288.673000 ms)``, counting from 0).
Read as the :data:`LLMC` stack (the time, rate and MFU printed after their values): each line is a record of
one step; the header line and table give the run's columns. What each figure means (the lagging ``tok/s`` is
never the measurement): docs/importers.md ("What each log says").
"""

from __future__ import annotations

import math
import re

from trainperf.errors import DataError
from trainperf.hardware import normalize_precision
from trainperf.importers.generic import GenericParser, Stack
from trainperf.importers.text import NUMBER, LineError, number, rank_prefix

_HEADER = re.compile(r"batch_size B=(\d+) \* seq_len T=(\d+) \* num_processes=(\d+) and total_batch_size=(\d+)")
_ACCUM = re.compile(r"=> setting grad_accum_steps=(\d+)")
_PARAMS = re.compile(r"num_parameters:\s*(\d+)")
_TABLE = re.compile(r"^\|\s*([A-Za-z_ ()]+?)\s*\|\s*(.*?)\s*\|\s*$")
_INT_ROWS = {"num_layers L": "n_layers", "num_heads NH": "n_heads", "channels C": "d_model",
             "vocab_size V": "vocab_size", "num_parameters": "n_params", "micro batch size B": "micro_batch_size",
             "sequence length T": "seq_len", "num_processes": "gpus"}
"""Rows of the header table read as whole numbers, and their columns."""


def configure(parser: GenericParser, line: str, number_: int) -> None:
    """The header line, the accumulation steps, the parameter count and the rows of the header table."""
    body, config = rank_prefix(line)[1], parser.config
    if match := _HEADER.search(body):
        micro, seq, processes, total = (int(x) for x in match.groups())
        config.update(micro_batch_size=micro, seq_len=seq, gpus=processes)
        parser.step_tokens = float(total)
    elif match := _ACCUM.search(body):
        config["grad_accum_steps"] = int(match.group(1))
    elif match := _TABLE.match(body):
        key, value = match.groups()
        if key in _INT_ROWS and value.isdigit() and int(value) > 0:
            config[_INT_ROWS[key]] = int(value) if key != "num_parameters" else float(value)
        elif key == "total batch size" and value.isdigit():
            parser.step_tokens = float(value)
        elif key == "device" and value:
            config["platform"] = value
        elif key == "peak TFlops":
            try:
                peak = number(value)
            except LineError:
                return
            if 0 < peak < math.inf:
                config["reported_peak_tflops_per_gpu"] = peak
        elif key == "precision":
            try:
                config["precision"] = normalize_precision(value.lower())
            except DataError:
                parser.skip(number_, f"precision {value!r} is not a known precision")
    elif match := _PARAMS.search(body):
        config["n_params"] = float(match.group(1))
    if parser.run is not None and not len(parser.run.records):
        parser.run.config.update(config)


# "step(?<=\bstep)" is "\bstep" with the word first: the engine then scans for it quickly
LLMC = Stack(
    "llmc", "an llm.c log", keys={"loss": "loss"}, start=r"step(?<=\bstep)\s+(?P<step>\d+)(?:/\d+)?\s*[|:]",
    time="ms", anchors=("step ", "batch_size B=", "grad_accum_steps=", "num_parameters", "| ", "val loss"),
    sniff=r"step(?<=\bstep)\s+\d+/\d+\s*\|[^\n]*\bms\b|step(?<=\bstep)\s+\d+/\d+: train loss"
          r"|step(?<=\bstep)\s+\d+: train loss [^\n]*\(took [\d.]+ ms\)",
    origin=1, convention="llmc", val_loss=rf"^val loss\s+(?P<loss>{NUMBER})", separator=r"\s+",
    units={"MFU": "%"}, after={"ms": "step_time_s", "tok/s": "tokens_per_s", "MFU": "mfu"}, rate_measures=False,
    usual=r" loss (?P<loss>[^ ]+) [^|]*\| norm [^|]*\| lr [^|]*\| (?P<step_time_s>[^ ]+) ms \| "
          r"(?P<mfu>[^ ]+%) [^|]*MFU \| (?P<tokens_per_s>[^ ]+) tok/s\s*$", configure=configure)
parse_step = LLMC.parse
