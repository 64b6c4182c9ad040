"""Any log, read with one regular expression of the user's: the sidecar key
``pattern`` (``trainperf import --pattern``), for stacks without a reader of
their own (nanochat, torchtune, LitGPT, fairseq, research code).

Every line the pattern matches (``re.search``, after a launcher's rank prefix
such as ``[rank3]:``) is a record of one optimizer step. Its named groups
(:data:`GROUPS`; numbers may carry thousands separators: ``6,941``) give the
figures, and the rest follows from whatever they give:

* the step's wall time: ``step_time_s``, ``step_time_ms``, else ``tokens`` /
  ``tokens_per_s`` (or ``samples`` / ``samples_per_s``); where a line gives
  only a rate, the run's throughput is the rate the lines print, averaged
  over the measured window as total work / total time
  (``extra_time_source`` says so);
* ``tokens`` and ``samples`` are the whole job's in that step (each rank
  that prints the step gets its share);
* ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``samples_per_s``,
  ``mfu_percent`` and ``tflops_per_gpu`` are kept as the log's own figures
  (``reported_*``).

A log with a ``step`` group that starts past the warm-up (an excerpt from
the middle of a run) is measured from its first line; otherwise the first
``warmup_steps`` (default 1) are warm-up, as in every format. A matched line
whose groups are not numbers is skipped and counted.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.errors import DataError
from trainperf.importers import records
from trainperf.importers.core import Format, ParsedLog, rate_from_reported
from trainperf.importers.settings import Settings
from trainperf.importers.text import LineError, number, rank_prefix

NAN = math.nan
GROUPS = {
    "step": "the optimizer step the line reports (a whole number; without it the matched lines of a rank are "
            "steps 1, 2, 3, ...)",
    "step_time_s": "wall time of that step (s)",
    "step_time_ms": "wall time of that step (ms)",
    "tokens": "tokens the whole job processed in that step",
    "samples": "samples (sequences) the whole job processed in that step",
    "tokens_per_s": "throughput the line prints, whole job (tokens/s)",
    "tokens_per_s_per_gpu": "throughput the line prints, per device (tokens/s)",
    "samples_per_s": "throughput the line prints, whole job (samples/s)",
    "loss": "training loss",
    "mfu_percent": "MFU the line prints (%)",
    "tflops_per_gpu": "TFLOP/s per device the line prints",
    "memory_gb": "peak device memory (GB)",
}
"""The named groups a pattern may use, and what each one is."""
TIMING = ("step_time_s", "step_time_ms", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s")
"""A pattern needs one of these: a step time or a rate."""
REPORTED = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "tflops_per_gpu")
EXAMPLE = r"step (?P<step>\d+) .* (?P<tokens_per_s>[\d,.]+) tok/s"
"""A pattern as the refusal of an unknown log shows it."""


def compile_pattern(text: str, where: object) -> re.Pattern[str]:
    """The pattern ``text`` compiled, with named groups only from :data:`GROUPS`
    and one of :data:`TIMING`; DataError naming ``where`` otherwise."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise DataError(f"not a regular expression: {exc}", path=where, column="pattern") from None
    unknown = sorted(set(pattern.groupindex) - set(GROUPS))
    if unknown:
        raise DataError(f"unknown group(s) {', '.join(unknown)}: the groups are {', '.join(GROUPS)}",
                        path=where, column="pattern")
    if not set(pattern.groupindex) & set(TIMING):
        raise DataError(f"a pattern needs a step time or a rate: one of the groups {', '.join(TIMING)}",
                        path=where, column="pattern")
    return pattern


class PatternParser(records.IntervalParser[records.Run]):
    anchors = ("",)  # every line is tried

    def __init__(self, path: Path, pattern: re.Pattern[str]) -> None:
        super().__init__(path)
        self.start = pattern

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        label, body = rank_prefix(lines[i])
        match = self.start.search(body)
        if match is None:
            return 1
        try:
            values = {name: _value(name, text) for name, text in match.groupdict().items() if text is not None}
        except LineError as exc:
            self.skip(number_, f"line matched by the pattern: {exc}")
            return 1
        problem = self.add(number_, (label, values))
        if problem:
            self.skip(number_, f"line matched by the pattern: {problem}")
        return 1

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, values = parsed
        step = values["step"] if "step" in values else self.count_step(label)
        seconds = values.get("step_time_s", values.get("step_time_ms", NAN) / 1000.0)
        rates = [(values.get(work, NAN), values.get(f"{work}_per_s", NAN)) for work in ("tokens", "samples")]
        if not math.isfinite(seconds):
            seconds = next((w / r for w, r in rates if w > 0 and r > 0), NAN)
        rate = next((values[r] for r in ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s")
                     if values.get(r, NAN) > 0), NAN)
        weight = seconds if math.isfinite(seconds) else 1.0 / rate  # rates averaged as total work / total time
        rank = self.rank_of(label, step)
        run = self.run_at(line, rank, step)
        mfu = values.get("mfu_percent", NAN) / 100.0
        run.records.add((rank, step, 1.0, seconds, weight, values.get("samples", NAN), values.get("tokens", NAN),
                         values.get("loss", NAN), values.get("memory_gb", NAN), 0.0,
                         *(values.get(r, NAN) for r in REPORTED[:3]), mfu, values.get("tflops_per_gpu", NAN)))
        return ""

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, {}, REPORTED)

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        origin = 1 if "step" in self.start.groupindex and not run.restarted else None
        measured, steps = records.aggregate(run.records, config, origin)
        if "elapsed_s" in measured:
            measured["extra_time_source"] = "step times the log prints (read with a pattern)"
        rate_from_reported(measured, config)
        return measured, steps


def _value(name: str, text: str) -> float:
    """The number a group matched (thousands separators dropped); the step a whole number."""
    value = number(text.replace("_", "").strip())
    if name == "step":
        if value != int(value) or value < 0:
            raise LineError(f"step {text!r} is not a whole number")
        return int(value)
    return value


class PatternLog(Format):
    """A log read with the settings' ``pattern`` (chosen whenever one is given)."""

    name = "pattern"
    title = "a log read with a pattern"

    def sniff(self, head: str, settings: Settings) -> int:
        return 0  # never guessed: used when the settings give a pattern

    def parse(self, path: Path, settings: Settings) -> ParsedLog:
        assert settings.pattern is not None
        parser = PatternParser(path, compile_pattern(settings.pattern, settings.pattern_source))
        parser.read()
        return ParsedLog(parser.result(), parser.skipped, parser.skipped_total, parser.lines)
