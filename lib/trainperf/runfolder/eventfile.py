"""The per-rank events file of a run folder, ``events-rank{R}.jsonl``: what a rank did outside its steps (a
checkpoint, a validation run), a header line then one line per phase as it completes, ``{"phase": NAME, "start_s":
S, "seconds": D}`` (s, on the rank's step clock): docs/profiler.md, "The run folder".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from trainperf.errors import DataError
from trainperf.runfolder.rankfile import TIME_DECIMALS, BadLine, is_number

FORMAT = "trainperf-events"
VERSION = 1
EVENTS_FILE = "events-rank{rank}.jsonl"
EVENTS_FILE_PATTERN = re.compile(r"events-rank(\d+)\.jsonl")
"""What names an events file; its group, the rank that wrote it."""
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""What names a phase outside a step: a letter, then letters, digits or underscores (it becomes part of a
column name, ``outside_<name>_s``)."""


@dataclass(frozen=True)
class OutsidePhase:
    """A phase one rank timed outside its steps: its name, start and length (s)."""

    name: str
    start_s: float
    seconds: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.seconds


def header_line(rank: int) -> bytes:
    """The first line of a rank's events file."""
    return (json.dumps({"format": FORMAT, "version": VERSION, "rank": rank}) + "\n").encode()


def phase_line(name: str, start_s: float, seconds: float) -> bytes:
    """The line of one phase outside a step (times rounded to 1 µs)."""
    return (json.dumps({"phase": name, "start_s": round(start_s, TIME_DECIMALS),
                        "seconds": round(seconds, TIME_DECIMALS)}) + "\n").encode()


def read_events(path: Path) -> tuple[list[OutsidePhase], list[BadLine]]:
    """The phases of an events file, and its lines that could not be used (a cut or damaged line, another header);
    DataError where its header names another rank than its file name."""
    phases: list[OutsidePhase] = []
    bad: list[BadLine] = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            bad.append(BadLine(path, number, "not valid JSON (truncated or corrupt line)"))
            continue
        if number == 1:
            if not isinstance(entry, dict) or entry.get("format") != FORMAT:
                bad.append(BadLine(path, number, f"not a {FORMAT} header"))
            elif (named := EVENTS_FILE_PATTERN.fullmatch(path.name)) and \
                    entry.get("rank", int(named[1])) != int(named[1]):
                raise DataError(f"written by rank {entry['rank']}, not by rank {named[1]} as the file's name says "
                                "(renamed, or copied over another rank's file)", path=path, line=1)
            continue
        fields = entry if isinstance(entry, dict) else {}
        name, start, seconds = fields.get("phase"), fields.get("start_s"), fields.get("seconds")
        times = all(is_number(v) and math.isfinite(v) and v >= 0 for v in (start, seconds))
        if isinstance(name, str) and NAME.fullmatch(name) and times:
            phases.append(OutsidePhase(name, float(start), float(seconds)))  # type: ignore[arg-type]
        else:
            bad.append(BadLine(path, number, 'not {"phase": name, "start_s": s, "seconds": d} with a name as '
                                             "the profiler writes it and finite, non-negative times"))
    return phases, bad
