"""A baseline against a candidate, each side one configuration (one run, or repeats of it), with the intervals of
:mod:`trainperf.estimates`: what is compared, the intervals and the verdict are in docs/statistics.md."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.aggregate import job_steps
from trainperf.compare.metrics import METRICS, NOT_MEASURED, judge, metric_row, metric_table, spread_basis
from trainperf.derived import derive
from trainperf.errors import DataError
from trainperf.estimates import CONFIG_KEY, RATES, Estimate, Side, estimate_runs, estimate_steps, sides_difference
from trainperf.ranks import often_slowest
from trainperf.reading.loading import holds_steps, load_runs, load_summaries, rank_step_times
from trainperf.reading.run_folders import summarized_runs
from trainperf.stats import DRAWS, INCONCLUSIVE, MIN_EFFECT, RUN_CV, Difference, t_quantile, welch_dof

STEPS_BASIS = ("Throughput here is the work of a step over the job's step time: the steps' own time, without the "
               "work between steps (evaluation, checkpoints). trainperf summarize's tokens_per_s divides by the elapsed "
               "time with that work inside: it is given as elapsed_throughput.")
SHOWN_ONLY = "shown, not judged"
"""The end of the ``basis`` of a ``metrics`` row given for information: the exit code does not look at it."""
PLOTTED_STEPS = 1_000
"""Steps of a run a chart draws at most (:func:`plotted_steps`)."""
PARTS = ("data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "compute_s", "wait_outside_s",
         "validation_s")
"""Phase columns that are slices of a step, in step order (``compute_s`` only where no compute phase is split
out; ``wait_outside_s``: the wait for another rank's work outside the steps, which communication does not count)."""
OVERLAPPING = ("comm_s", "comm_exposed_s")
"""Communication columns, compared beside the partition of the step where they overlap its phases."""
ROUNDING_S = 1e-6
"""Phases of a step are written to the microsecond: their sum may miss the step by this much per phase (s)."""
DELTA_COLUMNS = ("baseline_s", "candidate_s", "delta_s", "low_s", "high_s", "delta_pct", "relative_change", "moved")
"""Columns of a phase or rank row of a :class:`Comparison` after its name (docs/statistics.md, "The result")."""


def read_side(*paths: str | Path, label: str | None = None, warmup: int = 0, cache: bool = False) -> Side:
    """One side, with steps where the inputs hold them (run folders, steps tables), after each run's warm-up and
    ``warmup`` more steps; ``cache``: runs from :mod:`trainperf.reading.input_cache`. DataError when the runs are
    not repeats of one configuration."""
    if not paths:
        raise DataError("no input given for a side of the comparison")
    paths = tuple(Path(p) for p in paths)
    with_steps = [p for p in paths if holds_steps(p)]
    tables = [p for p in with_steps if p.is_file()]  # steps tables: their runs from their summaries
    others = [p for p in paths if p not in tables]
    frames = (([load_runs(*others, cache=cache)] if others else [])
              + ([summarized_runs(load_summaries(*tables))] if tables else []))
    side = Side(label or ", ".join(map(str, paths)),
                derive(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]))
    check_repeats(side.runs, side.label)
    if with_steps:
        side.steps, side.dropped_steps = job_steps(load_summaries(*with_steps), warmup,
                                                   rank_steps=rank_step_times(*with_steps))
    return side


def check_repeats(runs: pd.DataFrame, label: str) -> None:
    """DataError naming ``label`` when ``runs`` differ in a configuration column (:data:`CONFIG_KEY`)."""
    for column in (c for c in CONFIG_KEY if c in runs):
        values = runs[column].dropna().astype(str).unique()
        if len(values) > 1:
            raise DataError(f"the runs of one side must be repeats of one configuration, but they differ in "
                            f"{column!r} ({', '.join(sorted(values))}); compare one configuration per side", path=label)


