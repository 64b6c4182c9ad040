"""Composer / llm-foundry console logs: ``[batch=N/M]:`` blocks of cumulative ``Train key: value`` counters
(docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import ParsedRun, RunParser, line_format, rate_from_reported, timed_by
from trainperf.importers.text import NUMBER, number, rank_prefix

NAN = math.nan
REPORTED = ("tokens_per_s", "samples_per_s", "mfu")
_BLOCK = re.compile(r"(?:\[epoch=\d+\])?\[batch=(\d+)/\d+\]:")
"""A block's header, wherever it stands in a line (a model's debug print without a final newline glues it on)."""
_FIELD = re.compile(rf"\bTrain ([\w/.\-]+): ({NUMBER})(?=\s|$)")
_SETTING = re.compile(r"^\s*(num_gpus_per_node|num_nodes): (\d+)\s*$")
_KEYS = {"time/batch": "batch", "time/sample": "samples", "time/token": "tokens", "time/train": "hours",
         "loss/train/total": "loss", "throughput/tokens_per_sec": "tokens_per_s",
         "throughput/samples_per_sec": "samples_per_s", "throughput/device/mfu": "mfu"}


class ComposerParser(RunParser):
    anchors = ("[batch=", "Train ", "num_gpus_per_node", "num_nodes")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.runs: list[tuple[int, list[dict[str, float]]]] = []
        """Each run's first line and its blocks (a block: its step and the figures of :data:`_KEYS`)."""
        self.config: dict[str, Any] = {}
        self.block: dict[str, float] | None = None

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        body = rank_prefix(lines[i])[1]
        if "[batch=" in body and (match := _BLOCK.search(body)):  # the literal first: a search of every line is slow
            self.block = {"step": float(match.group(1))}
            last = self.runs[-1][1][-1] if self.runs else None
            if last is not None and last["step"] == self.block["step"]:
                self.block = last  # another rank's copy of the block: the same fields
                return 1
            if last is None or last["step"] > self.block["step"]:
                self.runs.append((number_, []))
            self.runs[-1][1].append(self.block)
        elif match := _SETTING.match(body):
            self.config[match.group(1)] = int(match.group(2))
        if self.block is not None and "Train " in body:
            for key, value in _FIELD.findall(body):
                if key in _KEYS:  # a value the pattern matched is a number
                    self.block[_KEYS[key]] = number(value)
        return 1

    def result(self) -> list[ParsedRun]:
        config: dict[str, Any] = {}
        if self.config.get("num_gpus_per_node", 0) > 0 and self.config.get("num_nodes", 0) > 0:
            config = {"gpus": self.config["num_gpus_per_node"] * self.config["num_nodes"],
                      "nodes": self.config["num_nodes"]}
        return [ParsedRun(None, line, dict(config), partial(_measure, blocks)) for line, blocks in self.runs]


def _measure(blocks: list[dict[str, float]], config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
    found = records.Intervals(REPORTED)
    previous: dict[str, float] = {}  # before the first block: its differences are NaN
    for block in blocks:
        step = block.get("batch", block["step"])
        n = step - previous.get("batch", previous.get("step", NAN))
        seconds = (block.get("hours", NAN) - previous.get("hours", NAN)) * 3600.0
        samples, tokens = (block.get(name, NAN) - previous.get(name, NAN) for name in ("samples", "tokens"))
        if not (n > 0 and seconds > 0):
            n = seconds = NAN
        weight = seconds if math.isfinite(seconds) else 1.0
        found.add((0, step, n, seconds, weight, samples, tokens, block.get("loss", NAN), NAN, 0.0, NAN,
                   *(block.get(name, NAN) for name in REPORTED)))
        previous = block
    measured, intervals = records.measure_window(found, config)
    last = blocks[-1]
    for name in REPORTED:
        if f"reported_{name}" not in measured and math.isfinite(last.get(name, NAN)):
            measured[f"reported_{name}"] = last[name]
    timed_by(measured, "time/train of the SpeedMonitor (hours, 4 decimals)")
    if "train_loss" not in measured and math.isfinite(last.get("loss", NAN)):
        measured["train_loss"] = last["loss"]
    rate_from_reported(measured, config)
    return measured, intervals


COMPOSER = line_format("composer", "a Composer / llm-foundry console log", (re.compile(r"\[batch=\d+/\d+\]:"),),
                      ComposerParser)
