"""A throughput with its uncertainty: per side of a comparison (:class:`Estimate`), per configuration of a report
(runs are repeats when they share every recorded setting), and whether a report may call one configuration faster
than another (:func:`distinguish`). docs/statistics.md, "Intervals in the reports".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries, job_steps
from trainperf.ranks import slowest_shares
from trainperf.stats import (DETECT, DRAWS, MIN_EFFECT, RUN_CV, TIED, Difference, Verdict, detectable_effect,
                             log_interval, relative_difference, repeats_to_detect, resample_runs, welch_dof,
                             with_run_to_run)
from trainperf.table_rules import raise_first

CONFIG_KEY = ("platform", "model", "n_params", "n_active_params", "n_layers", "d_model", "n_heads", "vocab_size",
              "precision", "strategy", "gpus", "nodes", "tensor_parallel", "pipeline_parallel", "context_parallel",
              "expert_parallel", "micro_batch_size", "grad_accum_steps", "global_batch_size", "seq_len",
              "activation_checkpointing", "compiled")
"""Columns that runs must share to be repeats of one configuration: every setting a runs table records."""
RATES = {"tokens": "tokens_per_s", "samples": "samples_per_s"}


@dataclass
class Side:
    """One side of a comparison: its runs rows and, where recorded, measured steps (one frame per run: ``step``,
    ``step_time_s`` of the slowest rank, ``tokens`` or ``samples`` of all ranks, phase seconds as the mean over
    ranks, ``rank_<r>_s`` each rank's step time)."""

    label: str
    runs: pd.DataFrame
    steps: dict[str, pd.DataFrame] = field(default_factory=dict)
    dropped_steps: int = 0


@dataclass
class Estimate:
    """A side's throughput, its log's uncertainty (``se_log``, ``dof``) and, with steps, means and errors (s/step)."""

    throughput: float
    se_log: float
    dof: float
    runs: int
    steps: int
    means: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    slowest_share: dict[str, float] = field(default_factory=dict)

    def interval(self) -> tuple[float, float]:
        """The throughput's 95 % interval (NaN when none can be computed)."""
        return log_interval(self.throughput, self.se_log, self.dof)


def estimate_steps(side: Side, unit: str | None, columns: list[str], draws: int = DRAWS, seed: int = 0) -> Estimate:
    """Throughput (``unit`` per second; steps per second when None) and the means of ``columns`` (s per step) of
    a side, by :func:`trainperf.stats.resample_runs` (standard errors with its small-sample correction)."""
    frames = list(side.steps.values())
    matrices = [np.column_stack([f["step_time_s"].to_numpy(float), f[unit].to_numpy(float) if unit else np.ones(len(f)),
                                 *(f[c].to_numpy(float) for c in columns)]) for f in frames]
    point = np.array([m.mean(axis=0) for m in matrices])
    resampled = resample_runs(matrices, draws=draws, seed=seed)
    rep = resampled.replicates  # (draws, slots, 2 + len(columns))
    names = ["step_time_s", "work", *columns]
    scale = resampled.bias_correction
    ranks = [c for c in columns if c.startswith("rank_")]
    return Estimate(
        throughput=float((point[:, 1] / point[:, 0]).mean()),
        se_log=float(np.std(np.log((rep[..., 1] / rep[..., 0]).mean(axis=1)), ddof=1)) * scale,
        dof=resampled.dof,
        runs=len(frames),
        steps=sum(len(f) for f in frames),
        means={c: float(point[:, i].mean()) for i, c in enumerate(names) if c != "work"},
        errors={c: float(np.std(rep[..., i].mean(axis=1), ddof=1)) * scale for i, c in enumerate(names)
                if c != "work"},
        slowest_share=slowest_shares(pd.concat([f[ranks] for f in frames])) if len(ranks) > 1 else {},
    )


def estimate_runs(side: Side, rate: str) -> Estimate:
    """Throughput from runs rows only: the repeats' mean ``rate``, ``se_log = sd / (√R · mean)`` on ``R − 1`` dof."""
    values = side.runs[rate].to_numpy(float)
    raise_first(np.isnan(values), lambda i: f"run {side.runs['run_id'].iloc[i]!r} has no {rate}",
                lambda i: {"path": side.label})
    mean = float(values.mean())
    r = len(values)
    se_log = float(values.std(ddof=1) / (math.sqrt(r) * mean)) if r > 1 else math.nan
    return Estimate(throughput=mean, se_log=se_log, dof=float(r - 1), runs=r, steps=0)


def sides_difference(est: list[Estimate], run_cv: float = RUN_CV, columns: Sequence[str] = ()) -> tuple[Difference, str]:
    """Candidate / baseline − 1 of the two estimates ``est`` with its interval, and a note on what covers the
    run-to-run variance of a side with a single run, whose estimate is widened in place (``se_log`` and, with steps,
    the errors of ``step_time_s`` and ``columns``): repeats on both sides: their own spread (Welch); on one: the
    single run varies as much as one of them (SE × √runs, on their dof); one run a side: each gets ``run_cv`` on top
    of its steps' noise (:func:`with_run_to_run`; a runs row, ``run_cv`` alone). docs/statistics.md, "Intervals"."""
    if est[0].runs > 1 and est[1].runs > 1:
        return _relative(est), ""
    if est[0].runs == 1 and est[1].runs == 1:
        for e in est:
            e.se_log, e.dof = with_run_to_run(e.se_log if math.isfinite(e.se_log) else 0.0, e.dof, run_cv)
            for c in (("step_time_s", *columns) if e.errors else ()):
                e.errors[c] = math.hypot(e.errors[c], run_cv * e.means[c])
        if run_cv == 0:
            return _relative(est), ("Run-to-run variation: none assumed (--run-cv 0): the intervals cover each "
                                    "run's steps only.")
        return _relative(est), (f"Run-to-run variation: no repeats to measure it, so each run is taken to vary by "
                                f"{run_cv:.0%} (coefficient of variation) from run to run on top of its steps' noise "
                                "(trainperf.stats.RUN_CV, measured on repeated CPU sweeps; set it with --run-cv).")
    repeated, single = (est[0], est[1]) if est[0].runs > 1 else (est[1], est[0])
    spread = repeated.se_log * math.sqrt(repeated.runs)
    single.se_log = max(single.se_log if math.isfinite(single.se_log) else 0.0, spread)
    single.dof = repeated.dof
    for c in (("step_time_s", *columns) if single.errors else ()):
        single.errors[c] = max(single.errors[c], spread * single.means[c])
    return _relative(est, repeated.dof), (f"One side has a single run: it is taken to vary from run to run as "
                                          f"much as the other side's {repeated.runs} repeats do.")


def run_spread(est: list[Estimate]) -> float:
    """The standard deviation of one run's log throughput (fraction) pooled over both sides, ``√((σ₁² + σ₂²)/2)``
    with ``σ = se_log · √runs`` (after :func:`sides_difference`: run-to-run and step noise together)."""
    return math.sqrt(sum((e.se_log * math.sqrt(e.runs)) ** 2 for e in est) / 2)


def _relative(est: list[Estimate], dof: float | None = None) -> Difference:
    return relative_difference(est[0].throughput, est[0].se_log, est[0].dof,
                               est[1].throughput, est[1].se_log, est[1].dof, dof=dof)


def configuration_keys(runs: pd.DataFrame) -> pd.Series:
    """Per run, the key of the configuration it repeats: its experiment, every setting of :data:`CONFIG_KEY` and
    its ``extra_configuration`` (the name ``trainperf bench`` gives repeats)."""
    columns = [c for c in ("experiment", *CONFIG_KEY, "extra_configuration") if c in runs]
    if not columns:
        return runs["run_id"].astype("string")
    values = zip(*(runs[c].tolist() for c in columns))
    return pd.Series(["|".join("" if pd.isna(v) else str(v) for v in row) for row in values], index=runs.index,
                     dtype="string")


def configuration_intervals(runs: pd.DataFrame, steps: Summaries | None = None, run_cv: float = RUN_CV, *,
                            frames: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per configuration of a derived runs table: ``throughput`` (mean over its repeats, ``unit`` per
    second: tokens, else samples) with its 95 % interval ``low``–``high`` (NaN for one run without steps),
    ``se_log`` and ``dof`` (for :func:`distinguish`), ``basis`` (what the interval covers), ``runs``, ``steps``
    (measured steps used) and ``run_ids``. A configuration uses ``steps`` (``trainperf.load_summaries``) where each
    of its runs has 2 complete measured steps (:func:`job_frames`, or ``frames`` where already made); one run with
    steps adds ``run_cv`` (a fraction, as ``trainperf compare`` does; 0: its steps alone). Deterministic (seed 0)."""
    frames = job_frames(steps) if frames is None else frames
    used = [c for c in ("run_id", "experiment", "extra_configuration", *RATES.values()) if c in runs]
    rows = []
    for i, (_, group) in enumerate(runs[used].groupby(configuration_keys(runs), sort=False, dropna=False)):
        ids = [str(r) for r in group["run_id"]]
        name = (group["extra_configuration"].iloc[0] if "extra_configuration" in group
                and pd.notna(group["extra_configuration"].iloc[0]) else ids[0])
        row = {"experiment": group["experiment"].iloc[0] if "experiment" in group else pd.NA,
               "configuration": name, "runs": len(ids), "run_ids": ", ".join(ids)}
        side = Side(name, group, {r: frames[r] for r in ids if r in frames})
        unit = next((u for u in RATES if side.steps and all(u in f for f in side.steps.values())), None)
        if len(side.steps) == len(ids):
            est = estimate_steps(side, unit, [], seed=i)
            basis = "steps, repeats" if len(ids) > 1 else "steps of one run"
            if len(ids) == 1 and run_cv > 0:
                est = replace(est, **dict(zip(("se_log", "dof"), with_run_to_run(est.se_log, est.dof, run_cv))))
                basis += f", run-to-run CV {run_cv:.0%} assumed"
            row |= {"unit": unit or "step", "basis": basis}
        else:
            rate = next((r for r in RATES.values() if r in group and group[r].notna().all()), None)
            if rate is None:
                continue
            est = estimate_runs(side, rate)
            row |= {"unit": rate.removesuffix("_per_s"),
                    "basis": "repeats, no steps" if len(ids) > 1 else "one run, no steps: no interval"}
        low, high = est.interval()
        rows.append(row | {"steps": est.steps, "throughput": est.throughput, "low": low, "high": high,
                           "se_log": est.se_log, "dof": est.dof})
    return pd.DataFrame(rows, columns=["experiment", "configuration", "runs", "steps", "unit", "throughput", "low",
                                       "high", "se_log", "dof", "basis", "run_ids"])


def job_frames(steps: Summaries | None) -> dict[str, pd.DataFrame]:
    """:func:`trainperf.aggregate.job_steps` of the runs ``steps`` holds enough of."""
    return {} if steps is None else job_steps(steps, usable_only=True)[0]


NO_INTERVAL = "no interval (one run without steps)"
"""What a report shows in place of an interval a configuration does not have."""


def run_intervals(runs: pd.DataFrame, steps: Summaries | None = None,
                  frames: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Per run of ``runs`` (same order), its configuration's interval (:func:`configuration_intervals`): ``run_id,
    configuration, unit, throughput`` (``unit`` per second), ``low``, ``high``, ``se_log``, ``dof`` and ``basis``
    (what the interval covers, or that there is none); ``frames``: :func:`job_frames` of ``steps``, where made."""
    found = configuration_intervals(runs, steps, frames=frames)
    row = {run_id: i for i, ids in enumerate(found["run_ids"]) for run_id in ids.split(", ")}
    ids = runs["run_id"].astype(str).tolist()
    out = found.drop(columns=["experiment", "run_ids", "runs", "steps"]).reindex([row.get(r) for r in ids])
    out = out.reset_index(drop=True).assign(basis=lambda o: o["basis"].where(o["low"].notna(), NO_INTERVAL))
    out.insert(0, "run_id", ids)
    return out


def has_interval(row: pd.Series) -> bool:
    """Whether a :func:`configuration_intervals` or :func:`run_intervals` row has an interval."""
    return bool(row["dof"] > 0 and math.isfinite(row["se_log"]))


def distinguish(table: pd.DataFrame, a: str, b: str) -> Verdict:
    """Whether configuration ``b`` of a :func:`configuration_intervals` or :func:`run_intervals` table is faster or
    slower than ``a``, or indistinguishable (within the noise, or below :data:`trainperf.stats.MIN_EFFECT`)."""
    rows = table.drop_duplicates("configuration").set_index("configuration")
    x, y = rows.loc[a], rows.loc[b]
    if x["unit"] != y["unit"]:
        raise ValueError(f"{a!r} is measured in {x['unit']}/s and {b!r} in {y['unit']}/s: not comparable")
    tested = has_interval(x) and has_interval(y)
    d = (relative_difference(x["throughput"], x["se_log"], x["dof"], y["throughput"], y["se_log"], y["dof"])
         if tested else Difference(y["throughput"] / x["throughput"] - 1.0))
    return Verdict(d, tested, MIN_EFFECT, a, b)


def ties_with_fastest(intervals: pd.DataFrame) -> np.ndarray:
    """Per row of a :func:`run_intervals` frame of one experiment: whether it ties with the fastest."""
    fastest = intervals.loc[intervals["throughput"].idxmax(), "configuration"]
    return np.array([distinguish(intervals, fastest, name).verdict == TIED for name in intervals["configuration"]])


@dataclass(frozen=True)
class Resolution:
    """What two configurations' data could tell apart: ``detectable``, the smallest relative throughput difference
    they detect with 80 % power at 95 % confidence (:func:`detectable_effect`; NaN without interval), and ``repeats``,
    the runs of each that would detect ``effect`` (at their runs' spread, else at :data:`RUN_CV`: ``assumed``)."""

    detectable: float
    repeats: int | None
    effect: float
    assumed: bool


def resolution(x: pd.Series, y: pd.Series) -> Resolution:
    """The :class:`Resolution` of two rows of a :func:`run_intervals` table (``se_log``, ``dof`` and,
    where given, ``runs``: how many runs the configuration has; 1 when absent)."""
    if has_interval(x) and has_interval(y):
        se = math.hypot(x["se_log"], y["se_log"])
        sides = [Estimate(r["throughput"], r["se_log"], r["dof"], int(r.get("runs", 1)), 0) for r in (x, y)]
        detectable = detectable_effect(se, welch_dof(x["se_log"], x["dof"], y["se_log"], y["dof"]))
        return Resolution(detectable, repeats_to_detect(run_spread(sides), DETECT), DETECT, False)
    return Resolution(math.nan, repeats_to_detect(RUN_CV, DETECT), DETECT, True)
