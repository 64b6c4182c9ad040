"""The stacks read through the vocabulary with their own keys (``generic.Stack``): NeMo, MaxText, llm.c and
nanoGPT, each with the reader of its configuration lines where it prints any (the lines each prints and what each
figure means: docs/importers.md, "Formats", "What each log says"); Megatron's: ``importers.megatron``.
"""

from __future__ import annotations

import math
import re

from trainperf.errors import DataError
from trainperf.hardware import normalize_precision
from trainperf.importers.core import APPROXIMATE
from trainperf.importers.generic import GenericParser, Stack
from trainperf.importers.settings import as_number
from trainperf.importers.text import NUMBER, number, rank_prefix
from trainperf.schema import APPROXIMATE_INPUTS

NEMO = Stack(
    "nemo", "a NeMo log",
    keys={"global_step": "step", "train_step_timing in s": "step_time_s", "consumed_samples": "samples_total",
          "reduced_train_loss": "loss", "global_batch_size": "global_batch_size"},
    start=r"train_step_timing in s\s*[=:]", time="train_step_timing in s", anchors=("train_step_timing in s",),
    sniff=r"train_step_timing in s\s*[=:]\s*[-+.\d]")

MAXTEXT = Stack(
    "maxtext", "a MaxText log",
    keys={"completed step": "step", "seconds": "step_time_s", "TFLOP/s/device": "tflops_per_gpu",
          "TFLOP/s": "tflops_per_gpu", "Tokens/s/device": "tokens_per_s_per_gpu", "total_weights": "tokens",
          "loss": "loss"},
    start=r"completed step:", time="seconds", anchors=("completed step:", "eval metrics after step"),
    sniff=r"completed step:\s*\d+, seconds:", val_loss=rf"eval metrics after step:\s*\d+,\s*loss=(?P<loss>{NUMBER})",
    warmup=2)

def precision(parser: GenericParser, text: str, number_: int, said: str) -> None:
    """The run's ``precision`` from ``text``; line ``number_`` skipped (``said`` naming it) where it is none."""
    try:
        parser.config["precision"] = normalize_precision(text)
    except DataError:
        parser.skip(number_, f"{said} is not a known precision")


_HEADER = re.compile(r"batch_size B=(\d+) \* seq_len T=(\d+) \* num_processes=(\d+) and total_batch_size=(\d+)")
_ACCUM = re.compile(r"=> setting grad_accum_steps=(\d+)")
_LLMC_PARAMS = re.compile(r"num_parameters:\s*(\d+)")
_TABLE = re.compile(r"^\|\s*([A-Za-z_ ()]+?)\s*\|\s*(.*?)\s*\|\s*$")
_INT_ROWS = {"num_layers L": "n_layers", "num_heads NH": "n_heads", "channels C": "d_model",
             "vocab_size V": "vocab_size", "num_parameters": "n_params", "micro batch size B": "micro_batch_size",
             "sequence length T": "seq_len", "num_processes": "gpus"}
"""Rows of the header table read as whole numbers, and their columns."""


def llmc_configure(parser: GenericParser, line: str, number_: int) -> None:
    """llm.c: the header line, the accumulation steps, the parameter count and the rows of the header table."""
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
        elif key == "peak TFlops" and 0 < (peak := as_number(value) or 0.0) < math.inf:
            config["reported_peak_tflops_per_gpu"] = peak
        elif key == "precision":
            precision(parser, value.lower(), number_, f"precision {value!r}")
    elif match := _LLMC_PARAMS.search(body):
        config["n_params"] = float(match.group(1))


# "step(?<=\bstep)" is "\bstep" with the word first: the engine then scans for it quickly
LLMC = Stack(
    "llmc", "an llm.c log", keys={"loss": "loss"}, start=r"step(?<=\bstep)\s+(?P<step>\d+)(?:/\d+)?\s*[|:]",
    time="ms", anchors=("step ", "batch_size B=", "grad_accum_steps=", "num_parameters", "| ", "val loss"),
    sniff=r"step(?<=\bstep)\s+\d+/\d+\s*\|[^\n]*\bms\b|step(?<=\bstep)\s+\d+/\d+: train loss"
          r"|step(?<=\bstep)\s+\d+: train loss [^\n]*\(took [\d.]+ ms\)",
    origin=1, convention="llmc", val_loss=rf"^val loss\s+(?P<loss>{NUMBER})", separator=r"\s+",
    units={"MFU": "%"}, after={"ms": "step_time_s", "tok/s": "tokens_per_s", "MFU": "mfu"}, rate_measures=False,
    usual=r" loss (?P<loss>[^ ]+) [^|]*\| norm [^|]*\| lr [^|]*\| (?P<step_time_s>[^ ]+) ms \| "
          r"(?P<mfu>[^ ]+%) [^|]*MFU \| (?P<tokens_per_s>[^ ]+) tok/s\s*$", configure=llmc_configure)

NANOGPT_PEAK_TFLOPS = 312.0
"""nanoGPT's ``estimate_mfu`` divides by the A100 bf16 dense peak, 312 TFLOP/s."""
_TOKENS = re.compile(r"tokens per iteration will be: ([\d,]+)")
_NANOGPT_PARAMS = re.compile(rf"number of parameters: ({NUMBER})M")
_OVERRIDE = re.compile(r"Overriding: (\w+) = (.+?)\s*$")
_OVERRIDES = {"n_layer": "n_layers", "n_head": "n_heads", "n_embd": "d_model", "block_size": "seq_len",
              "batch_size": "micro_batch_size"}


def nanogpt_configure(parser: GenericParser, line: str, number_: int) -> None:
    """nanoGPT: the tokens of a step, ``n_params`` (marked approximate where rounded) and the overridden settings."""
    if match := _TOKENS.search(line):
        parser.step_tokens = float(match.group(1).replace(",", ""))
    elif match := _NANOGPT_PARAMS.search(line):
        millions = number(match.group(1))
        if not 0 < millions < math.inf:
            parser.skip(number_, f"number of parameters: {millions:g}M is not a count")
            return
        parser.config["n_params"] = millions * 1e6
        half = 0.5 * 10.0 ** -len(match.group(1).partition(".")[2]) / millions  # half the last digit
        if half > APPROXIMATE:
            parser.config[APPROXIMATE_INPUTS] = (f"n_params from the printed {match.group(1)}M, rounded: "
                                                 f"up to {half * 100:.1f} % off, and the FLOPs with it")
    elif match := _OVERRIDE.search(line):
        key, value = match.group(1), match.group(2).strip().strip("'\"")
        if key == "dtype":
            precision(parser, value, number_, f"Overriding: dtype = {value!r}")
        elif key in _OVERRIDES:
            if value.isdigit() and int(value) > 0:
                parser.config[_OVERRIDES[key]] = int(value)
            else:
                parser.skip(number_, f"Overriding: {key} = {value!r} is not a positive whole number")


NANOGPT = Stack(
    "nanogpt", "a nanoGPT log", keys={"iter": "step", "loss": "loss", "time": "step_time_s", "mfu": "mfu"},
    start=r"iter \d+:", time="time", anchors=("iter ", "step ", "tokens per iteration", "number of parameters",
                                             "Overriding:"),
    sniff=r"iter \d+:", time_source="iteration times printed by the log", convention="palm",
    val_loss=rf"\bstep (?P<step>\d+): train loss (?:{NUMBER}), val loss (?P<loss>{NUMBER})",
    config={"reported_peak_tflops_per_gpu": NANOGPT_PEAK_TFLOPS}, separator=r"\s+",
    units={"time": "ms", "mfu": "%"}, last="mfu", configure=nanogpt_configure)
