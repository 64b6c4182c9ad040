"""A :class:`Comparison` as text (a terminal), Markdown (a pull-request comment) or JSON (a program): ``--format``."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pandas as pd

from trainperf.compare.analysis import SHOWN_ONLY, Comparison
from trainperf.compare.metrics import METRICS, NOT_MEASURED
from trainperf.stats import INCONCLUSIVE
from trainperf.table_rules import figure_text, json_ready

FORMATS = ("text", "json", "markdown")
ROW_NAMES = {"step_time": "step", "slowest_wait": "slowest wait", "comm_exposed": "comm exposed"}
"""Short names of the phase rows in the text table."""


def row_name(name: str) -> str:
    """A phase or rank row's name as the text and Markdown tables show it."""
    return ROW_NAMES.get(name, name.replace("_", " "))


def shown_only(metrics: pd.DataFrame) -> pd.Series:
    """Per row of a comparison's ``metrics``, whether it is shown but not judged (:data:`SHOWN_ONLY`)."""
    return metrics["basis"].astype("string").str.endswith(SHOWN_ONLY).fillna(False)


def gate_line(result: Comparison) -> str:
    """The outcome over every judged metric, one line: the exit status and what regressed."""
    rows = result.metrics[~shown_only(result.metrics)]
    if result.exit_code:
        return "regression (exit 1): " + "; ".join(f"{r.label} {r.verdict} ({r.change:+.1%})"
                                                   for r in rows.itertuples() if r.regressed)
    return "no regression (exit 0): " + "; ".join(f"{r.label} {r.verdict}" for r in rows.itertuples())


def _interval(row: pd.Series) -> str:
    """The 95 % interval of the change of a ``metrics`` row (fractions), "" where it has none."""
    return f"{row['low']:+.1%} to {row['high']:+.1%}" if pd.notna(row["low"]) and math.isfinite(row["low"]) else ""


def metric_line(row: pd.Series) -> str:
    """A judged metric in one line: its verdict, the change with its interval, minimum effect and basis."""
    if row["verdict"] == NOT_MEASURED:
        return f"{row['label']}: not measured ({row['basis']})"
    effect = f"{row['min_effect'] * 100:g}%"
    interval = f"95 % interval {shown}" if (shown := _interval(row)) else "no interval"
    line = (f"{row['label']}: {row['verdict']}: candidate {row['change']:+.1%} vs baseline ({interval}; minimum effect "
            f"{effect}; {row['basis']})")
    if row["verdict"] == INCONCLUSIVE and pd.notna(row["repeats_needed"]):
        line += f"; about {int(row['repeats_needed']):,} runs a side would detect {effect} (80 % power)"
    return line


def text(result: Comparison) -> str:
    """The short text report: sides, phases, communication and ranks, the load at start, notes and warnings; the
    other judged metrics, and last the verdict (the gate's outcome where more than throughput is judged)."""
    unit = f"{result.unit}/s"
    lines = [f"{'side':<10} {'runs':>4} {'steps':>6} {unit:>14}  {'95 % interval':<23} {result.unit + '/step':>12}"]
    for row in result.sides.itertuples():
        interval = "—" if math.isnan(row.low) else f"{row.low:,.1f} – {row.high:,.1f}"
        per_step = "—" if math.isnan(row.work_per_step) else f"{row.work_per_step:,.0f}"
        lines.append(f"{row.side:<10} {row.runs:>4} {row.steps:>6} {row.throughput:>14,.1f}  {interval:<23} "
                     f"{per_step:>12}")
    for title, table in (("phase", result.phases), ("overlapping", result.overlaps), ("rank", result.ranks)):
        if len(table):
            lines += ["", f"{title:<13} {'baseline s':>11} {'candidate s':>11} {'of step':>8} {'of own':>8}  "
                          "95 % interval (s)"]
            for row in table.itertuples():
                name = row_name(row[1])  # the phase or the rank
                own = "—" if math.isnan(row.relative_change) else f"{row.relative_change:+.1%}"
                lines.append(f"{name:<13} {row.baseline_s:>11.4f} {row.candidate_s:>11.4f} {row.delta_pct:>+8.1%} "
                             f"{own:>8}  {row.low_s:+.4f} to {row.high_s:+.4f}{'  *' if row.moved else ''}")
    if len(result.phases):
        lines.append("(change of step: of the baseline step time; of own: of the phase's own baseline time; "
                     "* moved: interval excludes 0 and the change is at least the minimum effect of a step)")
    lines += ["", *load_lines(result.load), *result.notes, *(f"warning: {w}" for w in result.warnings)]
    lines += [metric_line(row) for _, row in result.metrics.iterrows() if row["metric"] != "throughput"]
    judged = set(result.metrics.loc[~shown_only(result.metrics), "metric"])
    if "throughput" in judged:
        lines.append(result.headline())
    if judged != {"throughput"}:
        lines.append(gate_line(result))
    return "\n".join(lines)


