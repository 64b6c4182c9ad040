"""The throughput report: per configuration, the throughput of the job and per device, step times, memory, the
cost of crossing a node, goodput and the step time along each run (docs/reports.md)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.compare import plotted_steps
from trainperf.estimates import job_frames, run_intervals
from trainperf.goodput import PARTS
from trainperf.report.run_labels import (Unit, configuration_of, configuration_table, evaluation_notes,
                                         evaluation_rates, labels, ordered, several_device_counts, study_of,
                                         unit_of)
from trainperf.report.html import Html, count, fmt_int, fmt_pct, fmt_seconds, headline as banner
from trainperf.report.page import require
from trainperf.report.phases import PHASE_LABELS
from trainperf.report.scaling.analysis import outside_steps
from trainperf.report.time_to_train import LOOP, VALIDATION, total_parts, total_s
from trainperf.report.what_to_change import (Found, Measured, clean, data_loading, exposed_communication,
                                             oversubscription, row, rule, section_of, waits_for_outside_work)
from trainperf.schema import OUTSIDE_PREFIX

PART_LABELS = {"productive_s": "productive steps", "warmup_excess_s": "warm-up beyond steady steps",
               "startup_s": "start-up", "wait_outside_s": PHASE_LABELS["wait_outside_s"],
               "unaccounted_s": "in no step", "after_steps_s": "after the last step"}
"""How each part of the wall clock (``trainperf.goodput.PARTS``) is named on the chart."""

MEANS = ("tokens", "samples", "elapsed_s", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s",
         "samples_per_s_per_gpu", "tflops_per_gpu", "mfu", "peak_memory_gb", "step_time_s", "scaling_efficiency")
"""Figures of a configuration shown as the mean over its repeats."""
RATES = ("configuration", "gpus", "runs", "{rate}", "interval", "{per_device}", "tflops_per_gpu", "mfu",
         "scaling_efficiency", "remark")
"""The columns of an experiment's throughput table (``{rate}``: the unit's rate column)."""
TIMES = ("configuration", "gpus", "{work}", "elapsed_s", "step_time_p50_s", "step_time_p95_s", "step_time_s",
         "step_time_basis", "peak_memory_gb")
"""The columns of an experiment's step-time and memory table (``{work}``: tokens or samples)."""
NO_STEPS = "elapsed / steps only"
"""``step_time_basis`` of a configuration whose runs have no per-step times."""


