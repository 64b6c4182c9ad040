"""nanoGPT logs: ``train.py`` prints, every ``log_interval`` iterations (master process only)::

    iter 200: loss 3.2418, time 412.37ms, mfu 38.12%

(before February 2023 without ``, mfu Z%``) and, every ``eval_interval`` iterations, before that iteration's own
line, ``step N: train loss X, val loss Y``. Read as the :data:`NANOGPT` stack: each line is a record of its one
iteration, the one that ran an evaluation left out of the window; the configuration lines give the run's columns.
What each figure means: docs/importers.md ("What each log says").
"""

from __future__ import annotations

import math
import re

from trainperf.errors import DataError
from trainperf.hardware import normalize_precision
from trainperf.importers.core import APPROXIMATE
from trainperf.importers.generic import GenericParser, Stack
from trainperf.importers.text import NUMBER, number
from trainperf.schema import APPROXIMATE_INPUTS

NANOGPT_PEAK_TFLOPS = 312.0
"""nanoGPT's ``estimate_mfu`` divides by the A100 bf16 dense peak, 312 TFLOP/s."""
_TOKENS = re.compile(r"tokens per iteration will be: ([\d,]+)")
_PARAMS = re.compile(rf"number of parameters: ({NUMBER})M")
_OVERRIDE = re.compile(r"Overriding: (\w+) = (.+?)\s*$")
_OVERRIDES = {"n_layer": "n_layers", "n_head": "n_heads", "n_embd": "d_model", "block_size": "seq_len",
              "batch_size": "micro_batch_size"}


def configure(parser: GenericParser, line: str, number_: int) -> None:
    """The tokens of a step, ``n_params`` (marked approximate where rounded) and the overridden settings."""
    if match := _TOKENS.search(line):
        parser.step_tokens = float(match.group(1).replace(",", ""))
    elif match := _PARAMS.search(line):
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
            try:
                parser.config["precision"] = normalize_precision(value)
            except DataError:
                parser.skip(number_, f"Overriding: dtype = {value!r} is not a known precision")
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
    units={"time": "ms", "mfu": "%"}, last="mfu", configure=configure)
parse_iter = NANOGPT.parse
