"""The logs behind seed reports 003 and 004, which print a run's totals rather than step lines (docs/importers.md,
"What each log says"): per-rank epoch timings (``[Rank N] Epoch E timing breakdown:`` and ``Average metrics:``
blocks, runs separated by Markdown headings) and batch-size timing summaries (one run per ``Batch Size = B,
Accumulation Steps = A`` section).
"""

from __future__ import annotations

import math
import re
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.aggregate import measure, summarize
from trainperf.importers.core import ParsedRun, RunParser, line_format, timed_by
from trainperf.importers.records import finite
from trainperf.importers.text import NUMBER, LineError, number, whole
from trainperf.schema import STEP_INTERVAL_COLUMNS

HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(\S.*?)\s*#*\s*$")
_BLOCK = re.compile(r"(?:Rank\s+(\d+)\s+)?Epoch\s+(\d+)\s+timing breakdown:")
_AVERAGE = re.compile(r"\bAverage metrics:")
_EPOCH_VALUE = re.compile(rf"\s*({NUMBER})\s*(?:seconds|s)?\s*$")
_EPOCH_LOSS = re.compile(rf"Epoch\s+(\d+):\s*train loss\s+({NUMBER})\s*,\s*val loss\s+({NUMBER})")
EPOCH_FIELDS = {"Total epoch time": "elapsed_s", "Data loading time": "data_s", "Data movement time": "h2d_s",
          "Training compute time": "compute_s", "Training communication time": "comm_s",
          "Average Loss": "loss", "Train loss": "train_loss", "Val loss": "val_loss"}
_EPOCH_KEY = re.compile(f"({'|'.join(EPOCH_FIELDS)}):(.*)$")
PHASES = ("data_s", "h2d_s", "compute_s", "comm_s")
INTERVAL_FIELDS = {"step_s": "elapsed_s", **{p: p for p in PHASES}, "loss": "loss"}
"""Step-interval columns and the block values they hold."""


class _Block:
    """A timing block (``key``: rank and epoch; None: ``Average metrics``) or a section (batch size, accumulation)."""

    def __init__(self, line: int, key: tuple[int, int] | None) -> None:
        self.line, self.key = line, key
        self.values: dict[str, float] = {}


class _Run:
    def __init__(self, name: str | None, line: int) -> None:
        self.name, self.line = name, line
        self.blocks: dict[tuple[int, int], _Block] = {}
        self.averages: list[_Block] = []
        self.losses: dict[int, tuple[float, float]] = {}


class EpochTimingParser(RunParser):
    anchors = ("time:", "oss:", "timing breakdown", "Average metrics", "train loss", "#")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.runs: list[_Run] = []
        self.section: str | None = None
        self.repeat = 1
        self.run = _Run(None, 1)
        self.block: _Block | None = None

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "timing breakdown" in line:
            block = _BLOCK.search(line)
            if block is None:
                self.skip(number_, "expected '[Rank N] Epoch E timing breakdown:'")
                return 1
            self._close()
            rank, epoch = int(block.group(1) or 0), int(block.group(2))
            if (rank, epoch) in self.run.blocks:
                self.repeat += 1
                self._start_run(f"{self.section}-{self.repeat}" if self.section else None, number_)
            self.block = _Block(number_, (rank, epoch))
        elif key := _EPOCH_KEY.search(line):
            self._field(number_, key.group(1), key.group(2))
        elif "Average metrics" in line:
            self._close()
            self.block = _Block(number_, None)
        elif "train loss" in line and (loss := _EPOCH_LOSS.search(line)):
            self.run.losses[int(loss.group(1))] = (finite(number(loss.group(2))), finite(number(loss.group(3))))
        elif "#" in line and (heading := HEADING.match(line)):
            self._close()
            self._start_run(heading.group(1), number_)
            self.section, self.repeat = heading.group(1), 1
        return 1

    def _field(self, line: int, key: str, text: str) -> None:
        value = _EPOCH_VALUE.match(text)
        if value is None:
            self.skip(line, f"{key}: {text.strip()[:40]!r} is not a number")
        elif self.block is None:
            self.skip(line, f"{key}: outside a 'timing breakdown' or 'Average metrics' block")
        elif EPOCH_FIELDS[key] in self.block.values:
            self.skip(line, f"{key}: repeats a field of the block at line {self.block.line}")
        elif not key.endswith("time"):
            self.block.values[EPOCH_FIELDS[key]] = finite(number(value.group(1)))
        elif not (math.isfinite(seconds := number(value.group(1))) and seconds >= 0):
            self.skip(line, f"{key}: {seconds:g} seconds is not a duration")
        else:
            self.block.values[EPOCH_FIELDS[key]] = seconds

    def _start_run(self, name: str | None, line: int) -> None:
        if self.run.blocks or self.run.averages or self.run.losses:
            self.runs.append(self.run)
        self.run = _Run(name, line)

    def _close(self) -> None:
        block, self.block = self.block, None
        if block is None:
            return
        if block.key is None:
            self.run.averages.append(block)
        elif not math.isfinite(block.values.get("elapsed_s", math.nan)) or block.values["elapsed_s"] <= 0:
            self.skip(block.line, "timing block without a positive 'Total epoch time'")
        else:
            self.run.blocks[block.key] = block

    def result(self) -> list[ParsedRun]:
        self._close()
        self._start_run(None, 0)
        runs = []
        for run in self.runs:
            ranks = sorted({rank for rank, _ in run.blocks})
            config = {"gpus": len(ranks)} if ranks and ranks == list(range(len(ranks))) else {}
            runs.append(ParsedRun(run.name, run.line, config, partial(_measure, run)))
        return runs


