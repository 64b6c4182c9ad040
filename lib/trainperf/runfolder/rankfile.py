"""The per-rank steps file of a run folder, ``steps-rank{R}.jsonl``: its line format (a header, one JSON array per
optimizer step in :data:`LINE_COLUMNS` order, the end line; docs/profiler.md, "The run folder"), a fast reader, and
the warning that reports the lines a reader skipped (docs/data.md, "Bounds, types and repeated steps").
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainperf.errors import DataWarning
from trainperf.schema import PHASES, STEP_INTERVALS, bound_problem, out_of_bounds

FORMAT = "trainperf-steps"
VERSION = 2
STEPS_FILE = "steps-rank{rank}.jsonl"
STEPS_FILE_PATTERN = re.compile(r"^steps-rank(\d+)\.jsonl$")

_COMM = PHASES.index("comm")
LINE_COLUMNS: tuple[str, ...] = (
    "step", "warmup", "start_s", "step_s",
    *(f"{p}_s" for p in PHASES[:_COMM + 1]), "comm_exposed_s", *(f"{p}_s" for p in PHASES[_COMM + 1:]),
    "tokens", "samples", "micro_steps", "loss", "peak_memory_gb",
    "reserved_memory_gb", "host_memory_gb", "alloc_retries", "ooms", "energy_j", "out_of_memory",
)
"""Values of one step line, in order (docs/profiler.md, "What is measured"): ``step`` (from 0), ``warmup``, the
step's window ``start_s`` (s since the profiler started, rank-local clock) and ``step_s`` (s), the phase seconds,
work (this rank's, every micro-step counted), memory (GiB), allocator counts, ``energy_j`` (J) and ``out_of_memory``
(the step raised an out-of-memory error: no work). Times and memory are written with six decimals (1 µs, 1 KiB)."""
VERSION_1_COLUMNS: tuple[str, ...] = LINE_COLUMNS[:LINE_COLUMNS.index("peak_memory_gb") + 1]
"""The columns of version 1, which every version's header lists."""

BOUNDED = tuple(c for c in STEP_INTERVALS if c.name in LINE_COLUMNS)
"""The columns of a step line that the step-intervals table declares, with their bounds."""
INT_COLUMNS = ("step", "micro_steps")
BOOL_COLUMNS = ("warmup", "out_of_memory")
TIME_DECIMALS = 6


def is_number(value: object) -> bool:
    """Whether a JSON value is a number (a bool is not one, though Python counts it as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def header_line(rank: int, host: str, node_rank: int | None, node: str, origin_unix_ns: int | None = None) -> bytes:
    """The first line of a rank's steps file (``origin_unix_ns`` left out where not known)."""
    header = {"format": FORMAT, "version": VERSION, "rank": rank, "host": host,
              "node_rank": node_rank, "node": node, "columns": list(LINE_COLUMNS)}
    if origin_unix_ns is not None:
        header["origin_unix_ns"] = origin_unix_ns
    return (json.dumps(header) + "\n").encode()


def step_line(values: list[Any]) -> bytes:
    """One step's line: ``values`` in :data:`LINE_COLUMNS` order (None, NaN and infinities are written as ``null``)."""
    return ("[" + ",".join([f(v) for f, v in zip(_FORMATS, values)]) + "]\n").encode()


_FIXED = f"%.{TIME_DECIMALS}f"  # a %-format: half the cost of a nested f-string spec, on every value of every step


def _fixed(value: float | None) -> str:
    return _FIXED % value if value is not None and math.isfinite(value) else "null"


def _number(value: float | int | bool | None) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return repr(float(value)) if math.isfinite(value) else "null"


_FORMATS = tuple(_fixed if name.endswith(("_s", "_gb")) else _number for name in LINE_COLUMNS)


def end_line(steps: int, unattributed_s: dict[str, float], wall_s: float | None = None) -> bytes:
    """The closing line: ``steps`` written, the seconds of phases timed after the last step (they belong to no step),
    and ``wall_s``, the seconds from the profiler's start to its close (left out where not known)."""
    end = {"end": True, "steps": steps,
           "unattributed_s": {k: round(v, TIME_DECIMALS) for k, v in unattributed_s.items()}}
    if wall_s is not None:
        end["wall_s"] = round(wall_s, TIME_DECIMALS)
    return (json.dumps(end) + "\n").encode()


@dataclass
class BadLine:
    """A line of a steps file that could not be used."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


BAD_LINES_SHOWN = 10
"""How many skipped lines a warning names (it counts them all)."""


def warn_bad_lines(bad: list[BadLine], files: str, stacklevel: int = 2) -> None:
    """One DataWarning counting the skipped lines of ``files`` (e.g. ``steps files``) and naming the first
    :data:`BAD_LINES_SHOWN`; nothing when ``bad`` is empty. ``stacklevel`` counted from the caller."""
    if not bad:
        return
    shown = "; ".join(map(str, bad[:BAD_LINES_SHOWN]))
    more = f"; and {len(bad) - BAD_LINES_SHOWN} more" if len(bad) > BAD_LINES_SHOWN else ""
    warnings.warn(f"skipped {len(bad)} malformed or repeated line(s) in {files}: {shown}{more}", DataWarning,
                  stacklevel=stacklevel + 1)


@dataclass
class RankFile:
    """One rank's steps file, read: header fields, the step columns (numpy arrays of every :data:`LINE_COLUMNS`, one
    entry per good line), whether the rank closed its profiler, the lines skipped and the columns the file wrote (the
    others are empty: NaN, or false)."""

    path: Path
    rank: int
    node: str | None
    columns: dict[str, np.ndarray]
    closed: bool
    bad_lines: list[BadLine] = field(default_factory=list)
    written: tuple[str, ...] = LINE_COLUMNS
    wall_s: float | None = None
    """From the end line: seconds from the profiler's start to its close (None where the line has none)."""
    lines: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    """The file's line number of each step read."""

    @property
    def steps(self) -> int:
        return len(self.columns["step"])


