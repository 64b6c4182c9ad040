"""Did a change make training faster? A baseline against a candidate, with intervals.

Each side is one configuration: one run, or several runs that are repeats of
it (folders of run folders, runs tables, logs — what ``load_runs`` and
``load_steps`` read). With per-step data, the measured steps (warm-up
excluded) give each run's job step time per step — the slowest rank's, as a
job waits for it — and its tokens (else samples) per step; a run's throughput
is its work over its time (each side's estimate: :mod:`trainperf.estimates`).
Intervals come from :mod:`trainperf.stats`: a block bootstrap within runs,
hierarchical over repeats; a side of one run gets the run-to-run variance of
the other side's repeats, else a stated coefficient of variation
(:data:`trainperf.stats.RUN_CV`). Without steps, only the spread of repeats in
the runs table is known. Sides that do different work per step are judged on
tokens/s (a note says so).

The verdict is ``faster`` / ``slower`` only when the interval of the relative
difference in throughput excludes 0 and the estimate is at least the minimum
effect (default :data:`trainperf.stats.MIN_EFFECT`, 2 %); ``no detectable
difference`` when the interval lies within ± the minimum effect; otherwise
``inconclusive``, with the runs a side that would detect the minimum effect.
Peak memory, energy per token and goodput are judged the same way, each in its
direction (:mod:`trainperf.compare_metrics`). The step's phases are compared
as slices that add up to the step time (:func:`step_partition`), and each
run's machine load at its start is shown (:func:`start_load`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.aggregate import job_steps
from trainperf.compare_metrics import METRICS, NOT_MEASURED, judge, metric_row, metric_table, spread_basis
from trainperf.derived import derive
from trainperf.errors import DataError
from trainperf.estimates import CONFIG_KEY, RATES, Estimate, Side, estimate_runs, estimate_steps, sides_difference
from trainperf.reading.loading import holds_steps, load_runs, load_summaries, rank_step_times
from trainperf.reading.run_folders import summarized_runs
from trainperf.stats import (DRAWS, INCONCLUSIVE, MIN_EFFECT, RUN_CV, Difference, t_quantile, verdict,
                             welch_dof)

STEPS_BASIS = ("Throughput here is the work of a step over the job's step time: the steps' own time, without the "
               "work between steps (evaluation, checkpoints). trainperf summarize's tokens_per_s divides by the elapsed "
               "time with that work inside: it is given as elapsed_throughput.")
"""The note of a comparison from steps: which throughput it judges, and where the other one is."""
SHOWN_ONLY = "shown, not judged"
"""The end of the ``basis`` of a ``metrics`` row given for information: the exit code does not look at it."""
PLOTTED_STEPS = 1_000
"""Steps of a run a chart draws at most (:func:`plotted_steps`)."""
PARTS = ("data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "compute_s", "wait_outside_s",
         "validation_s")
"""Phase columns that are slices of a step, in step order (``compute_s`` only where no compute phase is split
out; ``wait_outside_s``: the wait for another rank's work outside the steps, which communication does not count);
with ``comm_exposed_s`` where it was taken out of backward (:func:`exposed_inside`), the other and the
wait for the slowest rank, they add up to the step."""
OVERLAPPING = ("comm_s", "comm_exposed_s")
"""Communication columns, compared beside the partition of the step where they overlap its phases."""
ROUNDING_S = 1e-6
"""Phases of a step are written to the microsecond: their sum may miss the step by this much per phase (s)."""
def read_side(*paths: str | Path, label: str | None = None, warmup: int = 0, cache: bool = False) -> Side:
    """Read one side. Steps are used where the inputs hold them (run folders,
    steps tables), after each run's warm-up and ``warmup`` more steps.
    DataError when the runs are not repeats of one configuration. With
    ``cache``, runs come from :mod:`trainperf.reading.input_cache` (``load_runs``)."""
    if not paths:
        raise DataError("no input given for a side of the comparison")
    paths = tuple(Path(p) for p in paths)
    for path in paths:
        if not path.exists():
            raise DataError("no such file or folder", path=path)
    with_steps = [p for p in paths if holds_steps(p)]
    tables = [p for p in with_steps if p.is_file()]  # steps tables: their runs from their summaries
    others = [p for p in paths if p not in tables]
    frames = (([load_runs(*others, cache=cache)] if others else [])
              + ([summarized_runs(load_summaries(*tables))] if tables else []))
    runs = derive(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    check_repeats(runs, label or ", ".join(map(str, paths)))
    side = Side(label or ", ".join(map(str, paths)), runs)
    if with_steps:
        side.steps, side.dropped_steps = job_steps(load_summaries(*with_steps), warmup,
                                                   rank_steps=rank_step_times(*with_steps))
    return side


def check_repeats(runs: pd.DataFrame, label: str) -> None:
    """DataError naming ``label`` when ``runs`` differ in a configuration column (:data:`CONFIG_KEY`)."""
    for column in CONFIG_KEY:
        if column in runs:
            values = runs[column].dropna().astype(str).unique()
            if len(values) > 1:
                raise DataError(f"the runs of one side must be repeats of one configuration, but they differ in "
                                f"{column!r} ({', '.join(sorted(values))}); compare one configuration per side",
                                path=label)


def plotted_steps(step_times: pd.DataFrame, limit: int = PLOTTED_STEPS) -> tuple[pd.DataFrame, str]:
    """The rows of a :class:`Comparison`'s ``step_times`` that a chart draws: every step of a run of at most
    ``limit`` measured steps, else ``limit`` steps evenly spaced along it; and a sentence naming the runs
    drawn in part ("" when none is)."""
    parts, thinned = [], []
    for run_id, steps in step_times.groupby("run_id", sort=False):
        if len(steps) > limit:
            thinned.append(f"{run_id} ({limit:,} of {len(steps):,} steps)")
            steps = steps.iloc[np.linspace(0, len(steps) - 1, limit).round().astype(int)]
        parts.append(steps)
    shown = pd.concat(parts, ignore_index=True) if parts else step_times
    if not thinned:
        return shown, ""
    return shown, (f"The charts draw {limit:,} steps of a longer run, evenly spaced along it: {', '.join(thinned)}. "
                   "The throughput above uses every step.")


@dataclass
class Comparison:
    """A baseline against a candidate.

    ``sides``: one row per side (``side``, ``runs``, ``steps``, ``throughput``,
    ``low``, ``high``: ``unit`` per second, 95 %; ``work_per_step``: ``unit``
    per step); ``difference``: candidate / baseline − 1 of throughput with its
    interval (fractions), ``verdict`` its verdict and ``repeats_needed`` the
    runs per side that would detect ``min_effect`` (None where unknown);
    ``phases``: the step time and the slices that add up to it (phases, the
    other time, the wait for the slowest rank), ``overlaps``: communication
    that overlaps those slices, and ``ranks``: one row per phase / rank with
    ``baseline_s``, ``candidate_s`` (seconds per step), ``delta_s`` with
    ``low_s`` / ``high_s``, ``delta_pct`` (of the baseline step time,
    fraction), ``relative_change`` (of its own baseline time, fraction) and
    ``moved``; ``step_times``: tidy per-step job step times of both sides
    (``side``, ``run_id``, ``step``, ``step_time_s``); ``load``: each run's
    machine load at its start (:func:`start_load`); ``metrics``: each judged
    metric (:data:`trainperf.compare_metrics.METRIC_COLUMNS`); ``notes``:
    what the intervals cover, ``warnings``: what casts doubt on the figures,
    sentences.
    """

    baseline: str
    candidate: str
    unit: str
    min_effect: float
    sides: pd.DataFrame
    difference: Difference
    verdict: str
    phases: pd.DataFrame
    ranks: pd.DataFrame
    step_times: pd.DataFrame
    notes: list[str]
    qualifier: str = ""
    assumed_run_cv: float = math.nan
    """The run-to-run coefficient of variation given to both sides (one run each), NaN when none was assumed."""
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
        """The throughput's verdict and its figure, one line; an inconclusive one
        ends with the runs a side that would detect the minimum effect."""
        d = self.difference
        effect = f"{self.min_effect * 100:g}%"
        figure = f"candidate {self.unit}/s {d.estimate:+.1%} vs baseline"
        if math.isfinite(d.low):
            assumed = (f"; run-to-run CV {self.assumed_run_cv:.0%} assumed" if self.assumed_run_cv > 0 else
                       "; steps only" if self.assumed_run_cv == 0 else "")
            figure += f" (95 % interval {d.low:+.1%} to {d.high:+.1%}; minimum effect {effect}{assumed})"
        else:
            figure += " (no interval)"
        if self.verdict == INCONCLUSIVE:
            figure += (f"; about {self.repeats_needed:,} runs a side would detect {effect} (80 % power)"
                       if self.repeats_needed else "; record repeats to measure the noise")
        return f"{self.verdict}{self.qualifier}: {figure}"


def compare(baseline: Side, candidate: Side, min_effect: float = MIN_EFFECT, draws: int = DRAWS,
            seed: int = 0, run_cv: float = RUN_CV, metrics: Sequence[str] = ("throughput",),
            min_effects: Mapping[str, float] | None = None, run_cvs: Mapping[str, float] | None = None) -> Comparison:
    """Compare two sides (see the module docstring). ``run_cv``: the run-to-run
    coefficient of variation (fraction) given to a side of one run with steps
    when neither side has repeats to measure it. ``metrics``: the metrics judged
    (:data:`trainperf.compare_metrics.METRICS`; the exit code looks at these),
    ``min_effects`` and ``run_cvs`` their minimum effects and assumed run-to-run
    variation where not the defaults (throughput's are ``min_effect`` and
    ``run_cv``). Deterministic for a ``seed``."""
    min_effects, run_cvs = dict(min_effects or {}), dict(run_cvs or {})
    unknown = [m for m in (*metrics, *min_effects, *run_cvs) if m not in METRICS]
    if unknown:
        raise DataError(f"unknown metric {unknown[0]!r}: one of {', '.join(METRICS)}")
    min_effect, run_cv = min_effects.pop("throughput", min_effect), run_cvs.pop("throughput", run_cv)
    for name, value in (("min_effect", min_effect), *((f"min_effect of {m}", v) for m, v in min_effects.items())):
        if not value >= 0:
            raise DataError(f"{name} must be a fraction >= 0, got {value}")
    for name, value in (("run_cv", run_cv), *((f"run_cv of {m}", v) for m, v in run_cvs.items())):
        if not 0 <= value < 1:
            raise DataError(f"{name} must be a fraction in [0, 1), got {value}")
    sides = (baseline, candidate)
    if all(s.steps for s in sides):
        result = _compare_steps(baseline, candidate, min_effect, draws, seed, run_cv)
    else:
        result = _compare_runs(baseline, candidate, min_effect)
    result.load, loaded = start_load(baseline, candidate)
    result.warnings = same_runs(baseline, candidate) + loaded
    result.notes += _work_note(result)
    rows = [result.metrics.iloc[0].to_dict() if name == "throughput" else
            judge(METRICS[name], baseline, candidate, min_effects.get(name), run_cvs.get(name))
            for name in dict.fromkeys(metrics)]
    if all(s.steps for s in sides):
        result.notes.append(STEPS_BASIS)
        elapsed = judge(METRICS["elapsed_throughput"], baseline, candidate, min_effects.get("elapsed_throughput"),
                        run_cvs.get("elapsed_throughput"))
        if "elapsed_throughput" not in metrics and elapsed["verdict"] != NOT_MEASURED:
            rows.append({**elapsed, "regressed": False, "basis": f"{elapsed['basis']}; {SHOWN_ONLY}"})
    result.metrics = metric_table(rows)
    return result


def _common_unit(sides: tuple[Side, Side]) -> str | None:
    for unit in RATES:
        if all(unit in f for s in sides for f in s.steps.values()):
            return unit
    return None


def _common(sides: tuple[Side, Side], names: Sequence[str]) -> list[str]:
    return [c for c in names if all(c in f for s in sides for f in s.steps.values())]


def exposed_inside(side: Side) -> bool:
    """Whether the side's exposed communication lies inside its forward and
    backward phases: sampled by ``torch.profiler`` windows (the manifest's
    ``comm_measurement``, ``extra_comm_measurement`` in the runs table), as the
    profiler does under FSDP. DDP's all-reduces, timed by its communication
    hook, have their exposed part taken out of backward (a slice of its own)."""
    return bool(exposed_within_phases(side.runs).any())


def exposed_within_phases(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether its exposed communication (``comm_exposed_s``) lies inside its forward and backward
    phases rather than beside them (:func:`exposed_inside`: ``extra_comm_measurement`` given)."""
    column = "extra_comm_measurement"
    return runs[column].notna() if column in runs else pd.Series(False, index=runs.index)


def step_partition(sides: tuple[Side, Side]) -> tuple[list[str], list[str]]:
    """The phase columns both sides timed that are slices of a step, in step
    order (:data:`PARTS`, and ``comm_exposed_s`` where a side took it out of
    backward, :func:`exposed_inside`: the other side's slice is then 0), and
    the communication columns both timed that overlap them (``comm_s``, and
    ``comm_exposed_s`` where it is no slice)."""
    parts = _common(sides, PARTS)
    if any(c in parts for c in ("forward_s", "loss_s", "backward_s", "optimizer_s")):
        parts = [c for c in parts if c != "compute_s"]
    if any(_common((s, s), ("comm_exposed_s",)) and not exposed_inside(s) for s in sides):
        parts.insert(parts.index("validation_s") if "validation_s" in parts else len(parts), "comm_exposed_s")
    return parts, [c for c in _common(sides, OVERLAPPING) if c not in parts]


def _partitioned(side: Side, parts: list[str]) -> Side:
    """The side with, per step, ``other_s`` (a typical rank's time outside
    ``parts``: its mean interval minus the parts) and ``slowest_wait_s`` (the
    job's step minus that mean), so that the parts, the other and the wait add
    up to ``step_time_s``; without the mean over ranks, the other is the job's
    step minus the parts and the wait is not known. Where the side's exposed
    communication lies inside forward and backward, or it timed none, its
    slice of its own (``comm_exposed_s`` among ``parts``) is 0."""
    frames = {}
    for run_id, f in side.steps.items():
        if "comm_exposed_s" in parts and (exposed_inside(side) or "comm_exposed_s" not in f):
            f = f.assign(comm_exposed_s=0.0)
        typical = f["mean_rank_step_s"] if "mean_rank_step_s" in f else f["step_time_s"]
        f = f.assign(other_s=typical - f[parts].sum(axis=1))
        frames[run_id] = f.assign(slowest_wait_s=f["step_time_s"] - typical) if "mean_rank_step_s" in f else f
    return replace(side, steps=frames)


def _compare_steps(baseline: Side, candidate: Side, min_effect: float, draws: int, seed: int,
                   run_cv: float) -> Comparison:
    unit = _common_unit((baseline, candidate))
    parts, overlaps = step_partition((baseline, candidate))
    sides = tuple(_partitioned(s, parts) for s in (baseline, candidate))
    slices = [*parts, *_common(sides, ("other_s", "slowest_wait_s"))]
    rank_sets = {tuple(c for c in f if c.startswith("rank_")) for s in sides for f in s.steps.values()}
    ranks = list(next(iter(rank_sets))) if len(rank_sets) == 1 else []
    columns = slices + overlaps + ranks
    est = [estimate_steps(s, unit, columns, draws, seed + i) for i, s in enumerate(sides)]
    notes = [_scope_steps(est)]
    diff, note = sides_difference(est, run_cv, columns)
    notes += [note] if note else []
    notes += _partition_notes((baseline, candidate), sides, parts, overlaps)
    if len(rank_sets) > 1:
        notes.append("The runs have different ranks: no per-rank comparison.")
    for s in sides:
        if s.dropped_steps:
            notes.append(f"{s.label}: {s.dropped_steps} step(s) left out because not every rank recorded them.")
    base_step = est[0].means["step_time_s"]
    phase_rows = [_delta_row(c.removesuffix("_s"), c, est, base_step, min_effect) for c in ["step_time_s", *slices]]
    overlap_rows = [_delta_row(c.removesuffix("_s"), c, est, base_step, min_effect) for c in overlaps]
    rank_rows = [_delta_row(c.removeprefix("rank_").removesuffix("_s"), c, est, base_step, min_effect)
                 | {"baseline_slowest": est[0].slowest_share.get(c, math.nan),
                    "candidate_slowest": est[1].slowest_share.get(c, math.nan)} for c in ranks]
    notes += _stragglers(rank_rows)
    steps = pd.concat([f.assign(side=name, run_id=run_id)[["side", "run_id", "step", "step_time_s"]]
                       for name, s in zip(("baseline", "candidate"), sides) for run_id, f in s.steps.items()],
                      ignore_index=True)
    call = verdict(diff, min_effect)
    row = metric_row(METRICS["throughput"], est, diff, min_effect, _steps_basis(est, run_cv), f"{unit or 'step'}/s")
    return Comparison(baseline.label, candidate.label, unit or "step", min_effect, _sides_table(est, sides, unit),
                      diff, call, _phase_table(phase_rows), pd.DataFrame(rank_rows).rename(columns={"name": "rank"}),
                      steps, notes, assumed_run_cv=run_cv if all(e.runs == 1 for e in est) else math.nan,
                      repeats_needed=row["repeats_needed"], overlaps=_phase_table(overlap_rows),
                      metrics=metric_table([row]))


def _phase_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(DELTA_COLUMNS)).rename(columns={"name": "phase"})