def _measure(run: _Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame | None]:
    out, intervals = _per_rank(run) if run.blocks else ({}, None)
    averages = run.averages
    for name, column in (("elapsed_s", "reported_mean_rank_elapsed_s"), *((p, f"reported_{p}") for p in PHASES)):
        values = [b.values[name] for b in averages if name in b.values]
        if values and len(values) == len(averages):
            out[column] = float(sum(values))
    if run.losses:
        out["train_loss"], out["val_loss"] = run.losses[max(run.losses)]
        out = {k: v for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}
    else:
        for name in ("train_loss", "val_loss"):
            values = [b.values[name] for b in averages if name in b.values]
            if values:
                out[name] = values[-1]
    timed_by(out, "epoch times printed by the log")
    return out, intervals


def _per_rank(run: _Run) -> tuple[dict[str, Any], pd.DataFrame]:
    """The step intervals of the per-rank blocks, one per rank and epoch in that order (``step`` the epoch; the
    steps of an epoch are unknown), and their measurements (``trainperf.aggregate.measure``). No warm-up was
    left out (the epoch totals hold it), so none is reported."""
    rows = [{"run_id": "", "rank": rank, "step": epoch, "n_steps": math.nan, "node": "", "warmup": False,
             "includes_evaluation": False, **{name: run.blocks[(rank, epoch)].values.get(source, math.nan)
                                              for name, source in INTERVAL_FIELDS.items()}}
            for rank, epoch in sorted(run.blocks)]
    intervals = pd.DataFrame(rows).astype({"run_id": "string", "node": "string"}).reindex(
        columns=list(STEP_INTERVAL_COLUMNS))
    out = measure(summarize(intervals), "")
    out.pop("warmup_steps", None)
    out["extra_epochs"] = int(intervals.groupby("rank")["step"].size().max())
    return out, intervals


EPOCH_TIMING = line_format("epoch-timing", "a per-rank epoch timing log", (_BLOCK, _AVERAGE), EpochTimingParser)


_GPUS = re.compile(r"^\s{0,3}#.*?\bGPUs?\s*[=:]\s*(\d+)", re.IGNORECASE)
_SECTION = re.compile(r"Batch Size\s*=\s*(\d+)\s*,\s*Accum(?:ulation|\.)?\s*Steps\s*=\s*(\d+)", re.IGNORECASE)
_SUMMARY_VALUE = re.compile(
    rf"\s*({NUMBER})\s*(?:s|sec|seconds)?(?:\s*\(mean\s*=\s*({NUMBER})\s*(?:s|sec|seconds)?\))?\s*$")
_RULE = re.compile(r"^[\s|:\-]+$")
_EPOCH = re.compile(r"Train worker\.epoch")
SUMMARY_FIELDS = {"Total script execution time": "extra_total_exec_s", "Train worker": "extra_train_worker_s",
          "Train worker.epoch": "extra_epoch_s", "Train worker.epoch.training": "elapsed_s",
          "Train worker.epoch.validation": "validation_s", "Backward pass": "backward_s",
          "Loss computation": "loss_s", "Forward pass": "forward_s"}
