"""The scaling page, computed once: :func:`analyse` gives a :class:`ScalingPage` holding every frame and
sentence notebooks/scaling.ipynb shows; its headline, its cost, and the rules of its "What to change"."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.estimates import job_frames, run_intervals
from trainperf.ranks import IMBALANCE_STRAGGLER
from trainperf.report.html import Html, fmt_int, fmt_num, fmt_pct, fmt_times, fmt_usd, headline as banner
from trainperf.report.phases import per_experiment, without_phases
from trainperf.report.run_labels import (by_experiment, doubtful, evaluation_notes, evaluation_rates, labels,
                                         unit_of, with_marks)
from trainperf.report.scaling import multipliers, projection, ranks
from trainperf.report.scaling.projection import LAWS, Projection, within_reach
from trainperf.report.scaling.multipliers import KIND_LABELS
from trainperf.report.what_to_change import (Found, Measured, clean, data_loading, exposed_communication,
                                             oversubscription, row, rule, section_of, waits_for_outside_work)


@dataclass(frozen=True)
class ScalingPage(Measured):
    """Every frame and sentence of the scaling page, in its order (the function that makes each: docs/reports.md,
    "The scaling page, figure by figure"). ``intervals``: per run, the :func:`~trainperf.estimates.run_intervals`
    of its experiment, which its table and "What to change" share."""

    intervals: pd.DataFrame
    headline: Html
    confounded: list[str]
    laws: list[str]
    table: pd.DataFrame
    efficiency_notes: list[str]
    evaluation_notes: list[str]
    evaluation_rates: pd.DataFrame
    phases: pd.DataFrame
    without_phases: list[str]
    overhead: pd.DataFrame
    single_device_comm: list[str]
    ranks: pd.DataFrame
    rank_spread: pd.DataFrame
    straggler: str
    rank_note: str
    rank_phases: pd.DataFrame
    rank_time_notes: list[str]
    waits: pd.DataFrame
    straggler_notes: list[str]
    named_ranks: pd.DataFrame
    named_note: str
    serial_notes: list[str]
    projections: list[Projection]
    curves: pd.DataFrame
    fit_notes: list[str]
    projected: pd.DataFrame
    cost: pd.DataFrame
    cost_notes: list[str]


def analyse(runs: pd.DataFrame, steps: Summaries | None = None, project_to_gpus: float | None = None
            ) -> ScalingPage:
    """The scaling page of ``runs`` (:func:`~trainperf.report.scaling.multipliers.studies`) and their per-rank
    ``steps``, projected to ``project_to_gpus`` devices (default: 8 × the largest measured)."""
    frames = job_frames(steps)
    intervals = pd.concat([run_intervals(group.reset_index(drop=True), frames=frames).set_axis(group.index)
                           for _, group in by_experiment(runs)])
    study = {name: multipliers.experiment_rows(group, intervals.loc[group.index])
             for name, group in by_experiment(runs)}
    table = multipliers.table(study)
    found = projection.projections(runs, project_to_gpus)
    curves = projection.curves(found)
    once = runs.drop_duplicates("run_id")  # a run in two studies: its ranks and evaluation said once
    per_rank = ranks.ranks(once, steps)
    summary = ranks.rank_spread(once, per_rank)
    rank_phases = ranks.rank_phases(once, steps)
    waits, straggler_notes = ranks.stragglers(once, steps)
    named, named_note = ranks.named_ranks(waits)
    return ScalingPage(
        runs=runs, steps=steps, intervals=intervals, headline=headline(table, found),
        confounded=multipliers.confounded(runs),
        laws=multipliers.laws(runs), table=table, efficiency_notes=multipliers.efficiency_notes(study),
        evaluation_notes=evaluation_notes(once, steps), evaluation_rates=evaluation_rates(once, steps),
        phases=per_experiment(runs, lambda group: labels(group, compact=True)), without_phases=without_phases(runs), overhead=ranks.overhead(runs),
        single_device_comm=ranks.single_device_comm(once), ranks=per_rank, rank_spread=summary,
        straggler=ranks.straggler(summary), rank_note=ranks.rank_note(steps, per_rank, summary),
        rank_phases=rank_phases, rank_time_notes=ranks.rank_time_notes(ranks.slow_ranks(rank_phases)), waits=waits,
        straggler_notes=straggler_notes, named_ranks=named, named_note=named_note,
        serial_notes=projection.serial_notes(table), projections=found, curves=curves,
        fit_notes=projection.fit_notes(found, curves), projected=projection.projected(found), cost=cost(runs),
        cost_notes=cost_notes(runs))


def headline(table: pd.DataFrame, found: list[Projection]) -> Html:
    """The largest measured scale-up of the ``concluded`` :func:`~trainperf.report.scaling.multipliers.table` rows
    among experiments that change only the device count, its efficiency (and 95 % interval), and the projection
    of ``found`` beside the straight line; without such an experiment, says so and projects nothing."""
    study = dict(iter(table.groupby("experiment", sort=False)))
    real = [name for name, rows in study.items() if rows["concluded"].any()]
    clean = [name for name in real if study[name]["only_devices_change"].iloc[0]]

    def shown(name: str) -> pd.DataFrame:  # the rows a headline may come from
        rows = study[name]
        return rows[rows["concluded"] | (rows["ideal"] == 1)] if name in real else rows

    def scale(name: str) -> tuple[float, float]:  # the largest measured scale, then the widest span
        gpus = shown(name)["gpus"]
        return gpus.max(), gpus.max() / gpus.min()

    widest = max(clean or real or list(study), key=scale)
    group = shown(widest)
    top, base = group.loc[group["gpus"].idxmax()], group.loc[group["gpus"].idxmin()]
    known = (f" (95 % interval {fmt_pct(top['efficiency_low'])}–{fmt_pct(top['efficiency_high'])})"
             if pd.notna(top["efficiency_low"]) else "")
    weak = top["scaling_kind"] == KIND_LABELS["weak"]
    if pd.notna(top["multiplier_low"]) and top["multiplier_low"] <= 1 <= top["multiplier_high"]:
        speed = (f"indistinguishable in {'throughput' if weak else 'speed'} on {fmt_int(top['gpus'])} devices and on "
                 f"{fmt_int(base['gpus'])} ({fmt_times(top['scaling_multiplier'], 2)}, 95 % interval "
                 f"{fmt_times(top['multiplier_low'], 2)}–{fmt_times(top['multiplier_high'], 2)})")
    elif weak:
        speed = (f"{fmt_int(top['gpus'])} devices process {fmt_times(top['scaling_multiplier'], 1)} as much per "
                 f"second as {fmt_int(base['gpus'])}, each doing the same work per step")
    else:
        speed = (f"{fmt_times(top['scaling_multiplier'], 1)} faster on {fmt_int(top['gpus'])} devices than on "
                 f"{fmt_int(base['gpus'])}")
    text = f"{widest}: {speed} — {fmt_pct(top['scaling_efficiency'], 0)} scaling efficiency{known}."
    if not real:
        text = ("No experiment measures scaling without doubt (see the warnings: projected, oversubscribed or "
                "incomplete runs). The widest, " + text[:-1] + ", supports no conclusion.")
    elif not clean:
        text = ("No experiment changes only the device count, so none is projected. The widest, " + text[:-1]
                + ", mixes scaling with other changes.")
    figures = [(fmt_times(top["scaling_multiplier"], 1), f"multiplier at {fmt_int(top['gpus'])} devices"),
               (fmt_pct(top["scaling_efficiency"], 0), "scaling efficiency there")]
    for proj in (p for p in found if p.experiment == widest):
        reach, low, high = within_reach(proj.best, np.array([proj.target]), float(proj.p.max()))
        at = fmt_int(proj.target * proj.base_gpus)
        if not reach[0]:
            figures.append(("–", f"the data cannot project to {at} devices ({LAWS[proj.best.law]} 95 % band "
                                 f"{fmt_num(low[0], 0)}–{fmt_num(high[0], 0)}×)"))
            continue
        peak = proj.best.peak
        peaks = f"; it peaks at about {fmt_int(peak * proj.base_gpus)} devices" if peak < proj.target else ""
        figures += [(fmt_times(proj.best.predict(proj.target).item(), 0),
                     f"{LAWS[proj.best.law]} projection at {at} devices (95 % band {fmt_num(low[0], 0)}–"
                     f"{fmt_num(high[0], 0)}×{peaks})"),
                    (fmt_times(proj.naive(proj.target).item(), 0), f"straight-line projection at {at} devices")]
    return banner(text, figures)


@rule("a rank's work outside the synchronised steps")
def outside_steps(page: Measured) -> Found:
    """Per experiment, a rank that takes longer than the others (:func:`~trainperf.report.scaling.ranks.slow_ranks`
    of the :func:`clean` runs): the job ends when it does, so its extra time is the gain, of the measured window."""
    if page.steps is None or page.steps.per_rank.empty:
        return Found(lacking="no per-rank steps are given, so no rank's own time can be told")
    runs, out = clean(page.runs), Found()
    for name, group in ranks.slow_ranks(ranks.rank_phases(runs, page.steps)).groupby("experiment", sort=False):
        alone = group["inside"].eq(False).fillna(False)
        waited = group["inside"].eq(True).fillna(False)
        if alone.any():
            rows = group[alone.to_numpy(bool)]
            change = ("Move the work one rank does alone outside the synchronised steps (evaluation, logging, "
                      "checkpointing) off it: spread it over the ranks or run it asynchronously")
        elif waited.any():
            rows = group[waited.to_numpy(bool)]
            change = "Balance the slowest rank's work: the other ranks wait for it inside the synchronised steps"
        else:
            rows = group
            change = "Find what the slowest rank does that the others do not (no communication times tell where)"
        share = rows["extra_s"] / rows["elapsed_s"]
        evidence = "; ".join(f"{r['run_id']}: {ranks.longer(r)}, {fmt_pct(r['extra_s'] / r['elapsed_s'])} of the run"
                             for r in rows.to_dict("records"))
        out.rows.append(row(change, evidence, float(share.mean()), "elapsed time (the slowest rank's)",
                            f"{name}: {', '.join(rows['run_id'])}", runs=len(rows),
                            seconds=float(rows["extra_s"].mean()), per="measured window"))
    if not out.rows:
        out.lacking = f"no run has a rank that takes {fmt_times(IMBALANCE_STRAGGLER, 1)} its fastest rank or more"
    return out


def _priced(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["price_per_gpu_hour"].notna()] if "price_per_gpu_hour" in runs else runs.iloc[0:0]


def cost(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with a price per device-hour: price (USD/h), ``elapsed_s``, ``gpu_hours``, ``cost_usd``, USD per
    million tokens (``usd_per_million_tokens``, else ``…_samples``: ``price_per_gpu_hour · gpus / 3600 s/h / rate ·
    10⁶``; left out where a run lacks both), ``cost_efficiency`` and, where a run has any, ``marks`` and
    ``known_error``."""
    priced = _priced(runs)
    out = priced.assign(configuration=labels(priced) if len(priced) else [])
    columns = ["run_id", "experiment", "configuration", "gpus", "price_per_gpu_hour", "elapsed_s", "gpu_hours",
               "cost_usd"]
    unit = unit_of(priced)
    if len(priced) and priced[unit.rate].notna().all():
        columns.append(f"usd_per_million_{unit.name}")
        out[columns[-1]] = priced["price_per_gpu_hour"] * priced["gpus"] / 3600 / priced[unit.rate] * 1e6
    return with_marks(out[[*columns, "cost_efficiency"]], priced).drop(columns="run_id").reset_index(drop=True)


def cost_notes(runs: pd.DataFrame) -> list[str]:
    """Per experiment with prices: how much faster its largest run is and how much dearer each unit of work
    (no conclusion where either run is doubtful)."""
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


RULES = (outside_steps, oversubscription, waits_for_outside_work, exposed_communication, data_loading)
"""The scaling page's rules (each reads the :class:`ScalingPage`)."""


what_to_change = partial(section_of, RULES)