DELTA_COLUMNS = ("name", "baseline_s", "candidate_s", "delta_s", "low_s", "high_s", "delta_pct", "relative_change",
                 "moved")


def _delta_row(name: str, column: str, est: list[Estimate], base_step: float, min_effect: float) -> dict:
    a, b = est[0].means[column], est[1].means[column]
    se_a, se_b = est[0].errors[column], est[1].errors[column]
    dof = welch_dof(se_a, est[0].dof, se_b, est[1].dof)
    half = t_quantile(dof) * math.hypot(se_a, se_b) if math.isfinite(dof) else math.nan
    delta = b - a
    moved = bool(abs(delta) > half and abs(delta) >= min_effect * base_step)
    return {"name": name, "baseline_s": a, "candidate_s": b, "delta_s": delta, "low_s": delta - half,
            "high_s": delta + half, "delta_pct": delta / base_step,
            "relative_change": delta / a if a > 0 else math.nan, "moved": moved}


def _partition_notes(sides: tuple[Side, Side], partitioned: tuple[Side, ...], parts: list[str],
                     overlaps: list[str]) -> list[str]:
    """What the phase table adds up to, where exposed communication is counted, and a side whose phases
    overlap (they add up to more than its step; ``partitioned``: the sides with their other time)."""
    notes = []
    if parts:
        notes.append("Phases: the slices of a step below (each a mean over ranks), the other time of a typical "
                     "rank and its wait for the slowest add up to the job's step time." +
                     (f" Communication ({', '.join(c.removesuffix('_s') for c in overlaps)}) overlaps them and is "
                      "shown apart." if overlaps else ""))
    for name, side in zip(("baseline", "candidate"), sides):
        if "comm_exposed_s" in parts and not _common((side, side), ("comm_exposed_s",)):
            notes.append(f"The {name} did not time its communication: what it waited for is inside its other "
                         "phases, and its slice of exposed communication is 0.")
        if not exposed_inside(side) or not _common((side, side), ("comm_exposed_s",)):
            continue
        exposed = float(np.mean([f["comm_exposed_s"].mean() for f in side.steps.values()]))
        where = ("its slice of its own is 0" if "comm_exposed_s" in parts else
                 "it is shown beside the phases, not added to them")
        notes.append(f"The {name}'s exposed communication ({exposed:.4f} s a step) was sampled by torch.profiler "
                     f"windows: it lies inside its forward and backward, where the job waits for it, and {where}.")
    tolerance = ROUNDING_S * (len(parts) + 1)
    for name, side in zip(("baseline", "candidate"), partitioned):
        over = -float(np.mean([f["other_s"].mean() for f in side.steps.values()]))
        if over > tolerance:
            notes.append(f"The {name}'s timed phases add up to {over:.4f} s more than a typical rank's step: some "
                         "of them overlap, and its other time is negative.")
    return notes


