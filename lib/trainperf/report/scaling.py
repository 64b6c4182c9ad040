"""The scaling report: how much faster each experiment runs as devices are
added, where the time goes, how ranks differ, and what a fitted scaling law
projects beyond the measured scale — next to the straight line a naive
projection draws."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.report import plots
from trainperf.report.configs import experiment_runs, experiments, labels, ordered
from trainperf.report.html import (Col, Fragment, Section, callout, fmt_int, fmt_num, fmt_pct, fmt_sig,
                                   fmt_times, fmt_usd, bullet_list, heading, headline as banner, join,
                                   key_figures, paragraph, table)
from trainperf.report.page import InputError
from trainperf.report.phases import breakdown, has_phases
from trainperf.scaling import ScalingFit, fit
from trainperf.steps import aggregate_steps

LAWS = {"amdahl": "Amdahl", "usl": "USL"}
BAND_LEVEL = 0.95
MIN_FIT_POINTS = 3
"""Device counts an experiment needs before a law is fitted (a 2-parameter law through 2 points has no error)."""


def studies(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of experiments measured at two or more device counts, ordered;
    the others are added to ``attrs['skipped']``. Raises ``InputError`` when none is left."""
    counts = runs.groupby("experiment")["gpus"].nunique()
    keep = runs["experiment"].isin(counts[counts >= 2].index).fillna(False).to_numpy(bool)
    if not keep.any():
        raise InputError("no experiment has runs at two or more device counts: nothing to compare "
                         f"(experiments: {', '.join(map(str, counts.index))})")
    out = ordered(runs.loc[keep], ["gpus", "micro_batch_size", "run_id"])
    out.attrs = {**runs.attrs, "skipped": list(runs.attrs.get("skipped", []))}
    for name in counts[counts < 2].index:
        out.attrs["skipped"].append((f"experiment {name}", "measured at one device count only: no scaling"))
    return out


def relative_devices(group: pd.DataFrame) -> np.ndarray:
    """``p = N / N_baseline`` of each run of one experiment."""
    base = group.loc[group["run_id"] == group["baseline_run_id"], "gpus"]
    n0 = float(base.iloc[0]) if len(base) else float(group["gpus"].min())
    return group["gpus"].to_numpy(float) / n0


# --- fits and projections -------------------------------------------------------

@dataclass
class Projection:
    """One experiment's fits and their projection to ``target`` relative devices."""

    experiment: str
    p: np.ndarray
    multiplier: np.ndarray
    fits: dict[str, ScalingFit]
    target: float
    base_gpus: float

    def naive(self, p: np.ndarray | float) -> np.ndarray:
        """The straight-line projection from the largest measured point:
        ``S(p_max) · p / p_max`` (as in a report that multiplies one node's
        throughput by the number of nodes)."""
        last = int(np.argmax(self.p))
        return self.multiplier[last] * np.asarray(p, dtype=float) / self.p[last]


def project(name: str, p: np.ndarray, multiplier: np.ndarray, target: float, base_gpus: float) -> Projection:
    """Fit Amdahl and USL to one series (``p``: relative devices, the baseline's
    ``p = 1``; ``base_gpus``: its devices) and keep them for projection to ``target``."""
    fits = {law: fit(p, multiplier, law) for law in LAWS}
    return Projection(name, np.asarray(p, float), np.asarray(multiplier, float), fits, float(target), base_gpus)


def projections(runs: pd.DataFrame, project_to_gpus: float | None = None) -> list[Projection]:
    """Amdahl and USL fits for every experiment with at least
    :data:`MIN_FIT_POINTS` device counts, projected to ``project_to_gpus``
    devices (default: 8 × the largest measured)."""
    out = []
    for name in experiments(runs):
        group = experiment_runs(runs, name).dropna(subset=["scaling_multiplier"])
        p = relative_devices(group)
        if len(np.unique(p)) < MIN_FIT_POINTS:
            continue
        base_gpus = float(group["gpus"].iloc[0]) / float(p[0])
        target = (project_to_gpus / base_gpus) if project_to_gpus else 8 * float(p.max())
        if target <= p.max():
            raise InputError(f"project_to_gpus={project_to_gpus:g} is not beyond the largest measured "
                             f"scale of {name} ({group['gpus'].max():g} devices)")
        out.append(project(name, p, group["scaling_multiplier"].to_numpy(float), target, base_gpus))
    return out


