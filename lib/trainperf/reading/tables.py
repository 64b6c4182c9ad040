"""Table files, read and checked: runs tables (CSV, JSON: a list of records, ``{"runs": [...]}`` or one record per
line; JSON lines; Parquet) with the canonical columns (``trainperf.schema``, checked by ``trainperf.table_rules``),
and per-rank steps tables with at least ``run_id``, ``rank`` and ``step`` (one row per rank per step, or per rank per
epoch), read into step intervals (``trainperf.schema.STEP_INTERVALS``; missing columns, bad values and repeated
steps: docs/data.md, "Bounds, types and repeated steps").
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from trainperf.aggregate import repeated_steps
from trainperf.errors import DataError, DataWarning
from trainperf.schema import CLAIMS_COLUMNS, STEP_INTERVAL_COLUMNS, STEP_INTERVALS, bound_problem, out_of_bounds
from trainperf.table_rules import FALSE, TRUE, check_runs, raise_first


SUFFIXES = (".csv", ".json", ".jsonl", ".parquet")
"""The endings of table files (runs tables, steps tables, claims files)."""


def csv_header(path: Path) -> list[str]:
    """The column names of a CSV file: its first line that is not blank (none in an empty file)."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        return next((row for row in csv.reader(handle) if row), [])


def is_claims_file(path: Path) -> bool:
    """Whether ``path`` is a CSV file whose header is a claims file's (:data:`trainperf.schema.CLAIMS_COLUMNS`)."""
    return path.suffix.lower() == ".csv" and tuple(csv_header(path)) == CLAIMS_COLUMNS


def is_runs_table(path: Path) -> bool:
    """Whether ``path`` is a table file (:data:`SUFFIXES`), read as a runs table; DataError for a claims file."""
    if not path.is_file() or path.suffix.lower() not in SUFFIXES:
        return False
    if is_claims_file(path):
        raise DataError("a claims file (what a report concluded, not runs): give it to the reports as -p claims "
                        "PATH", path=path)
    return True


def read_runs_table(path: Path) -> pd.DataFrame:
    """The checked runs of a table file; ``experiment`` defaults to the file's stem and ``source`` to its path."""
    raw, lines = read_csv(path) if path.suffix.lower() == ".csv" else (read_raw(path), None)
    table = check_runs(raw, path, lines=lines)
    for column, value in (("experiment", path.stem), ("source", str(path))):
        if column not in raw.columns:
            table[column] = pd.Series(value, index=table.index, dtype="string")
    return table