def _steps_basis(est: list[Estimate], run_cv: float) -> str:
    if all(e.runs == 1 for e in est):
        return (f"steps of one run a side, run-to-run CV {run_cv:.0%} assumed" if run_cv > 0 else
                "steps of one run a side only")
    return "steps, " + spread_basis(est, run_cv)


def _stragglers(rank_rows: list[dict]) -> list[str]:
    if len(rank_rows) < 2:
        return []
    top = max(rank_rows, key=lambda r: r["candidate_slowest"])
    note = (f"Rank {top['name']} is the slowest in {top['candidate_slowest']:.0%} of the "
            f"candidate's steps (baseline: {top['baseline_slowest']:.0%}).")
    return [note] if top["candidate_slowest"] >= max(0.5, 1.5 / len(rank_rows)) else []


def _scope_steps(est: list[Estimate]) -> str:
    if all(e.runs == 1 for e in est):
        return ("One run per side: the intervals cover step-to-step noise within each run (circular block "
                "bootstrap) and a run-to-run variation that one run cannot show (below); record repeats "
                "(trainperf bench --repeats) to measure it.")
    return (f"{est[0].runs} baseline and {est[1].runs} candidate run(s): the intervals resample runs, then blocks of "
            "steps within runs (hierarchical block bootstrap), so run-to-run variance is included.")


