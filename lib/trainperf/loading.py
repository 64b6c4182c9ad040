"""``load_runs``: read runs tables, run folders and logs into one checked runs table.

Accepted inputs, by path:

* a table file: CSV, JSON (a list of records, ``{"runs": [...]}``, or one
  record per line), JSON lines (``.jsonl``) or Parquet, with canonical
  columns (``trainperf.schema``);
* a run folder written by the profiler (it holds ``manifest.json``),
  aggregated to one row;
* a training log (any other file, or a CSV with a column-mapping sidecar):
  handed to ``trainperf.importers``;
* a folder: every table, run folder and log (``.log``, ``.txt``, ``.out``)
  below it. Steps tables (columns ``rank`` and ``step``) are read by
  ``load_steps`` instead and listed as skipped; so are other files (``.md``,
  ``.py``, sidecars) and text files that are no log trainperf can read.

Every value is checked against the schema; the first problem raises
``DataError`` naming the file, the row (1-based, as a spreadsheet numbers data
rows; for CSV also the line) and the column. The result's ``attrs`` hold
``inputs`` (files and folders read) and ``skipped`` (``(path, reason)`` pairs),
as tuples (:func:`provenance`).
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import warnings
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.errors import DataError, DataWarning, NoMeasuredSteps
from trainperf.input_cache import cached_read
from trainperf.schema import DERIVED_COLUMNS, INPUT_COLUMNS, PREFIXES, REQUIRED, Column

TABLE_SUFFIXES = {".csv", ".json", ".jsonl", ".parquet"}
LOG_SUFFIXES = {".log", ".txt", ".out"}
"""In a folder, files with these endings are read as logs; a file named
explicitly is read as a log whatever its ending."""
SPEED_INPUTS = ("elapsed_s", "tokens_per_s", "samples_per_s", "step_time_s")
TRUE = {"true", "1", "1.0", "yes", "y", "t"}
FALSE = {"false", "0", "0.0", "no", "n", "f"}
"""Spellings of a bool cell (case ignored); ``1.0`` / ``0.0`` are what a JSON
column of 1 / 0 with a null in it becomes."""


def load_runs(*paths: str | Path, cache: bool = False) -> pd.DataFrame:
    """Read runs from tables, run folders, logs or folders of them into one
    canonical runs table (one row per run, schema columns plus any
    ``reported_*`` / ``extra_*``). Raises ``DataError`` on bad input or on a
    ``run_id`` that appears twice. With ``cache``, each input unchanged since
    it was last read comes from :mod:`trainperf.input_cache`."""
    if not paths:
        raise DataError("no input given: name at least one file or folder")
    frames: list[pd.DataFrame] = []
    inputs: list[str] = []
    skipped: list[tuple[str, str]] = []
    for path in map(Path, paths):
        if not path.exists():
            raise DataError("no such file or folder", path=path)
        for item, kind in _walk(path, skipped):
            try:
                frames.append(cached_read(item, kind, partial(_read, item, kind)) if cache else _read(item, kind))
            except NoMeasuredSteps as exc:
                if item == path:  # named explicitly: the caller asked for this run
                    raise
                skipped.append((str(item), f"still running or no measured step ({exc})"))
                warnings.warn(f"{item}: run skipped, still running or no measured step "
                              f"({str(exc).removeprefix(f'{item}: ')})", DataWarning, stacklevel=2)
                continue
            inputs.append(str(item))
    if not frames:
        raise DataError("no runs tables, run folders or logs found", path=", ".join(map(str, paths)))
    runs = pd.concat(frames, ignore_index=True)
    _check_unique(runs)
    runs.attrs = provenance(inputs=inputs, skipped=skipped)
    return runs


class Record(tuple):
    """A tuple that :func:`copy.deepcopy` returns as it is. pandas deep-copies a
    frame's ``attrs`` into every frame an operation makes; a record of what was
    read is never changed, so the copies can share it (copying lists of paths
    and reasons took a quarter of the scaling report's analysis)."""

    def __deepcopy__(self, memo: dict) -> Record:
        return self


def provenance(**items: Iterable) -> dict[str, Record]:
    """``attrs`` for a frame: each of ``items`` (inputs, skipped inputs,
    warnings, …) as a :class:`Record`."""
    return {key: Record(values) for key, values in items.items()}


def holds_inputs(path: str | Path) -> bool:
    """Whether ``path`` is, or is a folder holding, a runs table, run folder or log
    (what :func:`load_runs` reads); False for a missing path or an empty folder."""
    path = Path(path)
    return path.exists() and next(_walk(path, []), None) is not None


def _walk(path: Path, skipped: list[tuple[str, str]], in_folder: bool = False):
    """Yield ``(path, kind)`` for every input at or below ``path``; kind is
    ``table``, ``run`` (profiler run folder) or ``log`` (a CSV with a column
    mapping sidecar is a log too). A file found in a folder that no importer
    recognises is listed in ``skipped``; one named explicitly is an error."""
    if path.is_dir():
        if (path / "manifest.json").exists():
            yield path, "run"
            return
        for child in sorted(path.iterdir()):
            if child.name.startswith("."):
                continue
            if child.is_dir() or _is_data_file(child):
                yield from _walk(child, skipped, in_folder=True)
            else:
                skipped.append((str(child), "not a data file"))
        return
    from trainperf.importers import detect, reads_as_log

    if path.suffix.lower() in TABLE_SUFFIXES and not reads_as_log(path):
        if _is_steps_table(path):
            skipped.append((str(path), "steps table (one row per rank per step): read it with load_steps"))
            return
        yield path, "table"
        return
    if in_folder:
        try:
            detect(path)
        except DataError as exc:
            skipped.append((str(path), f"not a log trainperf can read ({exc})"))
            return
    yield path, "log"


def _is_data_file(path: Path) -> bool:
    return path.suffix.lower() in TABLE_SUFFIXES | LOG_SUFFIXES


def _is_steps_table(path: Path) -> bool:
    if path.suffix.lower() in (".csv", ".parquet"):
        from trainperf.steps import has_steps_columns

        return has_steps_columns(path)
    return {"rank", "step"} <= set(_read_raw(path).columns)


def _read(path: Path, kind: str) -> pd.DataFrame:
    if kind == "run":
        from trainperf.steps import read_run_folder

        runs = read_run_folder(path)
        return check_runs(runs, path)
    if kind == "log":
        from trainperf.importers import import_path

        return check_runs(import_path(path).runs, path)
    raw, lines = _read_csv(path) if path.suffix.lower() == ".csv" else (_read_raw(path), None)
    table = check_runs(raw, path, lines=lines)
    if "experiment" not in raw.columns:
        table["experiment"] = pd.Series(path.stem, index=table.index, dtype="string")
    if "source" not in raw.columns:
        table["source"] = pd.Series(str(path), index=table.index, dtype="string")
    return table


def _read_csv(path: Path) -> tuple[pd.DataFrame, list[int]]:
    """A CSV file's cells as strings, and the file line each data row starts on.

    Blank lines are skipped; a row whose field count differs from the
    header's (a stray or missing comma would shift every later value into the
    wrong column) and a column named twice are errors."""
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
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise DataError("column named more than once", path=path, column=twice[0])
    return pd.DataFrame(rows, columns=header, dtype="string"), lines


def _read_raw(path: Path) -> pd.DataFrame:
    """Read a JSON or Parquet table file without interpreting values (Parquet keeps its own types)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.DataFrame(_json_records(path))
    except DataError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read as a {suffix[1:]} table: {exc}", path=path) from exc


def _json_records(path: Path) -> list[dict]:
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


def check_runs(raw: pd.DataFrame, path: object = None, lines: list[int] | None = None) -> pd.DataFrame:
    """Check a runs table against the schema and return it with typed columns.

    ``raw`` may hold strings (as read from CSV) or typed values. ``lines``
    holds the file line of each data row, for error messages (CSV).
    Raises ``DataError`` naming ``path``, row and column of the first problem.
    """
    if len(raw) == 0:
        raise DataError("empty table: a header but no rows", path=path)
    _check_columns(list(raw.columns), path)

    def at(i: int) -> dict:
        return {"path": path, "row": i + 1, "line": None if lines is None else lines[i]}

    out = pd.DataFrame(index=pd.RangeIndex(len(raw)))
    for name in raw.columns:
        values = raw[name].reset_index(drop=True)
        column = INPUT_COLUMNS.get(name)
        where = (lambda i, name=name: {**at(i), "column": name})
        out[name] = _convert(values, column, where) if column else _convert_extra(values)
    for i in range(len(out)):
        if not any(c in out and not is_missing(out.at[i, c]) for c in SPEED_INPUTS):
            raise DataError("no measure of speed: give elapsed_s (with tokens or samples), or tokens_per_s, "
                            "samples_per_s or step_time_s", **at(i))
    repeated = np.flatnonzero(out["run_id"].duplicated().to_numpy())
    if len(repeated):
        i = int(repeated[0])
        first = int(np.flatnonzero((out["run_id"] == out["run_id"].iat[i]).to_numpy())[0])
        raise DataError(f"run_id {out['run_id'].iat[i]!r} appears more than once (first in row {first + 1})",
                        **at(i), column="run_id")
    return out


def _check_columns(columns: list[str], path: object) -> None:
    known = list(INPUT_COLUMNS)
    for name in columns:
        if not isinstance(name, str) or name in INPUT_COLUMNS or name.startswith(PREFIXES):
            continue
        if name in DERIVED_COLUMNS:
            hint = f"it is computed by derive(); to keep the source's own figure, name it 'reported_{name}'"
        else:
            close = difflib.get_close_matches(name, known, n=1)
            hint = (f"did you mean {close[0]!r}? " if close else "") + \
                "other columns must start with 'reported_' or 'extra_'"
        raise DataError(f"unknown column: {hint}", path=path, column=name)
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise DataError(f"missing required column(s): {', '.join(missing)}", path=path)


def _convert(values: pd.Series, column: Column, where) -> pd.Series:
    """Typed copy of one canonical column; DataError at the first bad cell."""
    blank = values.isna() | values.astype("string").str.strip().eq("")
    if column.kind == "str":
        result = values.astype("string").str.strip().mask(blank)
        if column.name == "run_id" and blank.any():
            raise DataError("run_id is empty", **where(int(np.flatnonzero(blank)[0])))
        if column.name == "precision":
            from trainperf.hardware import normalize_precision

            for i in np.flatnonzero(~blank.to_numpy()):
                try:
                    result.iat[i] = normalize_precision(str(result.iat[i]))
                except DataError as exc:
                    raise DataError(str(exc), **where(int(i))) from exc
        if column.name == "flops_convention":
            from trainperf.flops import CONVENTIONS

            result = result.str.lower()
            bad = ~blank & ~result.isin(CONVENTIONS)
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise DataError(f"{result.iat[i]!r} is not one of {', '.join(CONVENTIONS)}", **where(i))
        return result
    if column.kind == "bool":
        text = values.astype("string").str.strip().str.lower()
        bad = ~blank & ~text.isin(TRUE | FALSE)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(f"'{values.iat[i]}' is not true or false", **where(i))
        return text.isin(TRUE).astype("boolean").mask(blank)
    numbers = pd.to_numeric(values.mask(blank), errors="coerce").astype(float)
    bad = ~blank & (numbers.isna() | values.map(lambda v: isinstance(v, (bool, np.bool_))))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(f"'{values.iat[i]}' is not a number", **where(i))
    _check_range(numbers, column, where)
    return numbers


RANGE_CHECKS = {
    "positive": (lambda x: x > 0, "must be greater than 0"),
    "nonnegative": (lambda x: x >= 0, "must not be negative"),
    "count": (lambda x: x >= 1, "must be a count of at least 1"),
}


def _check_range(numbers: pd.Series, column: Column, where) -> None:
    present = numbers.notna().to_numpy()
    finite = np.isfinite(numbers.to_numpy())
    problems = present & ~finite
    message = "must be a finite number"
    if column.check:
        test, text = RANGE_CHECKS[column.check]
        failing = present & finite & ~test(numbers.fillna(0).to_numpy())
        if failing.any() and (not problems.any() or np.argmax(failing) < np.argmax(problems)):
            problems, message = failing, text
    if column.kind == "int" and not problems.any():
        problems = present & finite & (numbers.fillna(0).to_numpy() % 1 != 0)
        message = "must be a whole number"
    if problems.any():
        i = int(np.argmax(problems))
        raise DataError(f"{numbers.iat[i]:g} {message}", **where(i))


def _convert_extra(values: pd.Series) -> pd.Series:
    """``reported_*`` / ``extra_*`` columns: numbers where every cell is one, else text."""
    blank = values.isna() | values.astype("string").str.strip().eq("")
    numbers = pd.to_numeric(values.mask(blank), errors="coerce")
    if (numbers.notna() | blank).all():
        return numbers.astype(float)
    return values.astype("string").mask(blank)


def _check_unique(runs: pd.DataFrame) -> None:
    duplicated = runs["run_id"].duplicated(keep="first")
    if duplicated.any():
        rid = runs["run_id"][duplicated].iloc[0]
        sources = runs.loc[runs["run_id"] == rid, "source"].astype(str).tolist() if "source" in runs else []
        raise DataError(f"run_id {rid!r} appears more than once" +
                        (f" (in {' and '.join(dict.fromkeys(sources))})" if sources else ""), column="run_id")


def is_missing(value: object) -> bool:
    """Whether a cell is empty: None, pandas' NA or NaT, or a float NaN (numpy's too)."""
    return (value is None or value is pd.NA or value is pd.NaT
            or (isinstance(value, (float, np.floating)) and math.isnan(value)))
