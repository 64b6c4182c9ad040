"""CSV tables read as logs (docs/importers.md, "What each log says", "Any CSV"): Lightning's ``CSVLogger``
``metrics.csv`` with ``ThroughputMonitor`` columns (one run), and any CSV through a column mapping (``columns``; each
data row one run).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.errors import DataError
from trainperf.importers.core import Format, ParsedLog, ParsedRun, log_stem
from trainperf.importers.settings import Settings, as_number, check_key, coerce
from trainperf.importers.text import LineError, iter_chunks, number
from trainperf.schema import INPUT_COLUMNS
from trainperf.table_rules import is_missing

BLANK = {"", "-", "--", "—", "n/a", "na", "nan", "none", "null"}
DELIMITERS = (",", ";", "\t")


def delimiter(header: str) -> str | None:
    """The delimiter of a CSV header line, or None if it has fewer than two cells."""
    best = max(DELIMITERS, key=header.count)
    return best if header.count(best) else None


def csv_header(head: str) -> list[str] | None:
    """The column names of ``head`` where it parses as a CSV table: a header of distinct names (no cell a number),
    then rows with as many cells, each holding at least one number (the first 20 are checked); None otherwise. A
    log whose lines merely contain commas is not one."""
    lines = [line for line in head.split("\n") if line.strip()][:21]
    if len(lines) < 2 or (sep := delimiter(lines[0])) is None:
        return None
    header, *body = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=sep))
    names = [cell.strip() for cell in header]
    if len(names) < 2 or len(set(names)) < len(names) or any(not n or as_number(n) is not None for n in names):
        return None
    numeric = all(len(row) == len(header) and any(as_number(c) is not None for c in row) for row in body)
    return names if numeric else None


def mapping(settings: Settings, path: Path) -> dict[str, tuple[str, float]]:
    """``{runs column: (CSV column, scale)}`` from the settings (DataError if malformed)."""
    where = settings.columns_source or path
    result = {}
    for target, spec in (settings.columns or {}).items():
        check_key(target, where)
        if isinstance(spec, dict) and "column" in spec and not set(spec) - {"column", "scale"}:
            column, scale = spec["column"], as_number(spec.get("scale", 1.0))
            if scale is None or not math.isfinite(scale):
                raise DataError(f"scale {spec['scale']!r} is not a number", path=where, column=target)
        elif isinstance(spec, (str, int)) and not isinstance(spec, bool):
            column, scale = spec, 1.0
        else:
            raise DataError("a column spec is a CSV column name or {column: NAME, scale: NUMBER}",
                            path=where, column=target)
        result[target] = (str(column), scale)
        if target in settings.values:
            raise DataError("given both as a mapped column and as a value for every row", path=where,
                            column=target)
    return result


def cell_value(target: str, text: str, scale: float, where: object) -> Any:
    """A cell converted for runs column ``target`` (None if blank); LineError if unreadable."""
    text = text.strip()
    if text.lower() in BLANK:
        return None
    column = INPUT_COLUMNS.get(target)
    if column is None or column.kind in ("int", "float"):
        raw = text.lstrip("~≈ ").strip()
        try:
            value = number(raw.removesuffix("%").strip()) * (0.01 if raw.endswith("%") else 1.0) * scale
        except LineError:
            if column is not None:
                raise LineError(f"column {target!r}: {text[:40]!r} is not a number") from None
            return text
        if column is None:
            return value
        text = repr(value)
    try:
        return coerce(target, text, where)
    except DataError as exc:
        raise LineError(str(exc).split(": ", 1)[-1]) from None


def _sniff_mapped(head: str, settings: Settings) -> int:
    names = None if settings.columns is None else csv_header(head)
    specs = [s["column"] if isinstance(s, dict) else s for s in (settings.columns or {}).values()]
    return 1_000_000 if names is not None and all(str(s) in names for s in specs) else 0


def _read_mapped(path: Path, settings: Settings) -> ParsedLog:
    columns = mapping(settings, path)
    text = "\n".join("\n".join(lines) for lines in iter_chunks(path)).lstrip("\ufeff")
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise DataError("empty file", path=path)
    sep = delimiter(lines[first]) or ","
    reader = csv.reader(lines[first:], delimiter=sep)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as exc:
        raise DataError(f"unreadable CSV header: {exc}", path=path, line=first + 1) from exc
    index = {}
    for target, (source, _) in columns.items():
        if source not in header:
            raise DataError(f"the mapping names CSV column {source!r}, which the header lacks "
                            f"(columns: {', '.join(header)})", path=path, column=target)
        index[target] = header.index(source)
    stem = log_stem(path)
    runs, skipped = [], []
    k = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            skipped.append((str(path), first + reader.line_num, f"unreadable CSV row: {exc}"))
            continue
        line = first + reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        k += 1
        try:
            if len(row) != len(header):
                raise LineError(f"{len(row)} cells, the header has {len(header)}")
            values = {target: value for target, i in index.items()
                      if (value := cell_value(target, row[i], columns[target][1], path)) is not None}
        except LineError as exc:
            skipped.append((str(path), line, f"row {k}: {exc}"))
            continue
        name = str(values.pop("run_id", f"{stem}-{k}"))
        runs.append(ParsedRun(name, line, values, lambda config: ({}, None)))  # each row is all it measures
    return ParsedLog(runs, skipped, len(skipped), len(lines))


CSV_MAPPING = Format("csv", "a CSV table with a column mapping", _read_mapped, _sniff_mapped)


_HEADER = re.compile(r"^[^\n]*\btrain[/|]time\b[^\n]*$", re.MULTILINE)
_LOSS = ("train_loss", "loss", "train/loss", "train|loss", "train_loss_step")
_REPORTED = {"device{}samples_per_sec": "reported_samples_per_s_per_gpu",
             "device{}items_per_sec": "reported_tokens_per_s_per_gpu", "device{}mfu": "reported_mfu"}


def _sniff_lightning(head: str, settings: Settings) -> int:
    header = head.split("\n", 1)[0]
    return max(1, head.count("\n")) if _HEADER.match(header) and re.search(r"\btrain[/|]samples\b", header) else 0


def _read_lightning(path: Path, settings: Settings) -> ParsedLog:
    text = "\n".join(line for chunk in iter_chunks(path) for line in chunk)
    try:
        table = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, ValueError) as exc:
        raise DataError(f"not a readable CSV table: {exc}", path=path) from exc
    sep = "|" if "train|time" in table.columns else "/"
    time = f"train{sep}time"
    numbers = table.apply(lambda c: c if pd.api.types.is_numeric_dtype(c) else pd.to_numeric(c, errors="coerce"))
    rows = numbers[numbers[time].notna()]
    bad = table[time].notna() & numbers[time].isna()
    skipped = [(str(path), int(i) + 2, f"{time}: {table.at[i, time]!r} is not a number")
               for i in table.index[bad.to_numpy()]]
    return ParsedLog([ParsedRun(None, 2, {}, lambda config: (_measure(numbers, rows, sep, config), None))],
                     skipped, len(skipped), text.count("\n") + 1)


def _measure(numbers: pd.DataFrame, rows: pd.DataFrame, sep: str, config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if len(rows) < 2:
        return out
    first, last = rows.iloc[0], rows.iloc[-1]

    def delta(column: str) -> float:
        name = f"train{sep}{column}" if column != "step" else "step"
        return float(last[name] - first[name]) if name in rows else math.nan

    elapsed = delta("time")
    if not elapsed > 0:
        return out
    out.update(elapsed_s=elapsed, extra_time_source="train/time of ThroughputMonitor (validation left out)")
    if math.isfinite(delta("step")) and delta("step") > 0:
        out["steps"] = int(delta("step"))
    gpus = config.get("gpus")
    ratio = last.get(f"train{sep}samples_per_sec", math.nan) / last.get(f"train{sep}device{sep}samples_per_sec",
                                                                       math.nan)
    if is_missing(gpus) and ratio > 0 and math.isfinite(ratio):
        gpus = out["gpus"] = int(round(ratio))
    for column, name in (("samples", "samples"), ("lengths", "tokens")):
        if not is_missing(gpus) and delta(column) >= 0:
            out[name] = delta(column) * float(gpus)
    for column, name in _REPORTED.items():
        value = last.get(f"train{sep}{column.format(sep)}", math.nan)
        if math.isfinite(value):
            out[name] = float(value)
    loss = next((numbers[c].dropna() for c in _LOSS if c in numbers and numbers[c].notna().any()), None)
    if loss is not None:  # the last value of the first loss column that has one
        out["train_loss"] = float(loss.iloc[-1])
    return out


LIGHTNING_CSV = Format("lightning_csv", "a Lightning CSVLogger metrics.csv with ThroughputMonitor columns",
                       _read_lightning, _sniff_lightning)