def plotted_steps(step_times: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of ``step_times`` a chart draws: every step of a run of at most :data:`PLOTTED_STEPS` measured steps,
    else that many evenly spaced along it; and a sentence naming the runs drawn in part ("" when none is)."""
    parts, thinned = [], []
    for run_id, steps in step_times.groupby("run_id", sort=False):
        if len(steps) > PLOTTED_STEPS:
            thinned.append(f"{run_id} ({PLOTTED_STEPS:,} of {len(steps):,} steps)")
            steps = steps.iloc[np.linspace(0, len(steps) - 1, PLOTTED_STEPS).round().astype(int)]
        parts.append(steps)
    return pd.concat(parts, ignore_index=True) if parts else step_times, (
        f"The charts draw {PLOTTED_STEPS:,} steps of a longer run, evenly spaced along it: {', '.join(thinned)}. The "
        "throughput above uses every step." if thinned else "")


@dataclass
class Comparison:
    """A baseline against a candidate: its fields are described in docs/statistics.md, "The result"."""

    baseline: str
    candidate: str
    unit: str
    min_effect: float
    sides: pd.DataFrame
    difference: Difference
    verdict: str
    notes: list[str]
    phases: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_times: pd.DataFrame = field(default_factory=pd.DataFrame)
    qualifier: str = ""
    assumed_run_cv: float = math.nan
    repeats_needed: int | None = None
    overlaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    load: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)
    metrics: pd.DataFrame = field(default_factory=lambda: metric_table([]))

    @property
    def exit_code(self) -> int:
        """0: no judged metric regressed significantly (inconclusive included); 1: one did."""
        return 1 if self.metrics["regressed"].astype(bool).any() else 0

    def headline(self) -> str:
        """The throughput's verdict and its figure, one line (an inconclusive one: the runs a side that would tell)."""
        d, effect = self.difference, f"{self.min_effect * 100:g}%"
        assumed = (f"; run-to-run CV {self.assumed_run_cv:.0%} assumed" if self.assumed_run_cv > 0 else
                   "; steps only" if self.assumed_run_cv == 0 else "")
        interval = (f"95 % interval {d.low:+.1%} to {d.high:+.1%}; minimum effect {effect}{assumed}"
                    if math.isfinite(d.low) else "no interval")
        line = f"{self.verdict}{self.qualifier}: candidate {self.unit}/s {d.estimate:+.1%} vs baseline ({interval})"
        if self.verdict == INCONCLUSIVE:
            line += (f"; about {self.repeats_needed:,} runs a side would detect {effect} (80 % power)"
                     if self.repeats_needed else "; record repeats to measure the noise")
        return line


def compare(baseline: Side, candidate: Side, min_effect: float = MIN_EFFECT, draws: int = DRAWS,
            seed: int = 0, run_cv: float = RUN_CV, metrics: Sequence[str] = ("throughput",),
            min_effects: Mapping[str, float] | None = None, run_cvs: Mapping[str, float] | None = None) -> Comparison:
    """Compare two sides (docs/statistics.md), the same for a ``seed``. ``metrics``: those judged (the exit code looks
    at these); ``min_effects``, ``run_cvs``: their minimum effects and the run-to-run CVs a lone run gets when neither
    side has repeats, where not :data:`METRICS`' defaults (throughput's: ``min_effect``, ``run_cv``; fractions)."""
    min_effects, run_cvs = dict(min_effects or {}), dict(run_cvs or {})
    if unknown := [m for m in (*metrics, *min_effects, *run_cvs) if m not in METRICS]:
        raise DataError(f"unknown metric {unknown[0]!r}: one of {', '.join(METRICS)}")
    min_effect, run_cv = min_effects.pop("throughput", min_effect), run_cvs.pop("throughput", run_cv)
    for name, value in (("min_effect", min_effect), *((f"min_effect of {m}", v) for m, v in min_effects.items())):
        if not value >= 0:
            raise DataError(f"{name} must be a fraction >= 0, got {value}")
    for name, value in (("run_cv", run_cv), *((f"run_cv of {m}", v) for m, v in run_cvs.items())):
        if not 0 <= value < 1:
            raise DataError(f"{name} must be a fraction in [0, 1), got {value}")
    with_steps = all(s.steps for s in (baseline, candidate))
    result = (_compare_steps(baseline, candidate, min_effect, draws, seed, run_cv) if with_steps else
              _compare_runs(baseline, candidate, min_effect))
    result.load, loaded = start_load(baseline, candidate)
    result.warnings = same_runs(baseline, candidate) + loaded
    work = result.sides["work_per_step"].to_numpy(float)
    if np.isfinite(work).all() and not abs(work[1] / work[0] - 1) < 1e-3:
        result.notes.append(f"The sides do different work per step ({work[0]:,.0f} and {work[1]:,.0f} {result.unit} "
                            f"per step): the verdict judges {result.unit}/s, not step time; the step and phase times "
                            "are each side's own steps.")
    names = list(dict.fromkeys(metrics))
    elapsed = with_steps and "elapsed_throughput" not in names  # shown beside throughput from steps
    rows = [result.metrics.iloc[0].to_dict() if name == "throughput" else
            judge(METRICS[name], baseline, candidate, min_effects.get(name), run_cvs.get(name))
            for name in names + ["elapsed_throughput"] * elapsed]
    if with_steps:
        result.notes.append(STEPS_BASIS)
    if elapsed and rows[-1]["verdict"] == NOT_MEASURED:
        rows.pop()
    elif elapsed:
        rows[-1] |= {"regressed": False, "basis": f"{rows[-1]['basis']}; {SHOWN_ONLY}"}
    result.metrics = metric_table(rows)
    return result


def exposed_within_phases(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether its exposed communication (``comm_exposed_s``) lies inside its forward and backward phases
    (sampled by ``torch.profiler`` windows: ``extra_comm_measurement`` given) rather than beside them."""
    return runs.get("extra_comm_measurement", pd.Series(pd.NA, index=runs.index, dtype="object")).notna()


def _common(sides: Sequence[Side], names: Sequence[str]) -> list[str]:
    """The columns of ``names`` that every run of every side has in its steps."""
    return [c for c in names if all(c in f for s in sides for f in s.steps.values())]


def step_partition(baseline: Side, candidate: Side) -> tuple[list[str], list[str], tuple[Side, ...], list[str]]:
    """The phase columns both sides timed that are slices of a step, in step order (:data:`PARTS`, and
    ``comm_exposed_s`` where a side took it out of backward); the communication columns both timed that overlap
    them; the sides with, per step, ``other_s`` (a typical rank's mean step less the slices, s) and
    ``slowest_wait_s`` (the job's step less that mean, s; where the mean over ranks is known), which with the
    slices add up to ``step_time_s`` (docs/statistics.md, "What is compared"); and the notes on them."""
    sides = (baseline, candidate)
    inside = [bool(exposed_within_phases(s.runs).any()) for s in sides]
    timed = [bool(_common((s,), ("comm_exposed_s",))) for s in sides]
    parts = _common(sides, PARTS)
    if any(c in parts for c in ("forward_s", "loss_s", "backward_s", "optimizer_s")):
        parts = [c for c in parts if c != "compute_s"]
    if any(t and not i for t, i in zip(timed, inside)):
        parts.insert(parts.index("validation_s") if "validation_s" in parts else len(parts), "comm_exposed_s")
    overlaps = [c for c in _common(sides, OVERLAPPING) if c not in parts]
    notes = ["Phases: the slices of a step below (each a mean over ranks), the other time of a typical rank and its "
             "wait for the slowest add up to the job's step time." +
             (f" Communication ({', '.join(c.removesuffix('_s') for c in overlaps)}) overlaps them and is shown "
              "apart." if overlaps else "")] if parts else []
    partitioned, overlapping = [], []
    for name, side, within, has in zip(("baseline", "candidate"), sides, inside, timed):
        if "comm_exposed_s" in parts and not has:
            notes.append(f"The {name} did not time its communication: what it waited for is inside its other "
                         "phases, and its slice of exposed communication is 0.")
        if within and has:
            exposed = float(np.mean([f["comm_exposed_s"].mean() for f in side.steps.values()]))
            where = ("its slice of its own is 0" if "comm_exposed_s" in parts else
                     "it is shown beside the phases, not added to them")
            notes.append(f"The {name}'s exposed communication ({exposed:.4f} s a step) was sampled by torch.profiler "
                         f"windows: it lies inside its forward and backward, where the job waits for it, and {where}.")
        frames = {}
        for run_id, f in side.steps.items():
            if "comm_exposed_s" in parts and (within or "comm_exposed_s" not in f):
                f = f.assign(comm_exposed_s=0.0)
            typical = f["mean_rank_step_s"] if "mean_rank_step_s" in f else f["step_time_s"]
            f = f.assign(other_s=typical - f[parts].sum(axis=1))
            frames[run_id] = f.assign(slowest_wait_s=f["step_time_s"] - typical) if "mean_rank_step_s" in f else f
        partitioned.append(replace(side, steps=frames))
        over = -float(np.mean([f["other_s"].mean() for f in frames.values()]))
        if over > ROUNDING_S * (len(parts) + 1):
            overlapping.append(f"The {name}'s timed phases add up to {over:.4f} s more than a typical rank's step: "
                               "some of them overlap, and its other time is negative.")
    return parts, overlaps, tuple(partitioned), notes + overlapping


def _compare_steps(baseline: Side, candidate: Side, min_effect: float, draws: int, seed: int,
                   run_cv: float) -> Comparison:
    parts, overlaps, sides, partition_notes = step_partition(baseline, candidate)
    unit = next(iter(_common(sides, RATES)), None)
    slices = [*parts, *_common(sides, ("other_s", "slowest_wait_s"))]
    rank_sets = {tuple(c for c in f if c.startswith("rank_")) for s in sides for f in s.steps.values()}
    ranks = list(next(iter(rank_sets))) if len(rank_sets) == 1 else []
    est = [estimate_steps(s, unit, slices + overlaps + ranks, draws, seed + i) for i, s in enumerate(sides)]
    single = all(e.runs == 1 for e in est)
    notes = [("One run per side: the intervals cover step-to-step noise within each run (circular block bootstrap) "
              "and a run-to-run variation that one run cannot show (below); record repeats (trainperf bench "
              "--repeats) to measure it.") if single else
             (f"{est[0].runs} baseline and {est[1].runs} candidate run(s): the intervals resample runs, then blocks "
              "of steps within runs (hierarchical block bootstrap), so run-to-run variance is included.")]
    diff, note = sides_difference(est, run_cv, slices + overlaps + ranks)
    notes += [note, *partition_notes] if note else partition_notes
    if len(rank_sets) > 1:
        notes.append("The runs have different ranks: no per-rank comparison.")
    notes += [f"{s.label}: {s.dropped_steps} step(s) left out because not every rank recorded them."
              for s in sides if s.dropped_steps]
    shares = [[e.slowest_share.get(c, math.nan) for c in ranks] for e in est]
    if (top := often_slowest(np.array(shares[1]))) is not None:
        notes.append(f"Rank {ranks[top].removeprefix('rank_').removesuffix('_s')} is the slowest in "
                     f"{shares[1][top]:.0%} of the candidate's steps (baseline: {shares[0][top]:.0%}).")
    rank_table = pd.DataFrame() if not ranks else _deltas(est, ranks, min_effect, "rank").assign(
        baseline_slowest=shares[0], candidate_slowest=shares[1])
    steps = pd.concat([f.assign(side=name, run_id=run_id)[["side", "run_id", "step", "step_time_s"]]
                       for name, s in zip(("baseline", "candidate"), sides) for run_id, f in s.steps.items()],
                      ignore_index=True)
    basis = ((f"steps of one run a side, run-to-run CV {run_cv:.0%} assumed" if run_cv > 0 else
              "steps of one run a side only") if single else "steps, " + spread_basis(est, run_cv))
    row = metric_row(METRICS["throughput"], est, diff, min_effect, basis, f"{unit or 'step'}/s")
    return Comparison(baseline.label, candidate.label, unit or "step", min_effect, _sides_table(est, sides, unit),
                      diff, row["verdict"], notes, _deltas(est, ["step_time_s", *slices], min_effect), rank_table,
                      steps, assumed_run_cv=run_cv if single else math.nan, repeats_needed=row["repeats_needed"],
                      overlaps=_deltas(est, overlaps, min_effect), metrics=metric_table([row]))


def _deltas(est: list[Estimate], columns: Sequence[str], min_effect: float, key: str = "phase") -> pd.DataFrame:
    """Per column of ``columns`` (s per step): its name (``key``: no ``rank_``, no ``_s``), :data:`DELTA_COLUMNS`."""
    base_step = est[0].means["step_time_s"]
    rows = []
    for column in columns:
        (a, se_a), (b, se_b) = ((e.means[column], e.errors[column]) for e in est)
        dof = welch_dof(se_a, est[0].dof, se_b, est[1].dof)
        half = t_quantile(dof) * math.hypot(se_a, se_b) if math.isfinite(dof) else math.nan
        delta = b - a
        rows.append({key: column.removeprefix("rank_").removesuffix("_s"), "baseline_s": a, "candidate_s": b,
                     "delta_s": delta, "low_s": delta - half, "high_s": delta + half, "delta_pct": delta / base_step,
                     "relative_change": delta / a if a > 0 else math.nan,
                     "moved": bool(abs(delta) > half and abs(delta) >= min_effect * base_step)})
    return pd.DataFrame(rows, columns=[key, *DELTA_COLUMNS])


def _sides_table(est: list[Estimate], sides: tuple[Side, ...], unit: str | None) -> pd.DataFrame:
    """One row per side (see :class:`Comparison`); a side's ``work_per_step`` is the mean over its runs of the
    ``unit`` of a step: from its steps, else from its runs' ``unit`` and ``steps``; NaN where unknown."""
    rows = []
    for name, e, side in zip(("baseline", "candidate"), est, sides):
        if side.steps and unit:
            work = float(np.mean([f[unit].mean() for f in side.steps.values()]))
        elif unit and {unit, "steps"} <= set(side.runs.columns):
            work = float((side.runs[unit] / side.runs["steps"]).astype(float).mean())
        else:
            work = math.nan
        low, high = e.interval()
        rows.append({"side": name, "runs": e.runs, "steps": e.steps, "throughput": e.throughput,
                     "low": low, "high": high, "work_per_step": work})
    return pd.DataFrame(rows)


def start_load(baseline: Side, candidate: Side) -> tuple[pd.DataFrame, list[str]]:
    """Each run's machine at its start (the ``load`` of a :class:`Comparison`) from the runs columns
    ``extra_load_average_1min``, ``extra_cpu_cores`` and ``oversubscribed``; and a warning for each side with a loaded
    run (a 1-minute load average above its cores, or oversubscribed)."""
    rows, warned = [], []
    for name, side in (("baseline", baseline), ("candidate", candidate)):
        missing = pd.Series(pd.NA, index=side.runs.index, dtype="object")
        load, cores = (pd.to_numeric(side.runs.get(c, missing)) for c in ("extra_load_average_1min", "extra_cpu_cores"))
        over = pd.Series([bool(o) if pd.notna(o) else None for o in side.runs.get("oversubscribed", missing)],
                         index=side.runs.index, dtype="object")
        busy = (load > cores).fillna(False).astype(bool)
        table = pd.DataFrame({"side": name, "run_id": side.runs["run_id"].astype(str), "load_average_1min": load,
                              "cpu_cores": cores, "oversubscribed": over, "loaded": busy | over.eq(True)})
        reasons = [f"{r.run_id} (load average {r.load_average_1min:.2f} on {r.cpu_cores:.0f} cores)" if b else
                   f"{r.run_id} (more busy threads than cores)" for b, r in zip(busy, table.itertuples()) if r.loaded]
        if reasons:
            warned.append(f"The {name} ran on a loaded machine: {'; '.join(reasons)}. Other work competed for the "
                          "CPU, so its figures measure that contention too (the 1-minute load average at the start "
                          "also counts work that ended in the minute before).")
        rows += table.to_dict("records")
    return pd.DataFrame(rows, columns=list(table.columns)), warned


def same_runs(baseline: Side, candidate: Side) -> list[str]:
    """A warning when a run is on both sides (``compare X X``)."""
    shared = sorted(set(baseline.runs["run_id"].astype(str)) & set(candidate.runs["run_id"].astype(str)))
    named = ", ".join(shared[:3]) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
    return [f"The same run(s) on both sides ({named}): a run compared with itself shows no change "
            "by construction; give the baseline and the candidate their own runs."] if shared else []


def _compare_runs(baseline: Side, candidate: Side, min_effect: float) -> Comparison:
    sides = (baseline, candidate)
    rate = next((r for r in RATES.values() if all(r in s.runs and s.runs[r].notna().all() for s in sides)), None)
    if rate is None:
        raise DataError("neither tokens/s nor samples/s is known for every run of both sides",
                        path=f"{baseline.label} vs {candidate.label}")
    est = [estimate_runs(s, rate) for s in sides]
    notes = ["No per-step data on both sides: only the run-to-run variance across repeats is available; "
             "step-to-step correlation and phases are not used."]
    qualifier = ""
    if any(e.runs > 1 for e in est):
        diff, note = sides_difference(est)
        notes.append(note or "Intervals: t intervals on the log scale from the spread of the repeats.")
        basis = spread_basis(est, 0.0)
    else:
        diff = Difference(est[1].throughput / est[0].throughput - 1.0)
        notes.append("Each side has a single runs-table row and no steps: no interval can be computed.")
        qualifier, basis = " (no repeats or steps)", "one runs-table row a side: no interval"
    unit = rate.removesuffix("_per_s")
    row = metric_row(METRICS["throughput"], est, diff, min_effect, basis, f"{unit}/s")
    return Comparison(baseline.label, candidate.label, unit, min_effect, _sides_table(est, sides, unit), diff,
                      row["verdict"], notes, qualifier=qualifier, repeats_needed=row["repeats_needed"],
                      metrics=metric_table([row]))
