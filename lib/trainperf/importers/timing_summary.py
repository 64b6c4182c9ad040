"""Timing summaries per batch-size configuration (the logs behind seed report 003): one run per ``Batch Size = B,
Accumulation Steps = A`` section (docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from trainperf.importers.core import LineFormat, ParsedRun, RunParser, timed_by
from trainperf.importers.text import NUMBER, LineError, number, whole

_GPUS = re.compile(r"^\s{0,3}#.*?\bGPUs?\s*[=:]\s*(\d+)", re.IGNORECASE)
_SECTION = re.compile(r"Batch Size\s*=\s*(\d+)\s*,\s*Accum(?:ulation|\.)?\s*Steps\s*=\s*(\d+)", re.IGNORECASE)
_VALUE = re.compile(rf"\s*({NUMBER})\s*(?:s|sec|seconds)?(?:\s*\(mean\s*=\s*({NUMBER})\s*(?:s|sec|seconds)?\))?\s*$")
_RULE = re.compile(r"^[\s|:\-]+$")
_EPOCH = re.compile(r"Train worker\.epoch")
FIELDS = {"Total script execution time": "extra_total_exec_s", "Train worker": "extra_train_worker_s",
          "Train worker.epoch": "extra_epoch_s", "Train worker.epoch.training": "elapsed_s",
          "Train worker.epoch.validation": "validation_s", "Backward pass": "backward_s",
          "Loss computation": "loss_s", "Forward pass": "forward_s"}
_KEY = re.compile(rf"^\s*[-*]?\s*({'|'.join(map(re.escape, sorted(FIELDS, key=len, reverse=True)))})\s*:(.*)$")


class _Section:
    def __init__(self, line: int, batch: int, accum: int) -> None:
        self.line, self.batch, self.accum = line, batch, accum
        self.values: dict[str, float] = {}


class TimingSummaryParser(RunParser):
    anchors = ("Batch Size", "Train worker", "execution time", "pass:", "computation:", "GPU", "|")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sections: list[_Section] = []
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
            self.sections.append(_Section(number_, int(match.group(1)), int(match.group(2))))
        elif match := _KEY.match(line):
            self._field(number_, match.group(1), match.group(2))
        return 1

    def _field(self, line: int, key: str, text: str) -> None:
        value = _VALUE.match(text)
        if value is None:
            self.skip(line, f"{key}: expected seconds, e.g. '12.3s (mean=0.01s)', not {text.strip()[:40]!r}")
            return
        if not self.sections:
            self.skip(line, f"{key}: before any 'Batch Size = B, Accumulation Steps = A' section")
            return
        section, name, seconds = self.sections[-1], FIELDS[key], number(value.group(1))
        if name in section.values:
            self.skip(line, f"{key}: repeats a field of the section at line {section.line}")
        elif not (math.isfinite(seconds) and (seconds > 0 if name == "elapsed_s" else seconds >= 0)):
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
            key = (section.batch, section.accum)
            seen[key] = seen.get(key, 0) + 1
            name = f"bs{section.batch}-accum{section.accum}" + (f"-{seen[key]}" if seen[key] > 1 else "")
            config: dict[str, Any] = {"micro_batch_size": section.batch, "grad_accum_steps": section.accum}
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


TIMING_SUMMARY = LineFormat("timing-summary", "a batch-size timing summary", (_SECTION, _EPOCH),
                            TimingSummaryParser)
