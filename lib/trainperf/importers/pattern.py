"""Any log, read with one regular expression of the user's (sidecar ``pattern``, ``--pattern``; docs/importers.md,
"A log of any stack"), matched by the ``regex`` module with a limit of :data:`LINE_SECONDS` a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import regex

from trainperf.errors import DataError
from trainperf.importers import records
from trainperf.importers.core import Format, ParsedLog, read_log
from trainperf.importers.settings import Settings
from trainperf.importers.text import LineError, number, rank_prefix, whole

LINE_SECONDS = 2.0
"""The longest a pattern may take to search one line (s): a real one takes microseconds."""
EXAMPLE = r"step (?P<step>\d+) .* (?P<tokens_per_s>[\d,.]+) tok/s"
"""A pattern as the refusal of an unknown log shows it."""


def compile_pattern(text: str, where: object) -> regex.Pattern[str]:
    """The pattern ``text`` compiled, its groups checked (``records.check_names``); DataError naming ``where``."""
    try:
        pattern = regex.compile(text)
    except regex.error as exc:
        raise DataError(f"not a regular expression: {exc}", path=where, column="pattern") from None
    records.check_names(pattern.groupindex, records.GROUPS, "group", "a pattern", where, "pattern")
    return pattern


class PatternParser(records.IntervalParser[records.Run]):
    anchors = ("",)  # every line is tried
    reported = records.REPORTED

    def __init__(self, path: Path, pattern: regex.Pattern[str], where: object) -> None:
        super().__init__(path)
        self.start = pattern
        self.where = where

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        label, body = rank_prefix(lines[i])
        try:
            match = self.start.search(body, timeout=LINE_SECONDS)
        except TimeoutError:
            raise DataError(f"the pattern took more than {LINE_SECONDS:g} s on line {number_} of {self.path} and "
                            "was stopped: it backtracks without bound (a repeated group inside a repeated group, "
                            "such as (a+)+ or (a|aa)+); write it so that each character can be matched one way only",
                            path=self.where, column="pattern") from None
        if match is None:
            return 1
        try:
            values = {name: _value(name, text) for name, text in match.groupdict().items() if text is not None}
        except LineError as exc:
            self.skip(number_, f"line matched by the pattern: {exc}")
            return 1
        step = values["step"] if "step" in values else self.count_step(label)
        step = self.across_epochs(label, values["epoch"], step) if "epoch" in values else step
        rank = self.rank_of(label, step)
        self.run_at(number_, rank, step).records.add(records.record(values, rank, step))
        return 1

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        origin = 1 if "step" in self.start.groupindex else None
        return records.measure_figures(run, config, origin, "step times the log prints (read with a pattern)")


def _value(name: str, text: str) -> float:
    """The number a group matched (thousands separators dropped); the step and epoch whole numbers."""
    text = text.replace("_", "")
    return whole(text, name) if name in ("step", "epoch") else number(text)


def _read(path: Path, settings: Settings) -> ParsedLog:
    assert settings.pattern is not None
    return read_log(PatternParser(path, compile_pattern(settings.pattern, settings.pattern_source),
                                  settings.pattern_source))


PATTERN = Format("pattern", "a log read with a pattern", _read)
"""A log read with the settings' ``pattern`` (chosen whenever one is given, never guessed)."""
