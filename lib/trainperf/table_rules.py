"""Rules for the values of a table, shared by every reader: what counts as missing, how a bool is spelled, the check
of a runs table against the schema (:func:`check_runs`); and how a cell is written out (CSV a spreadsheet reads
safely, JSON, a figure in Markdown).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.errors import DataError
from trainperf.flops import CONVENTIONS
from trainperf.hardware import normalize_precision
from trainperf.schema import (DERIVED_COLUMNS, INPUT_COLUMNS, PREFIXES, REQUIRED, SCALING_TYPES, SIDECAR_SUFFIX,
                              Column, bound_problem, out_of_bounds)
from trainperf.steady_state import RULES

CHOICES = {"flops_convention": tuple(CONVENTIONS), "scaling_type": SCALING_TYPES, "warmup_rule": RULES}
"""The values a text column may take (any case)."""

SPEED_INPUTS = ("elapsed_s", "tokens_per_s", "samples_per_s", "step_time_s")
"""Columns of which a runs row needs one: its measure of speed (unless it does not fit: ``fits`` false)."""
TRUE = {"true", "1", "1.0", "yes", "y", "t"}
FALSE = {"false", "0", "0.0", "no", "n", "f"}
"""Spellings of a bool cell (case ignored); ``1.0`` / ``0.0``: a JSON column of 1 / 0 with a null in it."""


def check_runs(raw: pd.DataFrame, path: object = None, lines: list[int] | None = None) -> pd.DataFrame:
    """``raw`` (strings as read from CSV, or typed values) checked against the schema, with typed columns. DataError
    naming ``path``, the row (its file line: ``lines``) and column of the first problem."""
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
    fits = out["fits"] if "fits" in out else pd.Series(pd.NA, index=out.index, dtype="boolean")
    speed = out[[c for c in SPEED_INPUTS if c in out]].notna().any(axis=1)
    raise_first(~speed & ~fits.eq(False).fillna(False), lambda i: "no measure of speed: give elapsed_s (with tokens "
                "or samples), or tokens_per_s, samples_per_s or step_time_s", at)  # unless it ran out of memory
    ids = out["run_id"]
    raise_first(ids.duplicated(), lambda i: f"run_id {ids.iat[i]!r} appears more than once (first in row "
                f"{int(np.argmax((ids == ids.iat[i]).to_numpy(bool))) + 1})", lambda i: {**at(i), "column": "run_id"})
    return out


def _check_columns(columns: list[str], path: object) -> None:
    for name in columns:
        if not isinstance(name, str) or name in INPUT_COLUMNS or name.startswith(PREFIXES):
            continue
        if name in DERIVED_COLUMNS:
            hint = f"it is computed by derive(); to keep the source's own figure, name it 'reported_{name}'"
        else:
            close = difflib.get_close_matches(name, list(INPUT_COLUMNS), n=1)
            hint = (f"did you mean {close[0]!r}? " if close else "") + \
                "other columns must start with 'reported_', 'extra_' or 'outside_'"
            if str(path).lower().endswith(".csv"):
                hint += (f"; a table with column names of its own is read through a column mapping in "
                         f"{Path(str(path)).name}{SIDECAR_SUFFIX} (columns: {{run_id: <your column>, gpus: ..., "
                         "tokens: ..., elapsed_s: ...}; docs/importers.md)")
        raise DataError(f"unknown column: {hint}", path=path, column=name)
    if missing := [c for c in REQUIRED if c not in columns]:
        raise DataError(f"missing required column(s): {', '.join(missing)}", path=path)


def _convert(values: pd.Series, column: Column, where: Callable[[int], dict]) -> pd.Series:
    """Typed copy of one canonical column; DataError at the first bad cell."""
    blank = values.isna() | values.astype("string").str.strip().eq("")
    if column.kind == "str":
        result = values.astype("string").str.strip().mask(blank)
        if column.name == "run_id":
            raise_first(blank, lambda i: "run_id is empty", where)
        if column.name == "precision":
            for i in np.flatnonzero(~blank.to_numpy()):
                try:
                    result.iat[i] = normalize_precision(str(result.iat[i]))
                except DataError as exc:
                    raise DataError(str(exc), **where(int(i))) from exc
        if column.name in CHOICES:
            result = result.str.lower()
            raise_first(~blank & ~result.isin(CHOICES[column.name]),
                        lambda i: f"{result.iat[i]!r} is not one of {', '.join(CHOICES[column.name])}", where)
        return result
    if column.kind == "bool":
        text = values.astype("string").str.strip().str.lower()
        raise_first(~blank & ~text.isin(TRUE | FALSE), lambda i: f"'{values.iat[i]}' is not true or false", where)
        return text.isin(TRUE).astype("boolean").mask(blank)
    numbers = pd.to_numeric(values.mask(blank), errors="coerce").astype(float)
    raise_first(~blank & (numbers.isna() | values.map(lambda v: isinstance(v, (bool, np.bool_)))),
                lambda i: f"'{values.iat[i]}' is not a number", where)
    raise_first(out_of_bounds(column, numbers.to_numpy(float)),
                lambda i: f"{numbers.iat[i]:g} {bound_problem(column, float(numbers.iat[i]))}", where)
    return numbers


def raise_first(bad: pd.Series | np.ndarray, problem: Callable[[int], str], where: Callable[[int], dict]) -> None:
    """DataError ``problem(i)`` at ``where(i)`` (``path``, ``row``, ``line``, ``column``) at the first ``bad``."""
    rows = np.flatnonzero(np.asarray(bad, dtype=bool))
    if len(rows):
        raise DataError(problem(int(rows[0])), **where(int(rows[0])))


def _convert_extra(values: pd.Series) -> pd.Series:
    """``reported_*`` / ``extra_*`` / ``outside_*`` columns: numbers where every cell is one, else text."""
    blank = values.isna() | values.astype("string").str.strip().eq("")
    numbers = pd.to_numeric(values.mask(blank), errors="coerce")
    return numbers.astype(float) if (numbers.notna() | blank).all() else values.astype("string").mask(blank)


def is_missing(value: object) -> bool:
    """Whether a cell is empty: None, pandas' NA or NaT, or a float NaN (numpy's too)."""
    return (value is None or value is pd.NA or value is pd.NaT
            or (isinstance(value, (float, np.floating)) and math.isnan(value)))


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a text cell as a formula (OWASP, "CSV Injection")."""


def spreadsheet_safe(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` for writing as CSV: a ``'`` before every text cell and column name that starts with one of
    :data:`FORMULA_STARTS`, so a spreadsheet shows it instead of running it (``=cmd|...``); ``-1.5`` stays a number."""
    def safe(value: object) -> object:
        return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value

    text = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    out = table.assign(**{c: table[c].map(safe, na_action="ignore") for c in text}) if text else table
    return out.rename(columns=safe)


def json_ready(value: object) -> object:
    """``value`` (a cell, or a dict or list of them) for JSON: NaN and missing values as None, numpy scalars unboxed."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [json_ready(v) for v in value]
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def figure_text(x: float) -> str:
    """A number in a Markdown table: 4 significant digits below 1,000, else whole; thousands separated."""
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"
