"""Cost: per priced run, its device-hours, cost and cost per unit of work against its study's baseline."""

from __future__ import annotations

import pandas as pd

from trainperf.report.run_labels import by_experiment, doubtful, labels, marks
from trainperf.report.html import fmt_int, fmt_pct, fmt_times, fmt_usd

def _priced(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with a price per device-hour."""
    return runs[runs["price_per_gpu_hour"].notna()] if "price_per_gpu_hour" in runs else runs.iloc[0:0]


def cost(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with a price per device-hour: price, elapsed, device-hours, cost,
    USD per million tokens (``usd_per_million_tokens``; samples where a run lacks
    tokens: ``…_samples``; ``price_per_gpu_hour · gpus / 3600 s/h / rate · 10⁶``;
    left out where a run lacks both), cost efficiency (baseline cost per unit
    of work / this run's) and, where a run has any, ``marks`` (:func:`trainperf.report.run_labels.marks`)
    and ``known_error``."""
    priced = _priced(runs)
    known = priced["known_error"] if "known_error" in priced else pd.Series(pd.NA, index=priced.index)
    out = priced.assign(configuration=labels(priced) if len(priced) else [], marks=marks(priced), known_error=known)
    columns = ["experiment", "configuration", "gpus", "price_per_gpu_hour", "elapsed_s", "gpu_hours", "cost_usd"]
    rate = next((c for c in ("tokens_per_s", "samples_per_s") if len(priced) and priced[c].notna().all()), None)
    if rate:
        unit = f"usd_per_million_{rate.removesuffix('_per_s')}"
        out[unit] = priced["price_per_gpu_hour"] * priced["gpus"] / 3600 / priced[rate] * 1e6
        columns.append(unit)
    return out[[*columns, "cost_efficiency", *(["marks", "known_error"] if out["marks"].ne("").any() else [])]
               ].reset_index(drop=True)


def cost_notes(runs: pd.DataFrame) -> list[str]:
    """Per experiment with prices: how much faster its largest run is and how much dearer each unit of work;
    said to be the source's projection where a run of the two is one (``measured`` false)."""
    out = []
    for name, group in by_experiment(_priced(runs)):
        top, base = group.loc[group["gpus"].idxmax()], group.loc[group["gpus"].idxmin()]
        if top.name != base.name and pd.notna(top["cost_efficiency"]) and top["cost_efficiency"] > 0:
            projected = doubtful(group.loc[[base.name, top.name]]).any()
            out.append(f"{name}: going from {fmt_int(base['gpus'])} to {fmt_int(top['gpus'])} devices makes the job "
                       f"{fmt_times(top['scaling_multiplier'], 1)} faster and each unit of work "
                       f"{fmt_pct(1 / top['cost_efficiency'] - 1, 0)} more expensive ({fmt_usd(base['cost_usd'])} → "
                       f"{fmt_usd(top['cost_usd'])} per run)"
                       + (" — by figures that are not all measurements (see their marks), so no conclusion."
                          if projected else "."))
    return out
