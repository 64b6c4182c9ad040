"""DeepSpeed logs: ``ThroughputTimer`` lines, timed by the logger's timestamps, and ``wall_clock_breakdown``
timings (docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import SAMPLES_SOURCE, line_format, rate_from_reported, timed_by
from trainperf.importers.text import NUMBER, LineError, number, one_record, rank_prefix, timestamp
from trainperf.table_rules import is_missing

NAN = math.nan
REPORTED = ("samples_per_s",)
_TIMER = re.compile(rf"(?:global_step=(\d+)|\b\d+/(\d+)),\s*(?:RunningAvg)?SamplesPerSec=({NUMBER})")
_CURRENT = re.compile(rf"CurrSamplesPerSec=({NUMBER})")
_MEMORY = re.compile(rf"MaxMemAllocated=({NUMBER})\s*GB")
_CONFIG = re.compile(r"\b(train_batch_size|train_micro_batch_size_per_gpu|gradient_accumulation_steps)\s+"
                     r"(?:\.+\s+)?(\d+)\s*$")
"""A line of the configuration dump: the name, dots padding it to a width (none for long names), the value."""
_CONFIG_COLUMNS = {"train_batch_size": "global_batch_size", "train_micro_batch_size_per_gpu": "micro_batch_size",
                   "gradient_accumulation_steps": "grad_accum_steps"}
_WORLD = re.compile(r"dist_world_size=(\d+)")
_BREAKDOWN = re.compile(rf"\b(fwd|bwd|step|forward|backward|optimizer_step):\s*({NUMBER})(?=\s*(?:\||$))")
_PHASES = {"fwd": "forward_s", "forward": "forward_s", "bwd": "backward_s", "backward": "backward_s",
           "step": "optimizer_s", "optimizer_step": "optimizer_s"}


def parse_timer(line: str) -> tuple[Any, ...]:
    """``(rank, global step, current samples/s, peak GiB, timestamp, whether it is an older line: a counter without
    ``global_step=``, see :data:`MICRO_NOTE`)`` of a ThroughputTimer line (NaN where absent). It needs a timestamp
    or a positive rate: a line with a timestamp is timed by it whatever its rate."""
    rank, body = rank_prefix(line)
    match = _TIMER.search(body)
    if match is None:
        raise LineError("no 'global_step=N, RunningAvgSamplesPerSec=' fields")
    one_record(_TIMER, body, match.end())
    step = int(match.group(1) or match.group(2))
    current = _CURRENT.search(body, match.end())
    rate = number(current.group(1) if current else match.group(3))
    when = timestamp(body[:match.start()])
    if not (rate > 0 and math.isfinite(rate)):
        if math.isnan(when):
            raise LineError(f"no timestamp, and samples per second must be a positive number, not {rate:g}")
        rate = NAN  # timed by its timestamp; the rate is not reported
    memory = _MEMORY.search(body, match.end())
    return (rank, step, rate, number(memory.group(1)) if memory else NAN, when,
            match.group(1) is None)


MICRO_NOTE = ("the counter of DeepSpeed's older lines ('0/20, SamplesPerSec=') counts micro-batches here, not "
              "optimizer steps: its rate agrees with {micro:,.0f} samples a count ({batch:,} per optimizer step / "
              "{accum:,} accumulation steps), not with {batch:,}; samples counted per micro-batch, optimizer steps "
              "left empty")
"""Why a run's samples are counted per micro-batch (``extra_samples_source``)."""


class _Run(records.Run):
    def __init__(self, line: int, config: dict[str, Any]) -> None:
        super().__init__(line, config, REPORTED)
        self.phases: list[dict[str, float]] = []
        self.older_counter = False


class DeepSpeedParser(records.IntervalParser[_Run]):
    anchors = ("SamplesPerSec=", "time (ms)", "train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps", "dist_world_size=")
    start = _TIMER

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.pending_phases: list[dict[str, float]] = []
        """Breakdown lines printed before the first throughput line (they belong to the first run)."""

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "SamplesPerSec=" in line:
            return self.read_record(lines, i, number_, parse_timer, "throughput line")
        if "time (ms)" in line:
            phases = {_PHASES[k]: number(v) / 1000.0 for k, v in _BREAKDOWN.findall(line)}
            if phases:
                (self.run.phases if self.run is not None else self.pending_phases).append(phases)
        elif match := _CONFIG.search(line):
            self.config[_CONFIG_COLUMNS[match.group(1)]] = int(match.group(2))
        elif match := _WORLD.search(line):
            self.config["gpus"] = int(match.group(1))
        return 1

    def new_run(self, line: int) -> _Run:
        run = _Run(line, {k: v for k, v in self.config.items() if v > 0})
        run.phases.extend(self.pending_phases)
        self.pending_phases.clear()
        return run

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, step, rate, memory, when, older = parsed
        run, problem = self.add_timed(line, label, step, when, NAN, memory, (rate,))
        if not problem:
            run.older_counter = run.older_counter or older
        return problem

    def finish(self, run: _Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        measured, steps = records.measure_window(run.records, config)
        micro = _micro_batch_samples(run, config, measured)
        if micro:
            measured, steps = records.measure_window(run.records, {**config, "global_batch_size": micro,
                                                              "grad_accum_steps": 1})
            del measured["steps"]
            measured[SAMPLES_SOURCE] = MICRO_NOTE.format(micro=micro, batch=int(config["global_batch_size"]),
                                                         accum=int(config["grad_accum_steps"]))
        timed_by(measured, "log timestamps")
        rate_from_reported(measured, config)
        warmup = config.get("warmup_steps")
        warmup = 1 if is_missing(warmup) else int(warmup)
        timed = run.phases[warmup:]
        if timed and "steps" in measured:
            for column in ("forward_s", "backward_s", "optimizer_s"):
                values = [p[column] for p in timed if column in p]
                if values:
                    measured[column] = sum(values) / len(values) * measured["steps"]
        return measured, steps


def _micro_batch_samples(run: _Run, config: Mapping[str, Any], measured: Mapping[str, Any]) -> float:
    """The samples of one micro-batch (global batch / accumulation steps) where a run's older counter counts
    micro-batches: its printed rate is nearer the samples counted per micro-batch than per optimizer step (the two
    are ``grad_accum_steps`` apart); else 0."""
    batch, accum = config.get("global_batch_size"), config.get("grad_accum_steps")
    printed, elapsed, steps = (measured.get(k, NAN) for k in ("reported_samples_per_s", "elapsed_s", "steps"))
    if not (run.older_counter and batch and accum and accum > 1 and printed > 0 and elapsed > 0 and steps > 0):
        return 0.0
    per_step = steps * batch / elapsed
    micro = batch / accum
    return micro if abs(math.log(printed / (per_step / accum))) < abs(math.log(printed / per_step)) else 0.0


DEEPSPEED = line_format("deepspeed", "a DeepSpeed log", (_TIMER,), DeepSpeedParser)
