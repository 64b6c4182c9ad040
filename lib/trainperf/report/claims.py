"""Claims checked: what a report written by hand concluded, against trainperf's own figures. The claims file's
columns, the kinds of claim and when a printed figure holds: docs/reports.md, "Claims checked"."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import pandas as pd

from trainperf.errors import DataError
from trainperf.report.html import count, fmt_pct, fmt_sig
from trainperf.schema import CLAIMS_COLUMNS

TOLERANCE = 0.02
"""Relative difference within which a printed figure holds."""
KINDS = ("value", "ratio", "greater", "lowest", "highest")
COLUMNS = CLAIMS_COLUMNS
"""Columns of a claims file (``reference_run_id`` and ``printed`` may be empty where the kind needs none)."""
HOLDS, FAILS, UNCHECKED = "holds", "does not hold", "cannot be checked"


def read_claims(paths: str | Path | Sequence[str | Path] | None) -> pd.DataFrame:
    """The claims of the CSV files ``paths``; DataError naming the file, row and column of one not checkable."""
    frames = []
    for path in map(Path, [paths] if isinstance(paths, (str, Path)) else list(paths or [])):
        if not path.is_file():
            raise DataError("no such claims file", path=path)
        table = pd.read_csv(path, dtype="string", keep_default_na=False)
        if missing := [c for c in COLUMNS if c not in table.columns]:
            raise DataError(f"a claims file needs the columns {', '.join(COLUMNS)}; missing {', '.join(missing)}",
                            path=path)
        for line, claim in enumerate(table.to_dict("records"), start=2):
            _check_row(claim, path, line)
        frames.append(table[list(COLUMNS)])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS), dtype="string")


def _check_row(claim: dict[str, str], path: Path, line: int) -> None:
    def refuse(column: str, message: str) -> DataError:
        return DataError(message, path=path, line=line, column=column)

    if claim["kind"] not in KINDS:
        raise refuse("kind", f"{claim['kind']!r} is not one of {', '.join(KINDS)}")
    for column in ("run_id", "metric"):
        if not claim[column]:
            raise refuse(column, "must be given")
    if claim["kind"] in ("ratio", "greater") and not claim["reference_run_id"]:
        raise refuse("reference_run_id", f"a {claim['kind']} claim compares two runs: name the second")
    if claim["kind"] in ("value", "ratio"):
        try:
            Decimal(claim["printed"])
        except ArithmeticError:
            raise refuse("printed", f"{claim['printed']!r} is not a number") from None


def checked(runs: pd.DataFrame, claims: pd.DataFrame, report: str) -> tuple[pd.DataFrame, str]:
    """The claims of ``report`` about ``runs`` with trainperf's figure and a verdict (rows ``claim, source,
    printed, trainperf_figure, verdict, why``, text), and a sentence counting those about runs not shown."""
    indexed = runs.set_index(runs["run_id"].astype(str))
    rows, left_out = [], 0
    for claim in claims[claims["report"] == report].to_dict("records"):
        ids = [claim["run_id"]] + ([claim["reference_run_id"]] if claim["reference_run_id"] else [])
        if not all(i in indexed.index for i in ids):
            left_out += 1
            continue
        figure, verdict, why = _judge(claim, indexed)
        rows.append({"claim": claim["claim"], "source": claim["source"], "printed": claim["printed"] or "–",
                     "trainperf_figure": figure, "verdict": verdict, "why": why})
    note = (f"{count(left_out, 'claim')} about runs this page does not show {'is' if left_out == 1 else 'are'} "
            "left out." if left_out else "")
    return pd.DataFrame(rows, columns=["claim", "source", "printed", "trainperf_figure", "verdict", "why"]), note


def _judge(claim: dict[str, str], runs: pd.DataFrame) -> tuple[str, str, str]:
    """trainperf's figure for one claim (as text), the verdict and why."""
    kind, metric, run = claim["kind"], claim["metric"], claim["run_id"]
    other = claim["reference_run_id"]
    if metric not in runs.columns:
        return "–", UNCHECKED, f"the data has no {metric}"
    involved = (runs[runs["experiment"].astype(str) == str(runs.at[run, "experiment"])] if kind in ("lowest", "highest")
                else runs.loc[[run, *([other] if other else [])]])
    if "measured" in involved and not involved["measured"].fillna(True).astype(bool).all():
        return "–", UNCHECKED, "it rests on rows the source projected or estimated, not measured"
    values = pd.to_numeric(involved[metric], errors="coerce")
    if values.isna().any():
        return "–", UNCHECKED, f"trainperf cannot compute {metric} for {', '.join(values.index[values.isna()])}"
    if kind in ("lowest", "highest"):
        best = str(values.idxmin() if kind == "lowest" else values.idxmax())
        found = f"{best} ({metric} {fmt_sig(values[best])})"
        return found, HOLDS if best == run else FAILS, "" if best == run else f"{run}: {fmt_sig(values[run])}"
    if kind == "greater":
        a, b = values[run], values[other]
        return f"{fmt_sig(a)} vs {fmt_sig(b)}", HOLDS if a > b else FAILS, ""
    figure = values[run] / values[other] if kind == "ratio" else values[run]
    printed = float(claim["printed"])
    gap = abs(figure - printed)
    half_unit = 0.5 * 10.0 ** Decimal(claim["printed"]).as_tuple().exponent  # "2.0": 0.05, "7.6": 0.05, "2": 0.5
    holds = bool(gap <= TOLERANCE * abs(figure) or gap <= half_unit)
    why = "" if holds else f"the printed figure is {fmt_pct((printed - figure) / figure, signed=True)} off trainperf's"
    return fmt_sig(figure, 4), HOLDS if holds else FAILS, why


def verdict_counts(table: pd.DataFrame) -> str:
    """``3 claims checked — holds: 2, does not hold: 1.``; "" for none."""
    if table.empty:
        return ""
    counts = table["verdict"].value_counts()
    parts = [f"{v}: {counts[v]}" for v in (HOLDS, FAILS, UNCHECKED) if v in counts]
    return f"{count(len(table), 'claim')} checked — {', '.join(parts)}."

