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
the runs table is known.

The verdict is ``faster`` / ``slower`` only when the interval of the relative
difference in throughput excludes 0 and the estimate is at least the minimum
effect (default :data:`trainperf.stats.MIN_EFFECT`, 2 %); otherwise ``no
detectable difference``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.aggregate import job_steps
from trainperf.derived import derive
from trainperf.errors import DataError
from trainperf.estimates import CONFIG_KEY, RATES, Estimate, Side, estimate_runs, estimate_steps
from trainperf.loading import holds_steps, load_runs, load_summaries, rank_step_times, summarized_runs
from trainperf.stats import (DRAWS, MIN_EFFECT, RUN_CV, SAME, SLOWER, Difference, log_interval, relative_difference,
                             t_quantile, verdict, welch_dof, with_run_to_run)

PLOTTED_STEPS = 1_000
"""Steps of a run a chart draws at most (:func:`plotted_steps`)."""
PHASES = ("data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "comm_s", "comm_exposed_s")
"""Phase columns compared, where both sides timed them in every measured step."""


def read_side(*paths: str | Path, label: str | None = None, warmup: int = 0, cache: bool = False) -> Side:
    """Read one side. Steps are used where the inputs hold them (run folders,
    steps tables), after each run's warm-up and ``warmup`` more steps.
    DataError when the runs are not repeats of one configuration. With
    ``cache``, runs come from :mod:`trainperf.input_cache` (``load_runs``)."""
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
    _check_repeats(runs, label or ", ".join(map(str, paths)))
    side = Side(label or ", ".join(map(str, paths)), runs)
    if with_steps:
        side.steps, side.dropped_steps = job_steps(load_summaries(*with_steps), warmup,
                                                   rank_steps=rank_step_times(*with_steps))
    return side


def _check_repeats(runs: pd.DataFrame, label: str) -> None:
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
    ``low``, ``high``: ``unit`` per second, 95 %); ``difference``: candidate /
    baseline − 1 with its interval (fractions); ``phases`` and ``ranks``: one
    row per phase / rank with ``baseline_s``, ``candidate_s`` (seconds per
    step), ``delta_s`` with ``low_s`` / ``high_s``, ``delta_pct`` (of the
    baseline step time, fraction) and ``moved``; ``step_times``: tidy per-step
    job step times of both sides (``side``, ``run_id``, ``step``,
    ``step_time_s``); ``notes``: what the intervals cover, sentences.
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

    @property
    def exit_code(self) -> int:
        """0: no regression; 1: the candidate is significantly slower."""
        return 1 if self.verdict == SLOWER else 0

    def headline(self) -> str:
        """The verdict and the figure, one line."""
        d = self.difference
        figure = f"candidate {self.unit}/s {d.estimate:+.1%} vs baseline"
        if math.isfinite(d.low):
            assumed = (f"; run-to-run CV {self.assumed_run_cv:.0%} assumed" if self.assumed_run_cv > 0 else
                       "; steps only" if self.assumed_run_cv == 0 else "")
            figure += f" (95 % interval {d.low:+.1%} to {d.high:+.1%}; minimum effect {self.min_effect:.0%}{assumed})"
        else:
            figure += " (no interval)"
        return f"{self.verdict}{self.qualifier}: {figure}"


def compare(baseline: Side, candidate: Side, min_effect: float = MIN_EFFECT, draws: int = DRAWS,
            seed: int = 0, run_cv: float = RUN_CV) -> Comparison:
    """Compare two sides (see the module docstring). ``run_cv``: the run-to-run
    coefficient of variation (fraction) given to a side of one run with steps
    when neither side has repeats to measure it. Deterministic for a ``seed``."""
    if min_effect < 0:
        raise DataError(f"min_effect must be a fraction >= 0, got {min_effect}")
    if not 0 <= run_cv < 1:
        raise DataError(f"run_cv must be a fraction in [0, 1), got {run_cv}")
    sides = (baseline, candidate)
    if all(s.steps for s in sides):
        return _compare_steps(baseline, candidate, min_effect, draws, seed, run_cv)
    return _compare_runs(baseline, candidate, min_effect)


def _common_unit(sides: tuple[Side, Side]) -> str | None:
    for unit in RATES:
        if all(unit in f for s in sides for f in s.steps.values()):
            return unit
    return None


def _common(sides: tuple[Side, Side], names: tuple[str, ...] | list[str]) -> list[str]:
    return [c for c in names if all(c in f for s in sides for f in s.steps.values())]