def projection_targets(projection: Projection) -> list[float]:
    """Relative device counts to tabulate: doublings from the largest measured up to the target."""
    points, p = [], float(projection.p.max()) * 2
    while p < projection.target:
        points.append(p)
        p *= 2
    return points + [projection.target]


# --- report sections -------------------------------------------------------------

def headline(runs: pd.DataFrame, project_to_gpus: float | None = None) -> Fragment:
    """The largest measured scale-up, its efficiency, and the fitted projection vs. the naive line."""
    def scale_up(name: str) -> float:
        gpus = experiment_runs(runs, name)["gpus"]
        return gpus.max() / gpus.min()

    widest = max(experiments(runs), key=scale_up)
    group = experiment_runs(runs, widest)
    top = group.loc[group["gpus"].idxmax()]
    base = group.loc[group["gpus"].idxmin()]
    parts = [banner("{experiment}: {multiplier} faster on {gpus} devices than on {base} "
                    "— {efficiency} scaling efficiency.", experiment=widest,
                    multiplier=fmt_times(top["scaling_multiplier"], 1), gpus=fmt_int(top["gpus"]),
                    base=fmt_int(base["gpus"]), efficiency=fmt_pct(top["scaling_efficiency"], 0))]
    figures = [(fmt_times(top["scaling_multiplier"], 1), f"multiplier at {fmt_int(top['gpus'])} devices"),
               (fmt_pct(top["scaling_efficiency"], 0), "scaling efficiency there")]
    found = [p for p in projections(runs, project_to_gpus) if p.experiment == widest]
    if found:
        proj = found[0]
        best = min(proj.fits.values(), key=lambda f: f.rmse)
        lo, hi = best.band(proj.target, BAND_LEVEL)
        at = fmt_int(proj.target * proj.base_gpus)
        figures += [(f"{fmt_times(best.predict(proj.target).item(), 0)}",
                     f"{LAWS[best.law]} projection at {at} devices "
                     f"(95 % band {fmt_num(lo[0], 0)}–{fmt_num(hi[0], 0)}×)"),
                    (fmt_times(proj.naive(proj.target).item(), 0), f"straight-line projection at {at} devices")]
    return join([*parts, key_figures(figures)])


def summary_table(runs: pd.DataFrame) -> Section:
    """Per experiment, per run: devices, speed, multiplier vs. ideal,
    efficiency, Karp–Flatt serial fraction."""
    out = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        view = group.assign(configuration=labels(group), ideal=relative_devices(group))
        columns = [Col("configuration", "Configuration", wrap=True), Col("gpus", "Devices", "int")]
        for rate, header in (("tokens_per_s", "Tokens/s"), ("samples_per_s", "Samples/s")):
            if view[rate].notna().all():
                columns.append(Col(rate, header, "int"))
                break
        else:
            columns.append(Col("elapsed_s", "Elapsed", "s"))
        columns += [Col("ideal", "Ideal", "times"), Col("scaling_multiplier", "Multiplier", "times"),
                    Col("scaling_efficiency", "Efficiency", "pct"),
                    Col("serial_fraction", "Serial fraction (Karp–Flatt)", "sig",
                        help="e = (1/S − 1/p) / (1 − 1/p): the fraction of the work that behaves as serial")]
        basis = str(view["scaling_basis"].dropna().iloc[0]) if view["scaling_basis"].notna().any() else "–"
        out.append(table(view, columns, caption=f"{name} — basis: {basis}"))
    out.append(paragraph("Multiplier = speed / baseline speed (baseline: the run with the fewest devices, unless "
                         "one is named); efficiency = multiplier / ideal. Basis “elapsed” compares the elapsed "
                         "times of runs that do equal work."))
    return Section(out)


