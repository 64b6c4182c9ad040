"""The throughput report: per configuration, the work done, the elapsed time
and the throughput of the whole job and of one device — as a frame for the
notebook's table and charts, and its headline; where the runs recorded it,
where each run's wall clock went (its goodput, :func:`goodput`) and its step
time along the run with the warm-up found (:func:`step_timeline`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.compare import plotted_steps
from trainperf.goodput import PARTS
from trainperf.report.configs import doubtful, labels, ordered, rank, several_device_counts, unit_of
from trainperf.report.html import Html, fmt_int, fmt_pct, headline as banner
from trainperf.report.page import require
from trainperf.schema import OUTSIDE_PREFIX

PART_LABELS = {"productive_s": "productive steps", "warmup_excess_s": "warm-up beyond steady steps",
               "startup_s": "start-up", "unaccounted_s": "in no step", "after_steps_s": "after the last step"}
"""How each part of the wall clock (``trainperf.goodput.PARTS``) is named on the chart."""


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


def goodput(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs that recorded their wall clock (profiler run folders): a table
    (``run_id``, ``wall_s``, ``goodput`` and the seconds of each part, those
    outside the steps by name, ``outside_<name>_s``) and the same parts as a
    tidy frame for a stacked bar (``run_id``, ``part``, ``seconds``,
    ``fraction`` of the wall clock), productive steps first, then the warm-up
    beyond steady steps, start-up, the phases outside the steps, time in no
    step and after the last step. Both empty when no run has a wall clock."""
    have = runs[runs["wall_s"].notna()] if "wall_s" in runs else runs.iloc[:0]
    outside = sorted(c for c in have.columns if c.startswith(OUTSIDE_PREFIX) and have[c].notna().any())
    columns = [*PARTS[:3], *outside, *PARTS[3:]]
    table = have[["run_id", "wall_s", "goodput", *columns]].reset_index(drop=True)
    names = {**PART_LABELS, **{c: c[len(OUTSIDE_PREFIX):-len("_s")] for c in outside}}
    parts = table.melt(id_vars=["run_id", "wall_s"], value_vars=columns, var_name="part", value_name="seconds")
    parts = parts.assign(part=parts["part"].map(names), fraction=parts["seconds"] / parts["wall_s"]).fillna(
        {"seconds": 0.0, "fraction": 0.0})
    return table, parts.drop(columns="wall_s")


@dataclass
class Timeline:
    """Each run's job step time along the run (``steps``: ``run_id``, ``step``,
    ``step_time_s``, ``warmup``; at most ``trainperf.compare.PLOTTED_STEPS``
    evenly spaced steps a run), its warm-up (``warmup``: ``run_id``,
    ``warmup_rule``, ``warmup_steps``, ``warmup_from`` and ``warmup_to``, the
    steps it spans; NaN where it has none) and a sentence naming the runs drawn
    in part ("" when none is)."""

    steps: pd.DataFrame
    warmup: pd.DataFrame
    note: str


def step_timeline(summaries: Summaries | None) -> Timeline:
    """The :class:`Timeline` of the runs of ``summaries`` (``page.data_steps``;
    None: no run folder or steps table): the job's time per step (each step
    at its slowest rank; a record of several steps, its mean per step)."""
    if summaries is None or summaries.step_times.empty:
        return Timeline(pd.DataFrame(columns=["run_id", "step", "step_time_s", "warmup"]),
                        pd.DataFrame(columns=["run_id", "warmup_rule", "warmup_steps", "warmup_from", "warmup_to"]), "")
    times = summaries.step_times
    steps = pd.DataFrame({"run_id": times["run_id"].astype(str), "step": times["step"],
                          "step_time_s": times["step_s_max"] / times["n_steps"], "warmup": times["warmup"] > 0})
    warm = steps[steps["warmup"]].groupby("run_id")["step"].agg(["min", "max"])
    counted = (times["n_steps"] * (times["warmup"] > 0)).groupby(steps["run_id"]).sum()
    rules = summaries.warmup.assign(run_id=summaries.warmup["run_id"].astype(str)).set_index("run_id")["warmup_rule"]
    warmup = pd.DataFrame({"run_id": rules.index, "warmup_rule": rules.to_numpy(),
                           "warmup_steps": counted.reindex(rules.index).to_numpy(),
                           "warmup_from": warm["min"].reindex(rules.index).to_numpy(np.float64),
                           "warmup_to": warm["max"].reindex(rules.index).to_numpy(np.float64)})
    shown, note = plotted_steps(steps)
    return Timeline(shown.reset_index(drop=True), warmup, note)
