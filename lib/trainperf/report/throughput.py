"""The throughput report: per configuration, the work done, the elapsed time
and the throughput of the whole job and of one device — as a frame for the
notebook's table and charts, and its headline."""

from __future__ import annotations

import pandas as pd

from trainperf.report.configs import doubtful, labels, ordered, rank, several_device_counts, unit_of
from trainperf.report.html import Html, fmt_int, fmt_pct, headline as banner
from trainperf.report.page import require


def measured(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that have a throughput, ordered by experiment and devices."""
    unit = unit_of(runs)
    have = require(runs, unit.rate, f"a throughput in {unit.label}",
                   "give tokens (or samples) and elapsed_s, or a rate such as tokens_per_s")
    return ordered(have, ["gpus", "micro_batch_size", "run_id"])


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: experiment, configuration, devices, work
    (tokens, samples), elapsed time, throughput total and per device, time
    per step, per-device rate as a fraction of the baseline's (scaling
    efficiency; NaN for experiments measured at one device count only),
    ``best`` (the highest throughput of the report) and ``chart_label`` (the
    configuration on a chart axis, shared by its repeats); columns no run has are left out."""
    unit = unit_of(runs)
    view = runs.assign(configuration=labels(runs), best=runs.index == rank(runs, unit.rate).best.name,
                       scaling_efficiency=runs["scaling_efficiency"].where(several_device_counts(runs)),
                       chart_label=labels(runs, compact=True))
    columns = ["experiment", "configuration", "gpus", "tokens", "samples" if unit.name == "samples" else None,
               "elapsed_s", unit.rate, unit.per_device, "step_time_s", "scaling_efficiency", "best", "chart_label"]
    return view[[c for c in columns if c and (c in ("best", "chart_label") or view[c].notna().any())]
                ].reset_index(drop=True)


def headline(runs: pd.DataFrame) -> Html:
    """The peak throughput, where it was reached, and what one device keeps of its baseline rate; never
    of a run the page marks (:func:`trainperf.report.configs.doubtful`: projected, oversubscribed,
    incomplete) while another has a throughput."""
    unit = unit_of(runs)
    doubt = doubtful(runs)
    best = rank(runs[~doubt] if runs.loc[~doubt, unit.rate].notna().any() else runs, unit.rate).best
    where = labels(runs)[runs.index.get_loc(best.name)]
    text = (f"Peak throughput {fmt_int(best[unit.rate])} {unit.label} with {where}: "
            f"{fmt_int(best[unit.per_device])} {unit.label} per device.")
    figures = [(fmt_int(best[unit.rate]), f"{unit.label}, all devices (peak)"),
               (fmt_int(best[unit.per_device]), f"{unit.label} per device at the peak")]
    if pd.notna(best.get("scaling_efficiency")) and best["gpus"] > runs.loc[
            runs["experiment"] == best["experiment"], "gpus"].min():
        figures.append((fmt_pct(best["scaling_efficiency"], 0),
                        "per-device rate kept against the baseline run (scaling efficiency)"))
    if pd.notna(best.get("elapsed_s")):
        figures.append((f"{best['elapsed_s']:,.1f} s", "elapsed at the peak configuration"))
    return banner(text, figures)