def configuration_changes(runs: pd.DataFrame) -> Fragment:
    """A warning for each experiment whose runs differ in more than the device count."""
    out = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        changes = []
        columns = [("strategy", "strategy"), ("precision", "precision"), ("model", "model"), ("platform", "platform")]
        if not _batch_is_scaled_consistently(group):
            columns.insert(1, ("micro_batch_size", "micro-batch size"))
        for column, what in columns:
            if column in group and group[column].nunique() > 1:
                steps = []
                for value, gpus in zip(group[column], group["gpus"]):
                    if not steps or steps[-1][0] != value:
                        steps.append((value, gpus))
                changes.append(f"{what} " + " → ".join(
                    f"{fmt_int(v) if isinstance(v, float) else v} (from {fmt_int(g)} device{'s' if g > 1 else ''})"
                    for v, g in steps))
        if changes:
            out.append(callout("<strong>{name}</strong> changes more than the device count: {changes}. "
                               "Its multiplier mixes scaling with these changes.", "warn",
                               name=name, changes="; ".join(changes)))
    return join(out)


def _batch_is_scaled_consistently(group: pd.DataFrame) -> bool:
    """True for strong scaling (the global batch stays the same) and weak
    scaling (the batch per device stays the same), or when batch sizes are unknown."""
    per_device = group["micro_batch_size"] * group["grad_accum_steps"].fillna(1)
    total = group["global_batch_size"].fillna(per_device * group["gpus"])
    return bool(per_device.isna().all() or per_device.nunique() <= 1 or total.nunique() <= 1)


def multiplier_charts(runs: pd.DataFrame) -> Section:
    """Multiplier vs. the ideal, and efficiency, against relative devices, every experiment together."""
    series, efficiency, all_p = {}, {}, []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        p = relative_devices(group)
        all_p.extend(p)
        series[name] = (p, group["scaling_multiplier"].to_numpy(float))
        efficiency[name] = (p, group["scaling_efficiency"].to_numpy(float))
    ideal = np.array(sorted(set(all_p)))
    xlabel = "devices relative to the baseline (N / N_baseline)"
    return Section([
        plots.lines(series, title="Scaling multiplier vs ideal", xlabel=xlabel, ylabel="multiplier (×)",
                    log_x=True, log_y=True, ideal=(ideal, ideal), ideal_label="ideal (multiplier = relative devices)"),
        plots.lines(efficiency, title="Scaling efficiency", xlabel=xlabel, ylabel="efficiency", log_x=True,
                    ideal=(ideal, np.ones_like(ideal)), ideal_label="ideal (100 %)", percent=True),
    ])


def time_breakdown(runs: pd.DataFrame) -> Section:
    """Per experiment: time per step split into phases (stacked bars), and the
    communication overhead and compute/communication ratio."""
    out: list = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        out.append(heading(f"Time breakdown — {name}"))
        if not has_phases(group):
            steps = "; time per step: " + ", ".join(
                f"{fmt_sig(t)} s at {fmt_int(n)}" for n, t in zip(group["gpus"], group["step_time_s"])
                if pd.notna(t)) if group["step_time_s"].notna().any() else ""
            out.append(paragraph("The data of {name} holds no phase times (compute, communication, data): no "
                                 "breakdown{steps}.", name=name, steps=steps))
            continue
        parts = breakdown(group)
        out.append(plots.stacked_bars(labels(group, compact=True), {k: v.to_numpy() for k, v in parts.seconds.items()},
                                      title=f"Where the time goes — {name}", ylabel=parts.unit))
        view = group.assign(configuration=labels(group))
        columns = [Col("configuration", "Configuration", wrap=True), Col("gpus", "Devices", "int"),
                   Col("elapsed_s", "Elapsed (s)", "num")]
        for column, header, fmt in (("compute_s", "Compute (s)", "num"), ("comm_s", "Communication (s)", "num"),
                                    ("comm_exposed_s", "Exposed comm. (s)", "num"), ("data_s", "Data (s)", "num"),
                                    ("comm_overhead", "Comm. overhead", "pct"),
                                    ("compute_comm_ratio", "Compute / comm.", "times")):
            if view[column].notna().any():
                columns.append(Col(column, header, fmt))
        out.append(table(view, columns, note="Communication overhead = exposed communication (all of it where "
                                             "the exposed part is unknown) / a typical rank's elapsed time."))
    return Section(out)


def rank_times(steps: pd.DataFrame) -> pd.DataFrame:
    """Each rank's elapsed time and phase totals over the measured window:
    rows ``run_id, rank, elapsed_s, ...`` (a rank aggregated as its own run)."""
    per_rank = steps.assign(run_id=steps["run_id"].astype(str) + "\x1f" + steps["rank"].astype(str))
    rows = aggregate_steps(per_rank)
    parts = rows["run_id"].str.split("\x1f", n=1, expand=True)
    return rows.assign(run_id=parts[0], rank=parts[1].astype(int))