def read_rank_file(path: Path) -> RankFile:
    """Read ``steps-rank{R}.jsonl`` (the rank from the file name, which the header must agree with; the node from
    the header). Malformed or truncated lines are skipped and listed in ``bad_lines``."""
    match = STEPS_FILE_PATTERN.match(path.name)
    if match is None:
        raise ValueError(f"{path}: not a steps file name (expected steps-rank<R>.jsonl)")
    data = path.read_bytes()
    bad: list[BadLine] = []
    first_end = data.find(b"\n")
    head, body = (data, b"") if first_end < 0 else (data[:first_end], data[first_end + 1:])
    header = _header(head, path, bad) if head else None
    rank = int(match.group(1))
    if header and header.get("rank", rank) != rank:
        raise ValueError(f"line 1: written by rank {header['rank']}, not by rank {rank} as the file's name "
                         "says (renamed, or copied over another rank's file)")
    written = tuple(header["columns"]) if header else LINE_COLUMNS
    body, end = _split_end(body)
    closed = end is not None and is_end(end)
    wall_s = _wall_clock(end, path, 2 + body.count(b"\n"), bad) if closed else None
    if end is not None and not closed:
        body += end  # not an end marker: read with the other lines (and reported there)
    columns = _fast_columns(body, written)
    if columns is None:
        columns, lines = _line_by_line(body, path, bad, written)
    else:
        lines = np.arange(2, 2 + len(columns["step"]))  # the fast path read every line after the header
    n = len(columns["step"])  # every LINE_COLUMNS: those the file did not write empty (NaN, or false)
    columns = {c: columns[c] if c in columns else np.zeros(n, dtype=bool) if c in BOOL_COLUMNS else np.full(n, np.nan)
               for c in LINE_COLUMNS}
    columns, lines = _within_bounds(columns, lines, path, bad)
    return RankFile(path, rank, header.get("node") if header else None, columns, closed, bad, written, wall_s, lines)


