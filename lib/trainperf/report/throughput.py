"""The throughput report: per configuration, the work done, the elapsed time
and the throughput of the whole job and of one device."""

from __future__ import annotations

import pandas as pd

from trainperf.report import plots
from trainperf.report.configs import experiment_runs, experiments, labels, ordered, rank, unit_of
from trainperf.report.html import (Col, Fragment, Section, fmt_int, fmt_pct, heading, headline as banner, join,
                                   key_figures, paragraph, table)
from trainperf.report.page import require


def measured(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that have a throughput, ordered by experiment and devices."""
    unit = unit_of(runs)
    have = require(runs, unit.rate, f"a throughput in {unit.label}")
    return ordered(have, ["gpus", "micro_batch_size", "run_id"])


def headline(runs: pd.DataFrame) -> Fragment:
    """The peak throughput, where it was reached, and what one device keeps of its baseline rate."""
    unit = unit_of(runs)
    best = rank(runs, unit.rate).best
    where = labels(runs)[runs.index.get_loc(best.name)]
    parts = [banner("Peak throughput {rate} " + unit.label + " with {where}: {per_device} " + unit.label
                    + " per device.", rate=fmt_int(best[unit.rate]), where=where,
                    per_device=fmt_int(best[unit.per_device]))]
    figures = [(fmt_int(best[unit.rate]), f"{unit.label}, all devices (peak)"),
               (fmt_int(best[unit.per_device]), f"{unit.label} per device at the peak")]
    if pd.notna(best.get("scaling_efficiency")) and best["gpus"] > runs.loc[
            runs["experiment"] == best["experiment"], "gpus"].min():
        figures.append((fmt_pct(best["scaling_efficiency"], 0),
                        "per-device rate kept vs. the baseline run (scaling efficiency)"))
    if pd.notna(best.get("elapsed_s")):
        figures.append((f"{best['elapsed_s']:,.1f} s", "elapsed at the peak configuration"))
    return join([*parts, key_figures(figures)])


def summary_table(runs: pd.DataFrame) -> Section:
    """Per experiment, one row per configuration: work, elapsed time,
    throughput total and per device."""
    unit = unit_of(runs)
    view = runs.assign(configuration=labels(runs))
    best = rank(view, unit.rate).best.name
    out = []
    names = experiments(view)
    for name in names:
        group = experiment_runs(view, name)
        columns = [Col("configuration", "Configuration", wrap=True), Col("gpus", "Devices", "int")]
        if group["tokens"].notna().any():
            columns.append(Col("tokens", "Total tokens", "int"))
        if unit.name == "samples" and group["samples"].notna().any():
            columns.append(Col("samples", "Total samples", "int"))
        if group["elapsed_s"].notna().any():
            columns.append(Col("elapsed_s", "Elapsed", "s"))
        columns += [Col(unit.rate, f"Throughput ({unit.label}, all devices)", "int"),
                    Col(unit.per_device, f"Per device ({unit.label})", "int")]
        if group["step_time_s"].notna().any():
            columns.append(Col("step_time_s", "Time per step (s)", "num4"))
        if group["scaling_efficiency"].notna().any() and group["gpus"].nunique() > 1:
            columns.append(Col("scaling_efficiency", "Per-device rate vs. baseline", "pct",
                               help="scaling efficiency: multiplier / (devices / baseline devices)"))
        out.append(table(group, columns, caption=name if len(names) > 1 else "",
                         highlight=[i == best for i in group.index]))
    out.append(paragraph("Elapsed time is the slowest rank's. Highlighted: the highest throughput of the report. "
                         "The per-device rate against the baseline is shown for experiments run at several "
                         "device counts only."))
    return Section(out)


def charts(runs: pd.DataFrame) -> Section:
    """Per experiment: bars of the total throughput with the per-device rate
    as a line, then the per-device rate against devices with its baseline level."""
    unit = unit_of(runs)
    out: list = []
    names = experiments(runs)
    for name in names:
        group = experiment_runs(runs, name)
        if len(names) > 1:
            out.append(heading(f"Experiment {name}"))
        out.append(plots.bars_with_line(
            labels(group, compact=True), group[unit.rate].tolist(), group[unit.per_device].tolist(),
            bar_label=f"total {unit.label}", line_label=f"{unit.label} per device",
            title=f"Total vs per-device throughput — {name}", bar_unit=f"{unit.label}, all devices",
            line_unit=f"{unit.label} per device"))
        if group["gpus"].nunique() > 1:
            base = group.loc[group["gpus"].idxmin()]
            out.append(plots.lines(
                {f"{unit.label} per device": (group["gpus"].tolist(), group[unit.per_device].tolist())},
                title=f"Per-device throughput as devices are added — {name}", xlabel="devices",
                ylabel=f"{unit.label} per device", log_x=True,
                ideal=(group["gpus"].tolist(), [base[unit.per_device]] * len(group)),
                ideal_label=f"baseline per-device rate ({int(base['gpus'])} device{'s' if base['gpus'] > 1 else ''})"))
    return Section(out)