def rank_spread(runs: pd.DataFrame, steps: pd.DataFrame | None) -> Section:
    """Per multi-rank run: each rank's elapsed time, the slowest rank, the
    imbalance, and what averaging the ranks (instead of taking the slowest)
    would have claimed."""
    multi = runs[runs["ranks"].fillna(runs["gpus"]) > 1] if "ranks" in runs else runs.iloc[0:0]
    if steps is None or steps.empty:
        if multi["rank_imbalance"].notna().any() if "rank_imbalance" in multi else False:
            return Section([_imbalance_table(multi), paragraph("No per-rank steps given (parameter steps): "
                                                               "the spread per rank is not drawn.")])
        return Section([paragraph("No per-rank data: set the steps parameter to per-rank step tables or "
                                  "profiler run folders to see stragglers.")])
    times = rank_times(steps)
    spread = times.groupby("run_id").filter(lambda g: len(g) > 1)
    order = [r for r in runs["run_id"].astype(str) if r in set(spread["run_id"])]
    if not order:
        return Section([paragraph("Every run in the per-rank data has a single rank: no spread to show.")])
    summary = []
    for run_id in order:
        g = spread.loc[spread["run_id"] == run_id].sort_values("rank")
        elapsed = g["elapsed_s"].to_numpy(float)
        summary.append({"run_id": run_id, "ranks": len(g), "slowest": int(g["rank"].iloc[elapsed.argmax()]),
                        "max": elapsed.max(), "mean": elapsed.mean(), "min": elapsed.min(),
                        "imbalance": elapsed.max() / elapsed.min(), "hidden": elapsed.max() / elapsed.mean() - 1,
                        "elapsed": elapsed, "position": int(elapsed.argmax())})
    frame = pd.DataFrame(summary)
    experiment_of = dict(zip(runs["run_id"].astype(str), runs["experiment"].astype(str)))
    parts: list = []
    worst = frame.loc[frame["imbalance"].idxmax()]
    if worst["imbalance"] > 1.1:
        parts.append(callout("Straggler: in run <strong>{run}</strong>, rank {rank} takes {ratio} as long as the "
                             "fastest rank. A speed-up computed from the mean over ranks overstates this run by "
                             "{hidden}.", "warn", run=worst["run_id"], rank=int(worst["slowest"]),
                             ratio=fmt_times(worst["imbalance"]), hidden=fmt_pct(worst["hidden"])))
    for name in dict.fromkeys(experiment_of[r] for r in order):
        rows = frame[[experiment_of[r] == name for r in frame["run_id"]]]
        parts.append(plots.rank_spread(rows["run_id"].tolist(), rows["elapsed"].tolist(), rows["position"].tolist(),
                                       title=f"Elapsed time per rank — {name}", ylabel="elapsed (s)"))
    parts.append(table(frame, [
        Col("run_id", "Run"), Col("ranks", "Ranks", "int"), Col("slowest", "Slowest rank", "int"),
        Col("max", "Slowest (s)", "num"), Col("mean", "Mean over ranks (s)", "num"),
        Col("min", "Fastest (s)", "num"), Col("imbalance", "Imbalance (slowest / fastest)", "times"),
        Col("hidden", "Time the mean hides", "pct")],
        note="A job ends when its slowest rank does: its elapsed time is the slowest rank's. Averaging ranks "
             "understates it by the last column."))
    return Section(parts)


def _imbalance_table(runs: pd.DataFrame) -> Fragment:
    return table(runs, [Col("run_id", "Run"), Col("ranks", "Ranks", "int"), Col("slowest_rank", "Slowest rank", "int"),
                        Col("elapsed_s", "Slowest (s)", "num"), Col("mean_rank_elapsed_s", "Mean over ranks (s)", "num"),
                        Col("rank_imbalance", "Imbalance", "times")])


TREND_STEP = 1.2
"""Factor by which the serial fraction must change, step to step or end to end, to count as a change."""