def _within_bounds(columns: dict[str, np.ndarray], lines: np.ndarray, path: Path,
                   bad: list[BadLine]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``columns`` without the step lines (file line numbers ``lines``) whose values break their column's bounds, each
    listed in ``bad``: a step that completed needs a step time; one that ran out of memory (listed apart, with no
    work) is left as it is."""
    completed = ~columns["out_of_memory"]
    broken = {c.name: out_of_bounds(c, columns[c.name]) & completed for c in BOUNDED}
    broken["step_s"] |= completed & np.isnan(columns["step_s"])
    dropped = np.logical_or.reduce(list(broken.values()))
    if not dropped.any():
        return columns, lines
    for i in np.flatnonzero(dropped):
        column = next(c for c in BOUNDED if broken[c.name][i])
        value = float(columns[column.name][i])
        why = "missing (null or NaN)" if np.isnan(value) else f"{value:g} {bound_problem(column, value)}"
        bad.append(BadLine(path, int(lines[i]), f"{column.name} {why}"))
    bad.sort(key=lambda b: b.line)
    return {name: values[~dropped] for name, values in columns.items()}, lines[~dropped]


def _wall_clock(end: bytes, path: Path, number: int, bad: list[BadLine]) -> float | None:
    """The end line's ``wall_s`` (None where it has none); a value that is not a positive number is listed in ``bad``
    (the end line is line ``number``)."""
    wall = json.loads(end).get("wall_s")
    if wall is None:
        return None
    if not is_number(wall) or not math.isfinite(wall) or wall <= 0:
        bad.append(BadLine(path, number, f"wall_s {wall!r} is not a positive number of seconds"))
        return None
    return float(wall)


def _header(line: bytes, path: Path, bad: list[BadLine]) -> dict[str, Any] | None:
    header = json_object(line)
    if header is None or header.get("format") != FORMAT:
        bad.append(BadLine(path, 1, "not a trainperf-steps header"))
        return None
    columns = header.get("columns")
    known = isinstance(columns, list) and all(isinstance(c, str) for c in columns)
    if not known or columns[:len(VERSION_1_COLUMNS)] != list(VERSION_1_COLUMNS) or \
            columns != [c for c in LINE_COLUMNS if c in columns]:
        raise ValueError(f"{path}: line 1: columns {columns} are not those of trainperf-steps version "
                         f"{VERSION} or an earlier one")
    return header


def _split_end(body: bytes) -> tuple[bytes, bytes | None]:
    """Split off the last line when it is a JSON object (the end marker)."""
    stripped = body.rstrip(b"\n")
    start = stripped.rfind(b"\n") + 1
    return (body[:start], body[start:]) if stripped[start:start + 1] == b"{" else (body, None)


def json_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object ``line`` holds; None where it holds no valid JSON, or JSON that is no object."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_end(line: bytes) -> bool:
    """Whether ``line`` is the end line :func:`end_line` writes."""
    return (json_object(line) or {}).get("end") is True


def _fast_columns(body: bytes, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """Every step line parsed at once by Arrow's CSV parser, the brackets removed; None if any line is not ``[...]``
    of the right number of values of the right types, with no other bracket and no quote (then the caller reads line
    by line, naming each malformed line)."""
    if not body.endswith(b"\n"):
        return None
    raw = np.frombuffer(body, dtype=np.uint8)
    ends = np.flatnonzero(raw == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    if (ends <= starts).any() or (raw[starts] != ord("[")).any() or (raw[ends - 1] != ord("]")).any():
        return None
    if any(np.count_nonzero(raw == ord(c)) != n for c, n in (("[", len(starts)), ("]", len(starts)), ('"', 0))):
        return None
    import pyarrow as pa
    import pyarrow.csv as pacsv

    types = {c: pa.from_numpy_dtype(_dtype(c)) for c in names}
    try:
        table = pacsv.read_csv(
            io.BytesIO(body.translate(None, b"[]")),
            read_options=pacsv.ReadOptions(column_names=list(names), use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                column_types=types, null_values=["null"], true_values=["true"],
                false_values=["false"], strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows != len(starts) or any(table.column(c).null_count for c in names
                                            if c in INT_COLUMNS + BOOL_COLUMNS):
        return None
    return {c: table.column(c).to_numpy().astype(_dtype(c), copy=False) for c in names}


def _line_by_line(body: bytes, path: Path, bad: list[BadLine],
                  names: tuple[str, ...]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The columns of the good step lines, and the file line number of each."""
    rows: list[list[Any]] = []
    numbers: list[int] = []
    for number, line in enumerate(body.split(b"\n"), start=2):
        if not line:
            continue
        if reason := _row_problem(line, names):
            bad.append(BadLine(path, number, reason))
        else:
            rows.append(json.loads(line))
            numbers.append(number)
    if not rows:
        return empty_columns(names), np.empty(0, dtype=np.int64)
    columns = {name: np.array(column if _dtype(name) is not np.float64 else
                              [np.nan if v is None else v for v in column], dtype=_dtype(name))
               for name, column in zip(names, zip(*rows))}
    return columns, np.array(numbers, dtype=np.int64)


def _row_problem(line: bytes, names: tuple[str, ...]) -> str:
    """Why a step line of a file of columns ``names`` cannot be used ('' when it can)."""
    try:
        row = json.loads(line)
    except ValueError:
        return "not valid JSON (truncated or corrupt line)"
    if not isinstance(row, list) or len(row) != len(names):
        return f"not an array of {len(names)} values"
    for name, value in zip(names, row):
        if name in BOOL_COLUMNS:
            ok = isinstance(value, bool)
        elif name in INT_COLUMNS:  # a whole number a 64-bit column holds
            ok = isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63
        else:  # JSON's integers have no bound: one past a double's range is no number either
            ok = value is None or is_number(value) and (isinstance(value, float) or abs(value) <= sys.float_info.max)
        if not ok:
            return f"bad value {value!r} for {name}"
    return ""


def _dtype(name: str) -> type:
    return np.int64 if name in INT_COLUMNS else bool if name in BOOL_COLUMNS else np.float64


def empty_columns(names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Columns ``names`` of no step line, each of its type."""
    return {c: np.empty(0, dtype=_dtype(c)) for c in names}