_SUMMARY_KEY = re.compile(
    rf"^\s*[-*]?\s*({'|'.join(map(re.escape, sorted(SUMMARY_FIELDS, key=len, reverse=True)))})\s*:(.*)$")


class TimingSummaryParser(RunParser):
    anchors = ("Batch Size", "Train worker", "execution time", "pass:", "computation:", "GPU", "|")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sections: list[_Block] = []
        self.gpus: int | None = None
        self.columns: dict[str, int] | None = None
        self.rates: dict[tuple[int, int], tuple[int, float]] = {}

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if line.lstrip().startswith("|"):
            self._table(number_, line)
            return 1
        self.columns = None
        if match := _GPUS.match(line):
            self.gpus = int(match.group(1))
        if match := _SECTION.search(line):
            self.sections.append(_Block(number_, (int(match.group(1)), int(match.group(2)))))
        elif match := _SUMMARY_KEY.match(line):
            self._field(number_, match.group(1), match.group(2))
        return 1

    def _field(self, line: int, key: str, text: str) -> None:
        value, name = _SUMMARY_VALUE.match(text), SUMMARY_FIELDS[key]
        section = self.sections[-1] if self.sections else None
        if value is None:
            self.skip(line, f"{key}: expected seconds, e.g. '12.3s (mean=0.01s)', not {text.strip()[:40]!r}")
        elif section is None:
            self.skip(line, f"{key}: before any 'Batch Size = B, Accumulation Steps = A' section")
        elif name in section.values:
            self.skip(line, f"{key}: repeats a field of the section at line {section.line}")
        elif not (math.isfinite(seconds := number(value.group(1)))
                  and (seconds > 0 if name == "elapsed_s" else seconds >= 0)):
            self.skip(line, f"{key}: {seconds:g} s is not a duration")
        else:
            section.values[name] = seconds
            if value.group(2) is not None:
                section.values[f"extra_{name.removesuffix('_s')}_mean_s"] = number(value.group(2))

    def _table(self, line: int, text: str) -> None:
        cells = [c.strip() for c in text.strip().strip("|").split("|")]
        lowered = [c.lower() for c in cells]
        if any("batch size" in c for c in lowered) and any(c.startswith("accum") for c in lowered):
            rate = [i for i, c in enumerate(lowered) if c.replace(" ", "") in ("tokens/sec", "tokens/s")]
            self.columns = {"batch": next(i for i, c in enumerate(lowered) if "batch size" in c),
                            "accum": next(i for i, c in enumerate(lowered) if c.startswith("accum")),
                            **({"rate": rate[0]} if rate else {})}
            return
        if self.columns is None or "rate" not in self.columns or _RULE.match(text):
            return
        try:
            if len(cells) <= max(self.columns.values()):
                raise LineError(f"{len(cells)} cells, the header has more")
            key = (whole(cells[self.columns["batch"]], "Batch Size"), whole(cells[self.columns["accum"]], "Accum"))
            self.rates[key] = (line, number(cells[self.columns["rate"]].lstrip("~≈ ")))
        except LineError as exc:
            self.skip(line, f"summary table row: {exc}")

    def result(self) -> list[ParsedRun]:
        runs = []
        seen: dict[tuple[int, int], int] = {}
        for section in self.sections:
            batch, accum = key = section.key
            seen[key] = seen.get(key, 0) + 1
            name = f"bs{batch}-accum{accum}" + (f"-{seen[key]}" if seen[key] > 1 else "")
            config: dict[str, Any] = {"micro_batch_size": batch, "grad_accum_steps": accum}
            if self.gpus:
                config["gpus"] = self.gpus
            measured = dict(section.values)
            if key in self.rates:
                measured["reported_tokens_per_s"] = self.rates[key][1]
            timed_by(measured, "phase totals printed by the log")
            runs.append(ParsedRun(name, section.line, config, lambda config, fixed=measured: (dict(fixed), None)))
        for key, (line, _) in self.rates.items():
            if key not in seen:
                self.skip(line, f"summary table row for batch size {key[0]}, {key[1]} accumulation steps "
                                "has no timing-details section")
        return runs


TIMING_SUMMARY = line_format("timing-summary", "a batch-size timing summary", (_SECTION, _EPOCH),
                            TimingSummaryParser)
