"""The scaling page, computed once: :func:`analyse` gives a :class:`ScalingPage` holding every frame and
sentence notebooks/scaling.ipynb shows, from the runs of :func:`trainperf.report.scaling.studies.studies` and
their per-rank steps."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.report.configs import evaluation_notes, evaluation_rates
from trainperf.report.html import Html, fmt_int, fmt_num, fmt_pct, fmt_times, headline as banner
from trainperf.report.noise import job_frames
from trainperf.report.phases import without_phases
from trainperf.report.scaling import cost, multipliers, projection, ranks, serial, studies, time_spent
from trainperf.report.scaling.projection import BAND_LEVEL, LAWS, MAX_BAND, Projection
from trainperf.report.scaling.studies import KIND_LABELS


@dataclass(frozen=True)
class ScalingPage:
    """Every frame and sentence of the scaling page, in the page's order; each attribute is named after the
    function of :mod:`trainperf.report.scaling` that makes it (see docs/reports.md)."""

    runs: pd.DataFrame
    """The runs of the studies (:func:`~trainperf.report.scaling.studies.studies`)."""
    steps: Summaries | None
    """Their per-rank steps (None: none given)."""
    headline: Html
    confounded: list[str]
    laws: list[str]
    table: pd.DataFrame
    """One row per configuration (:func:`~trainperf.report.scaling.multipliers.table`)."""
    efficiency_notes: list[str]
    evaluation_notes: list[str]
    evaluation_rates: pd.DataFrame
    phases: pd.DataFrame
    without_phases: list[str]
    overhead: pd.DataFrame
    single_device_comm: list[str]
    ranks: pd.DataFrame
    rank_summary: pd.DataFrame
    straggler: str
    rank_note: str
    rank_phases: pd.DataFrame
    slow_ranks: pd.DataFrame
    rank_time_notes: list[str]
    waits: pd.DataFrame
    """Per rank, its communication wait and busy time (:func:`~trainperf.report.scaling.ranks.stragglers`)."""
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
    """The scaling page of ``runs`` (:func:`~trainperf.report.scaling.studies.studies`) and their per-rank
    ``steps``, projected to ``project_to_gpus`` devices (default: 8 × the largest measured)."""
    study = multipliers.per_experiment(runs, job_frames(steps))
    table = multipliers.table(study)
    found = projection.projections(runs, project_to_gpus)
    per_rank = ranks.ranks(runs, steps)
    summary = ranks.rank_summary(runs, per_rank)
    rank_phases = ranks.rank_phases(per_rank, steps)
    slow = ranks.slow_ranks(rank_phases)
    waits, straggler_notes = ranks.stragglers(runs, steps)
    named, named_note = ranks.named_ranks(waits)
    return ScalingPage(
        runs=runs, steps=steps, headline=headline(table, found), confounded=studies.confounded(runs),
        laws=studies.laws(runs), table=table, efficiency_notes=multipliers.efficiency_notes(study),
        evaluation_notes=evaluation_notes(runs, steps), evaluation_rates=evaluation_rates(runs, steps),
        phases=time_spent.phases(runs), without_phases=without_phases(runs), overhead=time_spent.overhead(runs),
        single_device_comm=time_spent.single_device_comm(runs), ranks=per_rank, rank_summary=summary,
        straggler=ranks.straggler(summary), rank_note=ranks.rank_note(steps, per_rank, summary),
        rank_phases=rank_phases, slow_ranks=slow, rank_time_notes=ranks.rank_time_notes(slow), waits=waits,
        straggler_notes=straggler_notes, named_ranks=named, named_note=named_note,
        serial_notes=serial.serial_notes(table), projections=found, curves=projection.curves(found),
        fit_notes=projection.fit_notes(found), projected=projection.projected(found), cost=cost.cost(runs),
        cost_notes=cost.cost_notes(runs))


def headline(table: pd.DataFrame, found: list[Projection]) -> Html:
    """The largest measured scale-up among experiments that change only the
    device count (from rows a conclusion may be drawn from: ``concluded`` of
    :func:`~trainperf.report.scaling.multipliers.table` ``table``, none projected,
    oversubscribed or incomplete), its efficiency (with its 95 % interval where
    the steps or repeats give one), and the fitted projection (of ``found``) vs.
    the straight line; weak scaling in its own words
    (the devices process more, they do not finish sooner); without such an
    experiment, says so and projects nothing."""
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
        low, high = proj.best.band(proj.target, BAND_LEVEL)
        at = fmt_int(proj.target * proj.base_gpus)
        if not high[0] <= MAX_BAND * low[0]:  # a band over 4x wide (or none) projects nothing
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