def measured(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that have a throughput, ordered by experiment and devices."""
    unit = unit_of(runs)
    have = require(runs, unit.rate, f"a throughput in {unit.label}",
                   "give tokens (or samples) and elapsed_s, or a rate such as tokens_per_s")
    return ordered(have, ["gpus", "micro_batch_size", "run_id"])


def table(runs: pd.DataFrame, steps: Summaries | None = None, found: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per configuration with ``runs`` (its repeats), :data:`MEANS` (their mean), its throughput's 95 %
    ``interval``, ``experiment_scaling`` (``sweep (weak scaling)``), scaling efficiency (NaN at one device count),
    :func:`step_times`, ``doubt``, ``remark``, ``best`` (the highest throughput without a doubt, else of all) and
    ``chart_label``."""
    frames = job_frames(steps)
    found = run_intervals(runs.reset_index(drop=True), frames=frames) if found is None else found
    configs = configuration_table(runs, MEANS, found)
    clean = configs["doubt"] == ""
    best = (configs[clean] if clean.any() else configs)[unit_of(runs).rate].idxmax()
    kind = configs["scaling_type"] if "scaling_type" in configs else pd.Series(pd.NA, index=configs.index)
    view = configs.assign(configuration=labels(configs), chart_label=labels(configs, compact=True),
                          experiment_scaling=[f"{e} ({k} scaling)" if pd.notna(k) else str(e)
                                              for e, k in zip(configs["experiment"], kind)],
                          scaling_efficiency=configs["scaling_efficiency"].where(several_device_counts(configs)),
                          best=configs.index == best, **step_times(found, frames, steps))
    return view.assign(remark=remarks(view))


def shown(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The ``columns`` of a :func:`table` frame (:data:`RATES`, :data:`TIMES`) that some row has a value in."""
    unit = unit_of(frame)
    names = [c.format(rate=unit.rate, per_device=unit.per_device, work=unit.name) for c in columns]
    return frame[[c for c in names if c in frame and frame[c].replace(["", "–"], np.nan).notna().any()]]


def step_times(found: pd.DataFrame, frames: dict[str, pd.DataFrame], steps: Summaries | None) -> dict[str, list]:
    """Per configuration of the runs' intervals ``found``: ``step_time_p50_s`` and ``step_time_p95_s``, the
    median and 95th percentile of the slowest rank's time per step (s), and ``step_time_basis``: of how many."""
    rows = []
    for _, ids in found["run_id"].groupby(configuration_of(found).to_numpy(), sort=False):
        times = [per_step(frames[r], steps, r) for r in ids if r in frames]
        pooled = np.concatenate(times) if times else np.array([])
        basis = NO_STEPS if not times else count(len(pooled), "step") + (
            f" of {len(times)} of its {len(ids)} runs" if len(times) < len(ids) else "")
        rows.append([*(np.percentile(pooled, [50, 95]) if len(pooled) else (np.nan, np.nan)), basis])
    return pd.DataFrame(rows, columns=["step_time_p50_s", "step_time_p95_s", "step_time_basis"]).to_dict("list")


def per_step(frame: pd.DataFrame, steps: Summaries, run_id: str) -> np.ndarray:
    """The time of each measured step of one run's job frame (s): an interval of ``n_steps`` steps (a log that
    prints every n steps) gives n steps of its mean time."""
    mine = steps.per_step[steps.per_step["run_id"].astype(str) == run_id]
    n = frame["step"].map(mine.set_index("step")["n_steps"]).fillna(1.0).clip(lower=1.0).to_numpy(float)
    return np.repeat(frame["step_time_s"].to_numpy(float) / n, n.round().astype(int))


def node_boundaries(frame: pd.DataFrame) -> pd.DataFrame:
    """Per scaling study of a :func:`table` frame with ``nodes`` known (configurations without a doubt): the
    first step to more nodes (``from_gpus``, ``from_nodes``, ``to_gpus``, ``to_nodes``, ``per_node``), the
    ``efficiency_before``/``_after``, its ``drop`` (a fraction; negative: a gain) and the study's largest drop
    (``largest_from``, ``largest_to``, ``largest_drop``; ``most``: at the crossing)."""
    columns = ["study", "from_gpus", "from_nodes", "to_gpus", "to_nodes", "per_node", "efficiency_before",
               "efficiency_after", "drop", "largest_from", "largest_to", "largest_drop", "most"]
    usable = frame[(frame["doubt"] == "") & frame["scaling_efficiency"].notna()]
    rows = []
    for name, group in usable.groupby(study_of(usable), sort=False):
        counts = group.groupby("gpus").agg(nodes=("nodes", "max"), efficiency=("scaling_efficiency", "mean"))
        if len(counts) < 2 or counts["nodes"].isna().any():
            continue
        gpus, (nodes, efficiency) = counts.index.to_numpy(float), counts[["nodes", "efficiency"]].to_numpy(float).T
        drops = efficiency[:-1] - efficiency[1:]  # step i: gpus[i] → gpus[i + 1]
        across = np.flatnonzero(nodes[1:] > nodes[:-1])
        if not len(across):
            continue
        i, worst = int(across[0]), int(np.argmax(drops))
        rows.append({"study": name, "from_gpus": gpus[i], "from_nodes": nodes[i], "to_gpus": gpus[i + 1],
                     "to_nodes": nodes[i + 1], "per_node": gpus[i + 1] / nodes[i + 1],
                     "efficiency_before": efficiency[i], "efficiency_after": efficiency[i + 1], "drop": drops[i],
                     "largest_from": gpus[worst], "largest_to": gpus[worst + 1], "largest_drop": drops[worst],
                     "most": worst == i})
    return pd.DataFrame(rows, columns=columns)


def _crossing(b: Any) -> str:
    """A step of :func:`node_boundaries` in words: ``4 devices on 1 node → 8 on 2 nodes``."""
    return (f"{fmt_int(b.from_gpus)} devices on {count(b.from_nodes, 'node')} → {fmt_int(b.to_gpus)} on "
            f"{count(b.to_nodes, 'node')}")


def _points(drop: float) -> str:
    """A change of efficiency in percentage points: ``−14.4 points`` (a drop), ``+2.0 points`` (a gain)."""
    return f"{'−' if drop > 0 else '+'}{abs(drop) * 100:.1f} points"


def remarks(frame: pd.DataFrame) -> list[str]:
    """Per row of a :func:`table` frame: its doubt, or what its step across a node boundary costs."""
    out = [f"{doubt}: not headlined" if doubt else "" for doubt in frame["doubt"]]
    study = study_of(frame)
    for b in node_boundaries(frame).itertuples():
        rows = np.flatnonzero((study == b.study).to_numpy() & (frame["gpus"] == b.to_gpus).to_numpy()
                              & (frame["doubt"] == "").to_numpy())
        for i in rows:
            out[i] = (f"first step across nodes: {_points(b.drop)} of efficiency"
                      + (" (the largest drop)" if b.most and b.drop > 0 else ""))
    return out


def node_notes(frame: pd.DataFrame) -> list[str]:
    """Per study of :func:`node_boundaries`: what its first step across nodes costs, and whether most is lost there."""
    out = []
    for b in node_boundaries(frame).itertuples():
        step = f"{_crossing(b)} ({fmt_int(b.per_node)} per node)"
        change = (f"{fmt_pct(b.efficiency_before)} → {fmt_pct(b.efficiency_after)} efficiency, "
                  f"{_points(b.drop)}")
        if b.most and b.drop > 0:
            out.append(f"{b.study}: efficiency drops most at the first step across a node boundary, {step}: "
                       f"{change}. Communication between nodes is the first place to look.")
        else:
            out.append(f"{b.study}: the first step across a node boundary, {step}, changes efficiency "
                       f"{change}; it drops most from {fmt_int(b.largest_from)} to {fmt_int(b.largest_to)} "
                       f"devices ({_points(b.largest_drop)}).")
    return out


def headline(frame: pd.DataFrame, unit: Unit) -> Html:
    """The peak throughput without a doubt of a :func:`table` ``frame``, where it was reached, and per device."""
    best = frame[frame["best"]].iloc[0]
    repeats = f" (mean of {best['runs']} runs)" if best["runs"] > 1 else ""
    text = (f"Peak throughput {fmt_int(best[unit.rate])} {unit.label} with {best['configuration']}{repeats}: "
            f"{fmt_int(best[unit.per_device])} {unit.label} per device.")
    if best["doubt"]:
        text = (f"No configuration measures throughput without doubt: every run is projected, oversubscribed or "
                f"incomplete. The highest figure, {fmt_int(best[unit.rate])} {unit.label} with "
                f"{best['configuration']} ({best['doubt']}), is not a measurement of the hardware.")
    elif (frame["doubt"] != "").any():
        text += (f" Not counted: {count((frame['doubt'] != '').sum(), 'configuration')} projected, oversubscribed "
                 "or incomplete.")
    figures = [(fmt_int(best[unit.rate]), f"{unit.label}, all devices (peak)"),
               (fmt_int(best[unit.per_device]), f"{unit.label} per device at the peak")]
    if pd.notna(best["scaling_efficiency"]) and best["gpus"] > frame.loc[
            frame["experiment"] == best["experiment"], "gpus"].min():
        kind = f", {best['scaling_type']} scaling" if pd.notna(best.get("scaling_type")) else ""
        figures.append((fmt_pct(best["scaling_efficiency"], 0),
                        f"per-device rate kept against the baseline run (scaling efficiency{kind})"))
    if pd.notna(best.get("elapsed_s")):
        figures.append((f"{best['elapsed_s']:,.1f} s", "elapsed at the peak configuration"))
    return banner(text, figures)


def goodput(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs that recorded their wall clock: a table (``run_id``, ``wall_s``, ``goodput`` and the seconds of
    each part) and the same parts long for a stacked bar (``run_id``, ``part``, ``seconds``, ``fraction``)."""
    have = runs[runs["wall_s"].notna()] if "wall_s" in runs else runs.iloc[:0]
    outside = sorted(c for c in have.columns if c.startswith(OUTSIDE_PREFIX) and have[c].notna().any())
    columns = [c for c in [*PARTS[:3], *outside, *PARTS[3:]] if c != "wait_outside_s" or have[c].notna().any()]
    table = have[["run_id", "wall_s", "goodput", *columns]].reset_index(drop=True)
    names = {**PART_LABELS, **{c: c[len(OUTSIDE_PREFIX):-len("_s")] for c in outside}}
    parts = table.melt(id_vars=["run_id", "wall_s"], value_vars=columns, var_name="part", value_name="seconds")
    parts = parts.assign(part=parts["part"].map(names), fraction=parts["seconds"] / parts["wall_s"]).fillna(
        {"seconds": 0.0, "fraction": 0.0})
    return table, parts.drop(columns="wall_s")


@dataclass
class Timeline:
    """Each run's step times (``steps``: ``run_id``, ``step``, ``step_time_s``, ``warmup``), its warm-up
    (``warmup``: ``run_id``, ``warmup_rule``, ``warmup_steps``, ``warmup_from``/``_to``) and a ``note`` naming the
    runs drawn in part."""

    steps: pd.DataFrame
    warmup: pd.DataFrame
    note: str


def step_timeline(summaries: Summaries | None) -> Timeline:
    """The :class:`Timeline` of ``summaries``: each step at its slowest rank (a record of several: its mean)."""
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


@dataclass(frozen=True)
class ThroughputPage(Measured):
    """Every frame and sentence of the throughput page, in its order; ``intervals``: per run, its run intervals."""

    intervals: pd.DataFrame
    headline: Html
    table: pd.DataFrame
    node_notes: list[str]
    evaluation_notes: list[str]
    evaluation_rates: pd.DataFrame
    goodput: pd.DataFrame
    goodput_parts: pd.DataFrame
    step_timeline: Timeline


def analyse(runs: pd.DataFrame, steps: Summaries | None = None) -> ThroughputPage:
    """The throughput page of ``runs`` (:func:`measured`) and the ``steps`` of their run folders."""
    found = run_intervals(runs.reset_index(drop=True), steps).set_axis(runs.index)
    frame = table(runs, steps, found)
    wall, parts = goodput(runs)
    return ThroughputPage(runs=runs, steps=steps, intervals=found, headline=headline(frame, unit_of(runs)), table=frame,
                          node_notes=node_notes(frame), evaluation_notes=evaluation_notes(runs, steps),
                          evaluation_rates=evaluation_rates(runs, steps), goodput=wall, goodput_parts=parts,
                          step_timeline=step_timeline(steps))


@rule("the first step across a node boundary")
def node_boundary(page: ThroughputPage) -> Found:
    """The first step across nodes where efficiency drops: the gain per device, ``efficiency before / after − 1``."""
    if "nodes" not in page.runs or page.runs["nodes"].isna().all():
        return Found(lacking="no run records its nodes")
    frame, found, out = page.table, node_boundaries(page.table), Found()
    if found.empty:
        return Found(lacking="no study runs on several device counts with their nodes known and crosses a node")
    for b in found[found["drop"] > 0].itertuples():
        sides = frame[(study_of(frame) == b.study).to_numpy(bool) & frame["gpus"].isin([b.from_gpus, b.to_gpus])]
        out.rows.append(row(
            "Look at communication between nodes first: per-device throughput drops most where the job "
            "leaves one node" if b.most else "Look at communication between nodes: per-device throughput drops "
                                             "where the job leaves one node",
            f"{_crossing(b)}: scaling efficiency {fmt_pct(b.efficiency_before)} → "
            f"{fmt_pct(b.efficiency_after)}: per-device throughput drops {fmt_pct(b.drop / b.efficiency_before)}",
            b.efficiency_before / b.efficiency_after - 1, "throughput per device", f"{b.study}: "
            f"{fmt_int(b.to_gpus)} devices and more", runs=int(sides.groupby("gpus")["runs"].sum().min())))
    return out


PART_CHANGES = {"startup_s": "Shorten start-up (before the first step)",
                "warmup_excess_s": "Shorten the warm-up (compilation, the first slow steps)",
                "unaccounted_s": "Find the steps whose code raised (time in no step)",
                "after_steps_s": "Shorten what runs after the last step",
                VALIDATION: "Evaluate less often, or on fewer batches"}
"""How each part of a run's total time outside its training steps is changed (default: shorten it)."""


def _wall_clock_parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run that recorded its total time, its parts outside the training loop (``run_id``, ``experiment``,
    ``part``, ``label``, ``seconds``, ``total_s``): the profiler's goodput parts, else those of
    :func:`~trainperf.report.time_to_train.total_parts`."""
    profiled = runs["wall_s"].notna() if "wall_s" in runs else pd.Series(False, index=runs.index)
    parts = []
    wall = runs[profiled.to_numpy(bool)]
    if len(wall):
        # the wait for another rank lies in the steps (the training loop): waits_for_outside_work is its rule
        names = [c for c in (*PARTS[1:], *(c for c in wall if c.startswith(OUTSIDE_PREFIX)))
                 if c in wall and c != "wait_outside_s"]
        labels = {**PART_LABELS, **{c: c[len(OUTSIDE_PREFIX):-2] for c in names if c.startswith(OUTSIDE_PREFIX)}}
        long = wall.melt(id_vars=["run_id", "experiment", "wall_s"], value_vars=names, var_name="part",
                         value_name="seconds")
        parts.append(long.assign(label=long["part"].map(labels), total_s=long["wall_s"]).drop(columns="wall_s"))
    rest = runs[~profiled.to_numpy(bool)]
    timed = total_parts(rest).drop(columns=LOOP) if len(rest) else pd.DataFrame(index=rest.index)
    if len(timed.columns):
        long = pd.concat([rest[["run_id", "experiment"]], timed, total_s(rest).rename("total_s")], axis=1).melt(
            id_vars=["run_id", "experiment", "total_s"], var_name="part", value_name="seconds")
        parts.append(long.assign(label=long["part"]))
    columns = ["run_id", "experiment", "part", "label", "seconds", "total_s"]
    return pd.concat(parts, ignore_index=True)[columns].dropna(subset=["seconds"]) if parts else pd.DataFrame(
        columns=columns)


@rule("time outside the training loop (goodput)")
def outside_loop(page: Measured) -> Found:
    """Per experiment and part of the runs' total time outside the training loop: its mean seconds as a share
    of their mean total — the goodput it costs."""
    parts = _wall_clock_parts(clean(page.runs))
    if parts.empty:
        return Found(lacking="no run records its total time with start-up (the profiler's wall clock, or a "
                             "script's total), so no goodput can be told")
    out = Found()
    for (name, part), rows in parts.groupby(["experiment", "part"], sort=False):
        seconds, total = float(rows["seconds"].mean()), float(rows["total_s"].mean())
        label = rows["label"].iloc[0]
        change = PART_CHANGES.get(part) or (f"Do less {label} outside the steps, or do it asynchronously"
                                            if str(part).startswith(OUTSIDE_PREFIX) else f"Shorten the {label}")
        out.rows.append(row(change, f"{label}: {fmt_seconds(seconds)} of {fmt_seconds(total)} in all"
                                    + (f" (the mean of {len(rows)} runs)" if len(rows) > 1 else ""),
                            seconds / total, "wall clock (goodput)", f"{name}: {count(len(rows), 'run')}",
                            runs=len(rows), seconds=seconds, per="run"))
    return out


RULES = (outside_steps, oversubscription, node_boundary, waits_for_outside_work, exposed_communication, data_loading,
         outside_loop)
"""The throughput page's rules (each reads the :class:`ThroughputPage`)."""


what_to_change = partial(section_of, RULES)