def _compare_steps(baseline: Side, candidate: Side, min_effect: float, draws: int, seed: int,
                   run_cv: float) -> Comparison:
    sides = (baseline, candidate)
    unit = _common_unit(sides)
    phases = _common(sides, PHASES)
    rank_sets = {tuple(c for c in f if c.startswith("rank_")) for s in sides for f in s.steps.values()}
    ranks = list(next(iter(rank_sets))) if len(rank_sets) == 1 else []
    columns = phases + ranks
    est = [estimate_steps(s, unit, columns, draws, seed + i) for i, s in enumerate(sides)]
    notes = [_scope_steps(est)]
    diff, note = _difference(est, run_cv, columns)
    notes += [note] if note else []
    if len(rank_sets) > 1:
        notes.append("The runs have different ranks: no per-rank comparison.")
    for s in sides:
        if s.dropped_steps:
            notes.append(f"{s.label}: {s.dropped_steps} step(s) left out because not every rank recorded them.")
    base_step = est[0].means["step_time_s"]
    phase_rows = [_delta_row(c.removesuffix("_s"), c, est, base_step, min_effect) for c in ["step_time_s", *phases]]
    rank_rows = [_delta_row(c.removeprefix("rank_").removesuffix("_s"), c, est, base_step, min_effect)
                 | {"baseline_slowest": est[0].slowest_share.get(c, math.nan),
                    "candidate_slowest": est[1].slowest_share.get(c, math.nan)} for c in ranks]
    notes += _stragglers(rank_rows)
    steps = pd.concat([f.assign(side=name, run_id=run_id)[["side", "run_id", "step", "step_time_s"]]
                       for name, s in zip(("baseline", "candidate"), sides) for run_id, f in s.steps.items()],
                      ignore_index=True)
    return Comparison(baseline.label, candidate.label, unit or "step", min_effect, _sides_table(est),
                      diff, verdict(diff, min_effect), pd.DataFrame(phase_rows).rename(columns={"name": "phase"}),
                      pd.DataFrame(rank_rows).rename(columns={"name": "rank"}), steps, notes,
                      assumed_run_cv=run_cv if all(e.runs == 1 for e in est) else math.nan)


def _delta_row(name: str, column: str, est: list[Estimate], base_step: float, min_effect: float) -> dict:
    a, b = est[0].means[column], est[1].means[column]
    se_a, se_b = est[0].errors[column], est[1].errors[column]
    dof = welch_dof(se_a, est[0].dof, se_b, est[1].dof)
    half = t_quantile(dof) * math.hypot(se_a, se_b) if math.isfinite(dof) else math.nan
    delta = b - a
    moved = bool(abs(delta) > half and abs(delta) >= min_effect * base_step)
    return {"name": name, "baseline_s": a, "candidate_s": b, "delta_s": delta, "low_s": delta - half,
            "high_s": delta + half, "delta_pct": delta / base_step, "moved": moved}


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


def _sides_table(est: list[Estimate]) -> pd.DataFrame:
    rows = []
    for name, e in zip(("baseline", "candidate"), est):
        low, high = e.interval()
        rows.append({"side": name, "runs": e.runs, "steps": e.steps, "throughput": e.throughput,
                     "low": low, "high": high})
    return pd.DataFrame(rows)


def _difference(est: list[Estimate], run_cv: float = RUN_CV, columns: list[str] = ()) -> tuple[Difference, str]:
    """Candidate / baseline − 1 with its interval, and a note on what covers
    the run-to-run variance of a side with a single run (its estimate widened
    in place, throughput and ``columns``):

    * the other side has repeats: the single run is taken to vary from run to
      run as much as one of them (SE × √runs), on the repeats' degrees of
      freedom (one spread estimate: no Welch);
    * both sides have one run with steps: each gets ``run_cv`` on top of its
      steps' noise (:func:`trainperf.stats.with_run_to_run`)."""
    if est[0].runs > 1 and est[1].runs > 1:
        return _relative(est), ""
    if est[0].runs == 1 and est[1].runs == 1:
        for e in est:
            e.se_log, e.dof = with_run_to_run(e.se_log, e.dof, run_cv)
            for c in ("step_time_s", *columns):
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
    for c in (("step_time_s", *columns) if single.steps else ()):
        single.errors[c] = max(single.errors[c], spread * single.means[c])
    ratio = est[1].throughput / est[0].throughput
    low, high = log_interval(ratio, math.hypot(est[0].se_log, est[1].se_log), repeated.dof)
    note = (f"One side has a single run: it is taken to vary from run to run as much as the other side's "
            f"{repeated.runs} repeats do.")
    return Difference(ratio - 1.0, low - 1.0, high - 1.0, repeated.dof), note


def _relative(est: list[Estimate]) -> Difference:
    return relative_difference(est[0].throughput, est[0].se_log, est[0].dof,
                               est[1].throughput, est[1].se_log, est[1].dof)


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
        diff, note = _difference(est)
        notes.append(note or "Intervals: t intervals on the log scale from the spread of the repeats.")
        call = verdict(diff, min_effect)
    else:
        ratio = est[1].throughput / est[0].throughput - 1.0
        diff = Difference(ratio, math.nan, math.nan, math.nan)
        notes.append("Each side has a single runs-table row and no steps: no interval can be computed.")
        call, qualifier = SAME, " (no repeats or steps)"
    empty = pd.DataFrame()
    return Comparison(baseline.label, candidate.label, rate.removesuffix("_per_s"), min_effect, _sides_table(est),
                      diff, call, empty, empty, empty, notes, qualifier)
