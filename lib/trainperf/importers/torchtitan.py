"""torchtitan logs: ``MetricsProcessor.log``'s ``step: N  loss: ...`` lines, timed by their timestamps, and the
lines that give the run's columns (docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import REPORTED_CONVENTION, line_format, rate_from_reported, timed_by
from trainperf.importers.text import (NUMBER, CutLine, LineError, field_number, number, one_record, rank_prefix,
                                      timestamp)

REPORTED = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
_STEP = re.compile(r"step:\s*(\d+)\s+loss:")
_USUAL = re.compile(r"step:\s*(\d+)\s+loss:\s*(\S+)\s+(?:grad_norm:\s*\S+\s+)?memory:\s*([-+\d.eE]+)GiB\S*\s+"
                    r"(?:tps|wps):\s*(\d{1,3}(?:,\d{3})+|\d+)\s+(?:tflops:\s*(\S+)\s+)?mfu:\s*([-+\d.eE]+)%")
"""The fields in the order torchtitan prints them (other layouts are read field by field)."""
_PAIR = re.compile(r"(\w+):\s*(\S+)")
_LEADING_NUMBER = re.compile(NUMBER)
_BATCH = re.compile(r"local batch size (\d+), global batch size (\d+)(?:, gradient accumulation steps (\d+))?"
                    r", sequence length (\d+)")
_MODEL = re.compile(r"Model (.+?) size: ([\d,]+) total parameters")
_PEAK = re.compile(rf"Peak FLOPS used for computing MFU: ({NUMBER})")
_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([\d,\s]+)\]")
_MESH_DEGREES = {"tp": "tensor_parallel", "pp": "pipeline_parallel", "cp": "context_parallel",
                 "ep": "expert_parallel"}
"""torchtitan's mesh dimension names and the degrees they give."""
_DEVICE = re.compile(r"(?:CUDA|GPU|ROCM|XPU|NPU) capacity: (.+?) with [\d.]+\s*GiB memory")
_BUILDING = re.compile(r"Building \S+ .*?with (?:\w+\((?P<fields>.*)|\{\s*$)")
"""``Building M F with XModelArgs(dim=..., ...)`` (up to v0.2.0) or ``... with {``
and the arguments as indented JSON, one a line (v0.2.1, v0.2.2)."""
_ARGS = {"dim": "d_model", "n_layers": "n_layers", "n_heads": "n_heads", "vocab_size": "vocab_size",
         "head_dim": "head_dim", "enable_weight_tying": "tied_embeddings"}
"""torchtitan's model arguments and the runs columns they give."""
_ARG_NAMES = "|".join(_ARGS)
_REPR_ARG = re.compile(rf"\b({_ARG_NAMES})=([^,()\s]+)")
_JSON_ARG = re.compile(rf'"({_ARG_NAMES})":\s*([^,\s]+)')
_VALIDATE = re.compile(rf"validate step:\s*\d+\s+loss:\s*({NUMBER})")


def parse_step(line: str) -> tuple[Any, ...]:
    """``(rank, step, loss, memory GiB, tps, tflops, mfu fraction, timestamp)`` of a step line (NaN where absent;
    rank None without a launcher prefix); one without ``mfu``, printed last, is cut or wrapped (``text.CutLine``)."""
    rank, body = rank_prefix(line)
    match = _STEP.search(body)
    if match is None:
        raise LineError("no 'step: N  loss:' fields")
    at = match.start()
    one_record(_STEP, body, match.end())
    when = timestamp(body[:at])
    usual = _USUAL.match(body, at)
    if usual is not None:
        step, loss, memory, tps, tflops, mfu = usual.groups()
        return _step_record(rank, when, step, loss, memory, tps.replace(",", ""), tflops, mfu)
    pairs = _PAIR.findall(body, match.end(1))
    complete = bool(pairs) and pairs[-1][0] == "mfu" and pairs[-1][1].endswith("%")
    last = "" if complete else pairs.pop()[0] if pairs else "loss"  # the last field of a cut line may be cut too
    fields = dict(pairs)
    tps = fields.get("tps", fields.get("wps"))
    if not complete and math.isnan(when) and tps is None:
        raise LineError(f"no timestamp and no 'tps:' field (a cut line: its last field, {last!r}, is not read)")
    record = _step_record(rank, when, match.group(1), fields.get("loss"), _before(fields.get("memory"), "GiB"),
                          tps, fields.get("tflops"), _before(fields.get("mfu"), "%"))
    if complete:
        return record
    raise CutLine(f"no 'mfu:' field: cut or wrapped (its last field, {last!r}, is not read)", record)


