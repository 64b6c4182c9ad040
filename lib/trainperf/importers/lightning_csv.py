"""Lightning's ``CSVLogger`` ``metrics.csv`` with ``ThroughputMonitor`` columns (docs/importers.md, "What each log
says").
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.errors import DataError
from trainperf.importers.core import Format, ParsedLog, ParsedRun
from trainperf.importers.settings import Settings
from trainperf.importers.text import iter_chunks
from trainperf.table_rules import is_missing

_HEADER = re.compile(r"^[^\n]*\btrain[/|]time\b[^\n]*$", re.MULTILINE)
_LOSS = ("train_loss", "loss", "train/loss", "train|loss", "train_loss_step")
_REPORTED = {"device{}samples_per_sec": "reported_samples_per_s_per_gpu",
             "device{}items_per_sec": "reported_tokens_per_s_per_gpu", "device{}mfu": "reported_mfu"}


class LightningCsv(Format):
    name = "lightning_csv"
    title = "a Lightning CSVLogger metrics.csv with ThroughputMonitor columns"

    def sniff(self, head: str, settings: Settings) -> int:
        header = head.split("\n", 1)[0]
        return max(1, head.count("\n")) if _HEADER.match(header) and re.search(r"\btrain[/|]samples\b", header) else 0

    def parse(self, path: Path, settings: Settings) -> ParsedLog:
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
        lines = text.count("\n") + 1
        return ParsedLog([ParsedRun(None, 2, {}, lambda config: (_measure(numbers, rows, sep, config), None))],
                         skipped, len(skipped), lines)


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
    for column in _LOSS:
        if column in numbers and numbers[column].notna().any():
            out["train_loss"] = float(numbers[column].dropna().iloc[-1])
            break
    return out