def _sides_table(est: list[Estimate], sides: tuple[Side, Side], unit: str | None) -> pd.DataFrame:
    rows = []
    for name, e, side in zip(("baseline", "candidate"), est, sides):
        low, high = e.interval()
        rows.append({"side": name, "runs": e.runs, "steps": e.steps, "throughput": e.throughput,
                     "low": low, "high": high, "work_per_step": _work_per_step(side, unit)})
    return pd.DataFrame(rows)


def _work_per_step(side: Side, unit: str | None) -> float:
    """Tokens (``unit``) per step of a side, the mean over its runs: from its steps, else from its runs'
    ``unit`` and ``steps``; NaN where unknown."""
    if side.steps and unit:
        return float(np.mean([f[unit].mean() for f in side.steps.values()]))
    if unit and {unit, "steps"} <= set(side.runs.columns):
        return float((side.runs[unit] / side.runs["steps"]).astype(float).mean())
    return math.nan


def _work_note(result: Comparison) -> list[str]:
    work = result.sides["work_per_step"].to_numpy(float)
    if not np.isfinite(work).all() or abs(work[1] / work[0] - 1) < 1e-3:
        return []
    return [f"The sides do different work per step ({work[0]:,.0f} and {work[1]:,.0f} {result.unit} per step): the "
            f"verdict judges {result.unit}/s, not step time; the step and phase times are each side's own steps."]