def read_csv(path: Path) -> tuple[pd.DataFrame, list[int]]:
    """A CSV file's cells as strings, and the file line each data row starts on. Blank lines are skipped; a row whose
    field count differs from the header's (a stray or missing comma would shift every later value into the wrong
    column) and a column named twice are errors."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, skipinitialspace=True)
            header: list[str] | None = None
            rows: list[list[str]] = []
            lines: list[int] = []
            start = 1
            for record in reader:
                if record and any(field.strip() for field in record) or len(record) > 1:
                    if header is None:
                        header = [name.strip() for name in record]
                    else:
                        if len(record) != len(header):
                            raise DataError(f"{len(record)} fields, but the header has {len(header)} "
                                            "(a stray or missing comma?)", path=path, line=start)
                        rows.append(record)
                        lines.append(start)
                start = reader.line_num + 1
    except (csv.Error, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read as a csv table: {exc}", path=path) from exc
    if header is None:
        raise DataError("empty file: no header and no rows", path=path)
    if twice := sorted({name for name in header if header.count(name) > 1}):
        raise DataError("column named more than once", path=path, column=twice[0])
    return pd.DataFrame(rows, columns=header, dtype="string"), lines


def read_raw(path: Path) -> pd.DataFrame:
    """Read a JSON or Parquet table file without interpreting values (Parquet keeps its own types)."""
    suffix = path.suffix.lower()
    try:
        return pd.read_parquet(path) if suffix == ".parquet" else pd.DataFrame(json_records(path))
    except DataError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read as a {suffix[1:]} table: {exc}", path=path) from exc


def json_records(path: Path) -> list[dict]:
    """The run records of a JSON file (a list of objects, ``{"runs": [...]}`` or one object) or a JSON-lines file
    (an object a line); DataError for an empty file or anything else."""
    text = path.read_text()
    if not text.strip():
        raise DataError("empty file: no records", path=path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if data is None or path.suffix.lower() == ".jsonl" and not isinstance(data, list):
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"not JSON: {exc.msg}", path=path, line=number) from exc
            if not isinstance(records[-1], dict):
                raise DataError("a JSON line must be an object (one run)", path=path, line=number)
        return records
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        data = data["runs"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError('expected a list of run records or {"runs": [...]}', path=path)
    return data


REQUIRED = ("run_id", "rank", "step")
BOOLS = ("warmup", "includes_evaluation")
TEXT = ("run_id", "node")
WHOLE = ("rank", "step")
COLUMNS = {c.name: c for c in STEP_INTERVALS}


def is_steps_table(path: Path) -> bool:
    """Whether ``path`` is a table file with the columns ``rank`` and ``step`` (a JSON one is read whole: a table small
    enough to be JSON is small)."""
    suffix = path.suffix.lower()
    if not path.is_file() or suffix not in SUFFIXES:
        return False
    if suffix == ".parquet":
        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError):
            return False
    elif suffix == ".csv":
        names = csv_header(path)
    else:
        names = list(read_raw(path).columns)
    return {"rank", "step"} <= set(names)


def parts(path: Path, rows: int) -> list[Callable[[], tuple[pd.DataFrame, dict[str, list]]]]:
    """The parts of a steps-table file for the store (each gives its step intervals, whole ranks of one run and at
    most ``rows`` rows, or one rank when a rank has more, and no facts), read by :func:`as_intervals`."""
    try:
        raw = pd.read_parquet(path) if path.suffix.lower() == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError) as exc:
        raise DataError(f"cannot read steps table: {exc}", path=path) from exc
    intervals = as_intervals(raw, path)
    run, rank = intervals["run_id"].to_numpy(), intervals["rank"].to_numpy()
    new_run = run[1:] != run[:-1]
    bounds = [0, *(np.flatnonzero(new_run | (rank[1:] != rank[:-1])) + 1).tolist(), len(intervals)]
    runs = set((np.flatnonzero(new_run) + 1).tolist())
    pieces, begin = [], 0
    for start, end in zip(bounds[:-1], bounds[1:]):  # each rank's rows
        if start > begin and (start in runs or end - begin > rows):
            pieces.append(intervals.iloc[begin:start])
            begin = start
    pieces.append(intervals.iloc[begin:])
    return [partial(_held, piece) for piece in pieces]


def _held(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list]]:
    return frame, {}


def as_intervals(raw: pd.DataFrame, path: Path | None = None) -> pd.DataFrame:
    """A steps table (read from ``path``, or given as a frame) as step intervals, typed, rows by run (in the order they
    first appear) and rank (each rank's in the table's order)."""
    if missing := [c for c in REQUIRED if c not in raw.columns]:
        raise DataError(f"not a steps table: missing column(s) {', '.join(missing)}", path=path)
    out = pd.DataFrame(index=raw.index)
    for name in STEP_INTERVAL_COLUMNS:
        if name not in raw.columns:
            out[name] = (pd.Series(False, index=raw.index) if name in BOOLS else
                         pd.Series("", index=raw.index, dtype="string") if name in TEXT else
                         pd.Series(1.0 if name == "n_steps" else np.nan, index=raw.index))
            continue
        values = raw[name]
        if name in TEXT:
            out[name] = values.astype("string").fillna("")
        elif name in BOOLS:
            spelled = values.astype("string").str.strip().str.lower()
            _raise_first(values, values.notna() & ~spelled.isin(TRUE | FALSE), "not a bool", path, name)
            out[name] = spelled.isin(TRUE).fillna(False).astype(bool)
        else:
            numbers = pd.to_numeric(values, errors="coerce")
            _raise_first(values, numbers.isna() & values.notna(), "not a number", path, name)
            if name in WHOLE:
                _raise_first(values, numbers.isna(), "missing", path, name)
            bad = out_of_bounds(COLUMNS[name], numbers.to_numpy(float))
            if bad.any():
                _raise_first(values, bad, bound_problem(COLUMNS[name], float(numbers[bad].iloc[0])), path, name)
            out[name] = numbers.astype("int64" if name in WHOLE else "float64")
    order = np.lexsort((out["rank"].to_numpy(), pd.factorize(out["run_id"])[0]))  # runs as they first appear
    return _read_once(out.iloc[order].reset_index(drop=True), order, path)


def _read_once(intervals: pd.DataFrame, rows: np.ndarray, path: Path | None) -> pd.DataFrame:
    """``intervals`` (row ``i`` is the table's row ``rows[i]``) with each step of a run and rank once
    (``trainperf.aggregate.repeated_steps``)."""
    found = repeated_steps(intervals, restarts=True)
    if found is None:
        return intervals
    csv = path is not None and path.suffix.lower() == ".csv"

    def where(i: int) -> str:
        return f"row {rows[i] + 1}" + (f" (line {rows[i] + 2})" if csv else "")

    def record(i: int) -> str:
        return f"run {intervals['run_id'].iat[i]}, rank {intervals['rank'].iat[i]}, step {intervals['step'].iat[i]}"

    if found.conflicts:
        earlier, later = found.conflicts[0]
        raise DataError(f"{record(later)} is recorded twice with different values, in {where(earlier)} and "
                        f"{where(later)} (a restart, whose steps count from an earlier step again, keeps the "
                        "latest attempt; this is not one)", path=path)
    source = f"{path}: " if path is not None else ""
    for pairs, what, relation in ((found.copies, "row(s) repeat an earlier row exactly, read once", "the same as"),
                                  (found.redone, "step(s) recorded again after a restart: the latest attempt kept, "
                                                 "the earlier left out", "again in")):
        if pairs:
            shown = "; ".join(f"{record(i)} in {where(i)}, {relation} {where(j)}" for i, j in pairs[:3])
            warnings.warn(f"{source}{len(pairs)} {what} ({shown}{'; ...' if len(pairs) > 3 else ''})", DataWarning,
                          stacklevel=4)
    return intervals[found.keep].reset_index(drop=True)


def _raise_first(values: pd.Series, bad: pd.Series, problem: str, path: Path | None, column: str) -> None:
    """DataError naming the first row (and CSV line) where ``bad`` holds."""
    csv = path is not None and path.suffix.lower() == ".csv"

    def shown(i: int) -> str:
        value = values.iloc[i]
        return f"{problem}: {value:g}" if isinstance(value, (int, float, np.number)) else f"{problem}: {value!r}"

    raise_first(bad, shown, lambda i: {"path": path, "row": i + 1, "column": column, "line": i + 2 if csv else None})
