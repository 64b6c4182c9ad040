"""Runs tables: CSV, JSON (a list of records, ``{"runs": [...]}``, or one
record per line), JSON lines and Parquet files with the canonical columns
(``trainperf.schema``), read and checked (``trainperf.table_rules``). A
CSV's cells are read as strings, typed by the check; a row with more or fewer
fields than the header is refused (a stray comma would shift its values).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd

from trainperf.errors import DataError
from trainperf.schema import CLAIMS_COLUMNS
from trainperf.table_rules import check_runs


SUFFIXES = (".csv", ".json", ".jsonl", ".parquet")
"""The endings of table files (runs tables, steps tables, claims files)."""


def is_claims_file(path: Path) -> bool:
    """Whether ``path`` is a CSV file whose header is a claims file's (:data:`trainperf.schema.CLAIMS_COLUMNS`)."""
    return path.suffix.lower() == ".csv" and path.stat().st_size > 0 and \
        tuple(pd.read_csv(path, nrows=0).columns) == CLAIMS_COLUMNS


def is_runs_table(path: Path) -> bool:
    """Whether ``path`` is a table file (:data:`SUFFIXES`), read as a runs table;
    DataError for a claims file."""
    if not path.is_file() or path.suffix.lower() not in SUFFIXES:
        return False
    if is_claims_file(path):
        raise DataError("a claims file (what a report concluded, not runs): give it to the reports as -p claims "
                        "PATH", path=path)
    return True


def read_runs_table(path: Path) -> pd.DataFrame:
    """The checked runs of a table file; ``experiment`` defaults to the file's
    stem and ``source`` to its path."""
    raw, lines = read_csv(path) if path.suffix.lower() == ".csv" else (read_raw(path), None)
    table = check_runs(raw, path, lines=lines)
    if "experiment" not in raw.columns:
        table["experiment"] = pd.Series(path.stem, index=table.index, dtype="string")
    if "source" not in raw.columns:
        table["source"] = pd.Series(str(path), index=table.index, dtype="string")
    return table


def read_csv(path: Path) -> tuple[pd.DataFrame, list[int]]:
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


def read_raw(path: Path) -> pd.DataFrame:
    """Read a JSON or Parquet table file without interpreting values (Parquet keeps its own types)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.DataFrame(json_records(path))
    except DataError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read as a {suffix[1:]} table: {exc}", path=path) from exc


def json_records(path: Path) -> list[dict]:
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