def load_lines(load: pd.DataFrame) -> list[str]:
    """Each side's machine load at the start of its runs, one line a side."""
    lines = []
    for side, runs in load.groupby("side", sort=False):
        shown = [f"{r.run_id} {r.load_average_1min:.2f}"
                 + (f" on {r.cpu_cores:.0f} cores" if pd.notna(r.cpu_cores) else "") + (" (loaded)" if r.loaded else "")
                 for r in runs.itertuples() if pd.notna(r.load_average_1min)]
        lines.append(f"Load at start (1-minute load average), {side}: {'; '.join(shown)}." if shown else
                     f"Load at start, {side}: not recorded.")
    return lines


def markdown(result: Comparison) -> str:
    """A pull-request comment: the outcome, a table row per judged metric, warnings; phases and notes folded away."""
    outcome = "regression (exit 1)" if result.exit_code else "no regression (exit 0)"
    lines = [f"### trainperf compare: {outcome}", "",
             f"Baseline `{result.baseline.replace('`', '')}` · candidate `{result.candidate.replace('`', '')}`", "",
             "| metric | baseline | candidate | change | 95 % interval | minimum effect | verdict |",
             "|---|---:|---:|---:|---|---:|---|"]
    for _, row in result.metrics.iterrows():
        unit = f"{result.unit}/s" if row["metric"] == "throughput" else row["unit"]
        call = row["verdict"]
        if call == INCONCLUSIVE and pd.notna(row["repeats_needed"]):
            call += f": about {int(row['repeats_needed']):,} runs a side would detect {row['min_effect'] * 100:g} %"
        elif call == NOT_MEASURED:
            call += f" ({row['basis']})"
        elif row["regressed"]:
            call = f"**{call}**"
        figures = ([figure_text(row["baseline"]), figure_text(row["candidate"]), f"{row['change']:+.1%}"]
                   if row["verdict"] != NOT_MEASURED else ["–"] * 3)
        cells = [f"{row['label']} ({unit})", *figures, _interval(row) or "–", f"{row['min_effect'] * 100:g} %", call]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    for warning in result.warnings:
        lines += ["", f"> **Warning:** {_cell(warning)}"]
    if len(result.phases):
        lines += ["", "<details><summary>Phases per step (s)</summary>", "",
                  "| phase | baseline | candidate | change of step | change of own | moved |", "|---|---:|---:|---:|---:|---|"]
        for table in (result.phases, result.overlaps):
            for row in table.itertuples():
                own = "–" if math.isnan(row.relative_change) else f"{row.relative_change:+.1%}"
                lines.append(f"| {row_name(row.phase)} | {row.baseline_s:.4f} | {row.candidate_s:.4f} | "
                             f"{row.delta_pct:+.1%} | {own} | {'yes' if row.moved else 'no'} |")
        lines += ["", "</details>"]
    notes = [f"- {_cell(n)}" for n in [*load_lines(result.load), *result.notes]]
    lines += ["", "<details><summary>Notes</summary>", "", *notes, "", "</details>"]
    return "\n".join(lines)


def as_json(result: Comparison) -> str:
    """Every figure, verdict, note and the exit code as one JSON object (NaN as null)."""
    data = {
        "baseline": result.baseline, "candidate": result.candidate, "unit": result.unit,
        "exit_code": result.exit_code, "verdict": result.verdict, "headline": result.headline(),
        "min_effect": result.min_effect, "repeats_needed": result.repeats_needed,
        "assumed_run_cv": result.assumed_run_cv, "difference": asdict(result.difference),
        **{table: getattr(result, table).astype(object).to_dict(orient="records")
           for table in ("metrics", "sides", "phases", "overlaps", "ranks", "load")},
        "notes": result.notes, "warnings": result.warnings,
        "defaults": {m.name: {"min_effect": m.min_effect, "run_cv": m.run_cv, "higher_is_better": m.higher_is_better}
                     for m in METRICS.values()},
    }
    return json.dumps(json_ready(data), indent=2, allow_nan=False)


def render(result: Comparison, form: str = "text") -> str:
    """``result`` in one of :data:`FORMATS`."""
    return {"text": text, "json": as_json, "markdown": markdown}[form](result)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
