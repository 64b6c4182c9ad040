"""Per-rank steps tables: CSV or Parquet files with at least the columns
``run_id``, ``rank`` and ``step`` (one row per rank per step, or per rank per
epoch), read into step intervals (``trainperf.schema.STEP_INTERVALS``).

Columns the file lacks are empty; ``warmup`` and ``includes_evaluation``
default to false and ``n_steps`` to 1 (a row is one step unless it says
otherwise). A value that is not a number, or a bool that is not spelled as
``trainperf.table_rules`` accepts, is a DataError naming its row (and CSV line)
and column, and so is one outside its column's bounds (``trainperf.schema``:
a step time that is not positive, or longer than 30 days; a negative phase
time or token count; infinities). A missing value (an empty cell) is not
given, not out of bounds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.errors import DataError
from trainperf.schema import STEP_INTERVAL_COLUMNS, STEP_INTERVALS, bound_problem, out_of_bounds
from trainperf.table_rules import FALSE, TRUE

SUFFIXES = (".csv", ".parquet")
REQUIRED = ("run_id", "rank", "step")
BOOLS = ("warmup", "includes_evaluation")
TEXT = ("run_id", "node")
WHOLE = ("rank", "step")
COLUMNS = {c.name: c for c in STEP_INTERVALS}


def has_steps_columns(path: Path) -> bool:
    """Whether a CSV or Parquet file is a steps table (has ``rank`` and ``step``)."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError):
            return False
    else:
        names = list(pd.read_csv(path, nrows=0).columns) if path.stat().st_size else []
    return {"rank", "step"} <= set(names)


def read_steps_table(path: Path) -> pd.DataFrame:
    """The step intervals of a steps-table file (:func:`as_intervals`)."""
    try:
        raw = pd.read_parquet(path) if path.suffix.lower() == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError) as exc:
        raise DataError(f"cannot read steps table: {exc}", path=path) from exc
    return as_intervals(raw, path)


def as_intervals(raw: pd.DataFrame, path: Path | None = None) -> pd.DataFrame:
    """A steps table (read from ``path``, or given as a frame) as step
    intervals, typed, rows by run (in the order they first appear) and rank
    (each rank's in the table's order)."""
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
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
            bad = pd.Series(out_of_bounds(COLUMNS[name], numbers.to_numpy(float)), index=values.index)
            if bad.any():
                problem = bound_problem(COLUMNS[name], float(numbers[bad].iloc[0]))
                _raise_first(values, bad, problem, path, name)
            out[name] = numbers.astype("int64" if name in WHOLE else "float64")
    order = np.lexsort((out["rank"].to_numpy(), pd.factorize(out["run_id"])[0]))  # runs as they first appear
    return out.iloc[order].reset_index(drop=True)


def _raise_first(values: pd.Series, bad: pd.Series, problem: str, path: Path | None, column: str) -> None:
    """DataError naming the first row (and CSV line) where ``bad`` holds."""
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        value = values.iloc[row]
        shown = f"{value:g}" if isinstance(value, (int, float, np.number)) else repr(value)
        raise DataError(f"{problem}: {shown}", path=path, row=row + 1, column=column,
                        line=row + 2 if path is not None and path.suffix.lower() == ".csv" else None)