def _step_record(rank: int | None, when: float, step: str, loss: str | None, memory: str | None,
                 tps: str | None, tflops: str | None, mfu: str | None) -> tuple[Any, ...]:
    """The record of a step line from the texts of its fields (None: absent); :class:`LineError` for one that is
    not a number, or without a timestamp and a ``tps`` to time it."""
    if math.isnan(when) and tps is None:
        raise LineError("no timestamp and no 'tps:' (or 'wps:') field: nothing times the step")
    rate = field_number("tps", tps)
    if not (rate > 0 and math.isfinite(rate)) and tps is not None:
        raise LineError(f"tps must be a positive number, not {rate:g}")
    gib = field_number("memory", memory)
    if gib < 0 or gib == math.inf:
        raise LineError(f"memory: {gib:g} GiB is not a size")
    # torchtitan prints "tflops: 0.00  mfu: 0.00%" for a model it counts no FLOPs of (Flux): none reported
    return (rank, int(step), field_number("loss", loss), gib, rate, field_number("tflops", tflops) or math.nan,
            field_number("mfu", mfu) / 100.0 or math.nan, when)


def _before(text: str | None, unit: str) -> str | None:
    """The number that ``text`` starts with, which must be followed by ``unit``."""
    if text is None:
        return None
    head = _LEADING_NUMBER.match(text)
    if head is None or not text.startswith(unit, head.end()):
        raise LineError(f"{text[:40]!r} is not a number of {unit}")
    return head.group(0)


class TorchtitanParser(records.IntervalParser[records.Run]):
    anchors = ("step:", "batch size", "total parameters", "Peak FLOPS", "device mesh", "capacity:", "Building ",
               *(f'"{name}"' for name in _ARGS))
    start = _STEP
    reported = REPORTED

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.json_args = False  # inside the model arguments printed as JSON

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "step:" in line:
            if "validate step:" in line:
                if (match := _VALIDATE.search(line)) and self.run is not None:
                    self.run.val_loss = records.finite(number(match.group(1)))
                return 1
            return self.read_record(lines, i, number_, parse_step, "step line") if _STEP.search(line) else 1
        config = self.config
        json_arg = _JSON_ARG.search(line) if self.json_args else None
        self.json_args = json_arg is not None
        if json_arg is not None:
            config.update(_model_args([json_arg.groups()]))
        elif match := _BUILDING.search(line):
            self.json_args = match.group("fields") is None
            config.update(_model_args(_REPR_ARG.findall(match.group("fields") or "")))
        elif match := _BATCH.search(line):
            micro, batch, accum, seq = match.groups()
            config.update(micro_batch_size=int(micro), global_batch_size=int(batch), seq_len=int(seq))
            if accum is not None:
                config["grad_accum_steps"] = int(accum)
        elif match := _MODEL.search(line):
            config.update(model=match.group(1).strip(), n_params=float(match.group(2).replace(",", "")))
        elif match := _PEAK.search(line):
            config["reported_peak_tflops_per_gpu"] = number(match.group(1)) / 1e12
        elif match := _MESH.search(line):
            names = [x.strip().strip("'\"") for x in match.group(1).split(",")]
            sizes = [int(x) for x in match.group(2).replace(" ", "").split(",") if x]
            if len(names) == len(sizes):
                degrees = dict(zip(names, sizes))
                config["gpus"] = math.prod(size for name, size in degrees.items() if name != "ep")
                config.update({_MESH_DEGREES[name]: size for name, size in degrees.items() if name in _MESH_DEGREES})
        elif match := _DEVICE.search(line):
            config["platform"] = match.group(1).strip()
        for key in ("gpus", "micro_batch_size", "global_batch_size", "seq_len", "grad_accum_steps", "n_params",
                    "d_model", "n_layers", "n_heads", "vocab_size", "head_dim"):
            if key in config and not config[key] > 0:
                del config[key]
        return 1

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, step, loss, memory, tps, tflops, mfu, when = parsed
        return self.add_timed(line, label, step, when, loss, memory, (tps, tflops, mfu), first=1)[1]

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        measured, steps = records.measure_window(run.records, config, None if run.restarted else 1)
        if math.isfinite(run.val_loss):
            measured["val_loss"] = run.val_loss
        measured[REPORTED_CONVENTION] = "torchtitan"
        timed_by(measured, "log timestamps")
        rate_from_reported(measured, config)
        return measured, steps


def _model_args(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Runs columns from torchtitan's ``(argument, value)`` pairs: whole numbers, and ``enable_weight_tying`` as
    ``tied_embeddings`` (``None`` / ``null`` values are left out)."""
    columns: dict[str, Any] = {}
    for name, value in pairs:
        if name == "enable_weight_tying" and value.lower() in ("true", "false"):
            columns["tied_embeddings"] = value.lower() == "true"
        elif value.isdigit():
            columns[_ARGS[name]] = int(value)
    return columns


TORCHTITAN = line_format("torchtitan", "a torchtitan log", (_STEP,), TorchtitanParser)