def serial_trend(e: np.ndarray) -> str:
    """How the Karp–Flatt serial fraction ``e`` (in order of devices) moves:
    ``moves both ways`` when one step rises and another falls by more than
    :data:`TREND_STEP`; else ``grows`` or ``falls`` when the last value is
    :data:`TREND_STEP` times the first or more (or less); else ``stays about constant``."""
    e = np.asarray(e, dtype=float)
    if not (e > 0).all():  # a superlinear run gives e ≤ 0: compare differences instead of ratios
        return "grows" if e[-1] > e[0] else "falls" if e[-1] < e[0] else "stays about constant"
    ratios = e[1:] / e[:-1]
    if (ratios > TREND_STEP).any() and (ratios < 1 / TREND_STEP).any():
        return "moves both ways"
    if e[-1] > e[0] * TREND_STEP:
        return "grows"
    if e[-1] < e[0] / TREND_STEP:
        return "falls"
    return "stays about constant"


def serial_fraction(runs: pd.DataFrame) -> Section:
    """The Karp–Flatt serial fraction against devices, and how to read its trend."""
    series = {}
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        known = group["serial_fraction"].notna().to_numpy(bool)
        if known.any():
            series[name] = (relative_devices(group)[known], group["serial_fraction"].to_numpy(float)[known])
    if not series:
        return Section([paragraph("No experiment has a multiplier beyond its baseline: no serial fraction.")])
    notes = []
    for name, (p, e) in series.items():
        if len(e) >= 2:
            trend = serial_trend(e)
            meaning = {"grows": "overhead grows with scale (communication, synchronisation) — Amdahl's law "
                                "alone will be optimistic",
                       "falls": "the baseline carries a cost the larger runs amortise (or the work per device "
                                "changes)",
                       "stays about constant": "a fixed serial part limits scaling, as Amdahl's law assumes",
                       "moves both ways": "no single serial part explains these runs; other changes between them "
                                          "(nodes, strategy, noise) weigh more"}[trend]
            values = " → ".join(fmt_sig(v) for v in e)
            caveat = " Two values only: a weak indication." if len(e) == 2 and trend != "moves both ways" else ""
            where = ", ".join(f"{x:g}" for x in p)
            notes.append(f"{name}: e {trend} ({values} at {where}× the baseline "
                         f"devices) — {meaning}.{caveat}")
    return Section([plots.lines(series, title="Karp–Flatt serial fraction", xlabel="devices relative to the baseline",
                                ylabel="serial fraction e", log_x=True), bullet_list(notes)])


def fits(runs: pd.DataFrame, project_to_gpus: float | None = None) -> Section:
    """Per experiment: Amdahl and USL fits, a projection chart with each fit's
    95 % band next to the straight-line projection, and a table of projected multipliers."""
    found = projections(runs, project_to_gpus)
    if not found:
        return Section([paragraph("No experiment has {n} or more device counts: no law is fitted, and nothing "
                                  "is projected.", n=MIN_FIT_POINTS)])
    out: list = []
    for proj in found:
        out.append(heading(f"Projection — {proj.experiment}"))
        out.append(bullet_list([f.describe() for f in proj.fits.values()]))
        targets = projection_targets(proj)
        x = np.geomspace(1, proj.target, 60)
        grid = np.concatenate([x, targets])
        bands = {law: f.band(grid, BAND_LEVEL) for law, f in proj.fits.items()}
        curves = []
        for i, (law, f) in enumerate(proj.fits.items()):
            lo, hi = bands[law]
            curves.append(plots.Curve(x, f.predict(x), f"{LAWS[law]} fit (95 % band)",
                                      band=(np.maximum(lo[:len(x)], 1e-3), hi[:len(x)]), color=plots.PALETTE[2 + i]))
        beyond = x[x >= proj.p.max()]
        curves.append(plots.Curve(beyond, proj.naive(beyond),
                                  "straight-line projection (efficiency held at the last point)", style="--",
                                  color=plots.PALETTE[3]))
        curves.append(plots.Curve(x, x, "ideal", style=":", color="#8a94a6"))
        out.append(plots.projection((proj.p, proj.multiplier), curves,
                                    title=f"Measured, fitted and projected multiplier — {proj.experiment}",
                                    xlabel="devices relative to the baseline (N / N_baseline)",
                                    ylabel="multiplier (×)"))
        rows = []
        for j, p in enumerate(targets):
            row = {"devices": p * proj.base_gpus, "naive": proj.naive(p).item(), "ideal": p}
            for law, f in proj.fits.items():
                lo, hi = bands[law]
                row[law] = f"{f.predict(p).item():,.1f}× ({lo[len(x) + j]:,.1f}–{hi[len(x) + j]:,.1f})"
            rows.append(row)
        out.append(table(pd.DataFrame(rows), [
            Col("devices", "Devices", "int"), Col("amdahl", "Amdahl: multiplier (95 % band)"),
            Col("usl", "USL: multiplier (95 % band)"), Col("naive", "Straight line", "times"),
            Col("ideal", "Ideal", "times")],
            note="Bands: the fitted parameters' uncertainty propagated to the projection, widened by the fit's "
                 "relative RMSE. The straight line extends the last measured point at its efficiency — the "
                 "projection a report makes by multiplying one configuration's throughput by the node count."))
        usl = proj.fits["usl"]
        kappa, sigma = usl.params["kappa"], usl.params["sigma"]
        if kappa > 0 and sigma < 1:
            peak = math.sqrt((1 - sigma) / kappa)
            if peak < proj.target * 4:
                out.append(callout("The USL fit peaks at about {n} devices: beyond that, adding devices makes "
                                   "{name} slower.", "warn", n=fmt_int(peak * proj.base_gpus), name=proj.experiment))
    return Section(out)


