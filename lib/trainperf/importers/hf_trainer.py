"""Hugging Face Transformers ``Trainer`` logs: the ``***** Running training *****`` header, the per-step dicts and
the final metrics (docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import SAMPLES_SOURCE, ParsedRun, RunParser, line_format, timed_by
from trainperf.importers.text import LineError, number
from trainperf.table_rules import is_missing

NAN = math.nan
STEADY_SOURCE = ("train_runtime and num_input_tokens_seen of the per-step logs (cumulative): the steady window, "
                 "first steps and the time after the last step left out")
_HEADER = re.compile(r"\*{5} Running training \*{5}")
_SETTINGS = {
    "Num examples": "extra_num_examples", "Num Epochs": "extra_num_epochs",
    "Instantaneous batch size per device": "micro_batch_size",
    "Total train batch size (w. parallel, distributed & accumulation)": "global_batch_size",
    "Gradient Accumulation steps": "grad_accum_steps", "Total optimization steps": "extra_max_steps",
    "Number of trainable parameters": "extra_trainable_params",
}
_SETTING = re.compile(r"\s(" + "|".join(re.escape(k) for k in _SETTINGS) + r") = ([\d,]+)\s*$")
METRICS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_tokens_per_second",
           "num_input_tokens_seen", "num_tokens", "train_loss", "loss")
_METRIC = re.compile(r"(?:(?<=[{\s,])|^)'?(" + "|".join(METRICS) + r")'?\s*[:=]\s*'?([-+\w.:]+)")
_CLOCK = re.compile(r"(\d+):(\d\d):(\d\d(?:\.\d*)?)\Z")


def metric_value(text: str) -> float:
    """A metric as the Trainer prints it: a number, or ``h:mm:ss.ss`` (seconds)."""
    if clock := _CLOCK.match(text):
        hours, minutes, seconds = clock.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return number(text)


class _Run:
    def __init__(self, line: int) -> None:
        self.line = line
        self.config: dict[str, Any] = {}
        self.final: dict[str, float] = {}
        self.tokens_seen = NAN
        self.global_tokens_per_s = NAN
        self.loss = NAN
        self.points: list[tuple[float, float]] = []
        """``(train_runtime, num_input_tokens_seen)`` of each per-step dict that prints both (cumulative)."""

    def started(self) -> bool:
        """Whether the run has logged anything since its header: a header printed again before that is another
        process's copy of it (every process of a job logs it under DeepSpeed), not a new run."""
        return bool(self.final) or not (math.isnan(self.loss) and math.isnan(self.tokens_seen))


class HFTrainerParser(RunParser):
    anchors = ("Running training", " = ", "train_runtime", "train_samples_per_second", "train_steps_per_second",
               "train_tokens_per_second", "num_input_tokens_seen", "loss")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.runs: list[_Run] = []

    def current(self, line: int) -> _Run:
        if not self.runs:
            self.runs.append(_Run(line))
        return self.runs[-1]

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if _HEADER.search(line):
            if not self.runs or self.runs[-1].started():
                self.runs.append(_Run(number_))
            return 1
        if " = " in line and (setting := _SETTING.search(line)):
            key, value = setting.groups()
            self.current(number_).config[_SETTINGS[key]] = int(value.replace(",", ""))
        found = _METRIC.findall(line)
        if not found:
            return 1
        run = self.current(number_)
        values: dict[str, float] = {}
        for key, text in found:
            try:
                values[key] = metric_value(text)
            except LineError as exc:
                self.skip(number_, f"{key}: {exc}")
        final = any(key in values for key in ("train_samples_per_second", "train_steps_per_second", "train_loss"))
        if "num_tokens" in values:  # TRL's tokens since the start, every process's: its attention masks' (no padding)
            values.setdefault("num_input_tokens_seen", values.pop("num_tokens"))
        if "num_input_tokens_seen" in values:
            run.tokens_seen = values["num_input_tokens_seen"]
            if not final:  # a per-step dict: its rate and runtime are cumulative, the job's
                if "train_runtime" in values:
                    run.points.append((values.pop("train_runtime"), run.tokens_seen))
                if "train_tokens_per_second" in values:
                    run.global_tokens_per_s = values.pop("train_tokens_per_second")
        if "loss" in values:
            run.loss = values["loss"]
        if final or "train_runtime" in values:
            run.final.update(values)
        return 1

    def result(self) -> list[ParsedRun]:
        return [ParsedRun(None, run.line, dict(run.config), lambda config, run=run: _measure(run, config))
                for run in self.runs]