def start_load(baseline: Side, candidate: Side) -> tuple[pd.DataFrame, list[str]]:
    """Each run's machine at its start (``side``, ``run_id``, ``load_average_1min``: the host's 1-minute load
    average, ``cpu_cores``, ``oversubscribed``, ``loaded``: a load average above the cores, or oversubscribed)
    from the runs columns ``extra_load_average_1min``, ``extra_cpu_cores`` (the manifest's host record, or
    ``trainperf bench``'s) and ``oversubscribed``; and a warning for each side with a loaded run."""
    rows, warned = [], []
    for name, side in (("baseline", baseline), ("candidate", candidate)):
        runs = side.runs
        column = {c: runs[c] if c in runs else pd.Series(pd.NA, index=runs.index, dtype="object")
                  for c in ("extra_load_average_1min", "extra_cpu_cores", "oversubscribed")}
        reasons = []
        for i in range(len(runs)):
            load, cores, over = (pd.to_numeric(column["extra_load_average_1min"]).iloc[i],
                                 pd.to_numeric(column["extra_cpu_cores"]).iloc[i], column["oversubscribed"].iloc[i])
            busy = bool(pd.notna(load) and pd.notna(cores) and load > cores)
            over = bool(over) if pd.notna(over) else None
            rows.append({"side": name, "run_id": str(runs["run_id"].iloc[i]), "load_average_1min": load,
                         "cpu_cores": cores, "oversubscribed": over, "loaded": busy or bool(over)})
            if busy or over:
                why = f"load average {load:.2f} on {cores:.0f} cores" if busy else "more busy threads than cores"
                reasons.append(f"{runs['run_id'].iloc[i]} ({why})")
        if reasons:
            warned.append(f"The {name} ran on a loaded machine: {'; '.join(reasons)}. Other work competed for the "
                          "CPU, so its figures measure that contention too (the 1-minute load average at the start "
                          "also counts work that ended in the minute before).")
    table = pd.DataFrame(rows, columns=["side", "run_id", "load_average_1min", "cpu_cores", "oversubscribed",
                                        "loaded"])
    return table, warned


def same_runs(baseline: Side, candidate: Side) -> list[str]:
    """A warning when a run is on both sides (``compare X X``)."""
    shared = sorted(set(baseline.runs["run_id"].astype(str)) & set(candidate.runs["run_id"].astype(str)))
    if not shared:
        return []
    named = ", ".join(shared[:3]) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
    return [f"The same run(s) on both sides ({named}): a run compared with itself shows no change "
            "by construction; give the baseline and the candidate their own runs."]


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
        ratio = est[1].throughput / est[0].throughput - 1.0
        diff = Difference(ratio, math.nan, math.nan, math.nan)
        notes.append("Each side has a single runs-table row and no steps: no interval can be computed.")
        qualifier, basis = " (no repeats or steps)", "one runs-table row a side: no interval"
    unit = rate.removesuffix("_per_s")
    row = metric_row(METRICS["throughput"], est, diff, min_effect, basis, f"{unit}/s")
    empty = pd.DataFrame()
    return Comparison(baseline.label, candidate.label, unit, min_effect, _sides_table(est, sides, unit),
                      diff, verdict(diff, min_effect), empty, empty, empty, notes, qualifier,
                      repeats_needed=row["repeats_needed"], metrics=metric_table([row]))