def usd_per_million(runs: pd.DataFrame, rate: str) -> pd.Series:
    """USD per million units of work (tokens or samples, the unit of the
    ``rate`` column, per second): ``price_per_gpu_hour · gpus / 3600 s/h /
    rate · 10⁶``."""
    return runs["price_per_gpu_hour"] * runs["gpus"] / 3600 / runs[rate] * 1e6


def cost(runs: pd.DataFrame) -> Section:
    """Cost of each run and cost efficiency, where a price per device-hour is known."""
    priced = runs[runs["price_per_gpu_hour"].notna()] if "price_per_gpu_hour" in runs else runs.iloc[0:0]
    if priced.empty:
        return Section([paragraph("No price per device-hour in the data: set the price_per_gpu_hour parameter "
                                  "to see cost and cost efficiency.")])
    view = priced.assign(configuration=labels(priced))
    columns = [Col("experiment", "Experiment"), Col("configuration", "Configuration", wrap=True),
               Col("gpus", "Devices", "int"), Col("price_per_gpu_hour", "Price ($/device-h)", "usd"),
               Col("elapsed_s", "Elapsed (s)", "s"), Col("gpu_hours", "Device-hours", "num"),
               Col("cost_usd", "Cost", "usd"), Col("cost_efficiency", "Cost efficiency", "pct",
                                                   help="baseline cost per unit of work / this run's")]
    unit_cost = []
    for rate in ("tokens_per_s", "samples_per_s"):
        if view[rate].notna().all():
            view = view.assign(**{f"usd_per_million_{rate}": usd_per_million(view, rate)})
            unit_cost.append(Col(f"usd_per_million_{rate}", f"$ per million {rate.split('_')[0]}", "usd"))
            break
    parts: list = []
    for name in experiments(view):
        group = experiment_runs(view, name)
        top, base = group.loc[group["gpus"].idxmax()], group.loc[group["gpus"].idxmin()]
        if top.name != base.name and pd.notna(top["cost_efficiency"]) and top["cost_efficiency"] > 0:
            parts.append(paragraph(
                "{name}: going from {base} to {top} devices makes the job {faster} faster and each unit of "
                "work {dearer} more expensive ({cost_base} → {cost_top} per run).", name=name,
                base=fmt_int(base["gpus"]), top=fmt_int(top["gpus"]), faster=fmt_times(top["scaling_multiplier"], 1),
                dearer=fmt_pct(1 / top["cost_efficiency"] - 1, 0), cost_base=fmt_usd(base["cost_usd"]),
                cost_top=fmt_usd(top["cost_usd"])))
    parts.append(table(view, columns[:-1] + unit_cost + columns[-1:],
                       note="Cost efficiency = baseline cost per unit of work / this run's; at one price it equals "
                            "the scaling efficiency. Runs of an experiment that compares elapsed times do equal work, "
                            "so their costs compare directly."))
    return Section(parts)