def _measure(run: _Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame | None]:
    """The steady window of a run whose per-step dicts print the cumulative ``train_runtime`` and
    ``num_input_tokens_seen`` (``include_num_input_tokens_seen``): each dict after the first is an interval of their
    differences, of ``Δtokens / (global batch × seq_len)`` steps, measured by the one aggregator (warm-up left out)
    instead of the whole ``train()`` call; without three such dicts or a known tokens per step, that call."""
    out = _whole_call(run, config)
    batch, seq_len = config.get("global_batch_size"), config.get("seq_len")
    if len(run.points) < 3 or is_missing(batch) or is_missing(seq_len):
        return out, None
    per_step = float(batch) * float(seq_len)
    found = records.Intervals(())
    last_time = last_tokens = 0.0
    for runtime, tokens in run.points:
        step = round(tokens / per_step)
        n, seconds = step - round(last_tokens / per_step), runtime - last_time
        if n > 0 and seconds > 0:
            found.add((0, step, float(n), seconds, seconds, NAN, tokens - last_tokens, NAN, NAN, 0.0, NAN))
        last_time, last_tokens = runtime, tokens
    measured, intervals = records.measure_window(found, config, origin=1)
    timed_by(measured, STEADY_SOURCE)
    return {**{k: v for k, v in out.items() if k not in ("samples", "steps")}, **measured}, intervals


def _whole_call(run: _Run, config: Mapping[str, Any]) -> dict[str, Any]:
    final = run.final
    runtime = final.get("train_runtime", NAN)
    if not (runtime > 0 and math.isfinite(runtime)):
        return {}
    out: dict[str, Any] = {"elapsed_s": runtime, "extra_time_source": "train_runtime: the whole train() call, "
                           "first steps and the time after the last step included"}
    samples_rate, steps_rate = final.get("train_samples_per_second", NAN), final.get("train_steps_per_second", NAN)
    max_steps = config.get("extra_max_steps", NAN)
    if steps_rate > 0:
        steps = steps_rate * runtime
        out["steps"] = int(max_steps if abs(max_steps - steps) <= max(1.0, 0.01 * steps) else round(steps))
    if samples_rate > 0:
        out["samples"] = float(round(samples_rate * runtime))
        out["reported_samples_per_s"] = samples_rate
        _count_samples(out, out.get("steps", max_steps), config, config.get("extra_num_epochs", NAN))
    if math.isfinite(run.tokens_seen) and run.tokens_seen > 0:
        out["tokens"] = run.tokens_seen
    if math.isfinite(run.global_tokens_per_s):
        out["reported_tokens_per_s"] = run.global_tokens_per_s
    if final.get("train_tokens_per_second", NAN) > 0:
        out["reported_tokens_per_s_per_gpu"] = final["train_tokens_per_second"]
    loss = run.loss if math.isfinite(run.loss) else final.get("train_loss", NAN)
    if math.isfinite(loss):
        out["train_loss"] = loss
    micro, total, accum = (config.get(k) for k in ("micro_batch_size", "global_batch_size", "grad_accum_steps"))
    if micro and total and accum and total % (micro * accum) == 0:
        out["gpus"] = total // (micro * accum)
    return out


def _count_samples(out: dict[str, Any], steps: float, config: Mapping[str, Any], epochs: float) -> None:
    """Counted beats printed (docs/importers.md, "What each log says"): where steps × global batch and ``samples``
    (``train_samples_per_second × train_runtime``) differ by more than a partial last batch per epoch and the
    printed rate's rounding, the count is used and ``extra_samples_source`` says why."""
    batch = config.get("global_batch_size")
    if not (batch and steps > 0 and math.isfinite(steps)):
        return
    counted = float(steps * batch)
    slack = batch * max(1.0, math.ceil(epochs) if epochs > 0 else 1.0) + 0.0005 * out["elapsed_s"] + 1
    printed = out["samples"]
    if abs(printed - counted) <= slack:
        return
    out["samples"] = counted
    out[SAMPLES_SOURCE] = (
        f"counted: {steps:,.0f} optimizer steps x a global batch of {batch:,} = {counted:,.0f} samples; the printed "
        f"train_samples_per_second x train_runtime gives {printed:,.0f} ({printed / counted:.3g} x the count: "
        "Transformers of early 2021 printed optimizer steps per second under that name)")


HF_TRAINER = line_format("hf_trainer", "a Hugging Face Trainer log", (
    _HEADER, re.compile(r"'train_runtime'|\btrain_runtime\s+="), re.compile(r"\{'loss': ")), HFTrainerParser)
