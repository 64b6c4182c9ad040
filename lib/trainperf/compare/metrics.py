"""The figures a comparison judges from each side's runs rows (throughput: from the steps, :mod:`trainperf.compare`),
each in its direction (more memory, more energy per token and less goodput are worse), with its own minimum effect
and assumed run-to-run variation (:data:`METRICS`); one a run lacks is ``not measured``: named, never judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from trainperf.estimates import Estimate, Side, estimate_runs, run_spread, sides_difference
from trainperf.stats import FASTER, INCONCLUSIVE, MIN_EFFECT, RUN_CV, SLOWER, Difference, repeats_to_detect, verdict

PEAK_MEMORY_RUN_CV = 0.01
"""Run-to-run coefficient of variation of a run's peak memory assumed for one run against one run (fraction):
σ = 0.6 % over the repeats of ``data/runs``, rounded up (docs/statistics.md, "The gate")."""


@dataclass(frozen=True)
class Metric:
    """A judged figure: its runs ``column`` (None: throughput, from steps), ``unit``, whether ``higher_is_better``,
    default ``min_effect`` and assumed ``run_cv`` (fractions), and the verdicts ``better`` and ``worse``."""

    name: str
    label: str
    column: str | None
    unit: str
    higher_is_better: bool
    min_effect: float
    run_cv: float
    better: str
    worse: str

    @property
    def words(self) -> tuple[str, str]:
        """What :func:`trainperf.stats.verdict` calls an increase and a decrease of the metric."""
        return (self.better, self.worse) if self.higher_is_better else (self.worse, self.better)


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("throughput", "throughput", None, "per s", True, MIN_EFFECT, RUN_CV, FASTER, SLOWER),
    Metric("elapsed_throughput", "tokens/s over the elapsed time (summarize's tokens_per_s)", "tokens_per_s",
           "tokens/s", True, MIN_EFFECT, RUN_CV, FASTER, SLOWER),
    Metric("peak_memory", "peak memory", "peak_memory_gb", "GiB", False, 0.05, PEAK_MEMORY_RUN_CV,
           "less memory", "more memory"),
    Metric("energy_per_token", "energy per token", "energy_j_per_token", "J/token", False, 0.05, RUN_CV,
           "less energy", "more energy"),
    Metric("goodput", "goodput", "goodput", "fraction", True, 0.02, RUN_CV, "higher goodput", "lower goodput"),
)}
"""The metrics ``trainperf compare --metric`` judges, with their defaults and why (docs/statistics.md, "The gate")."""

NOT_MEASURED = "not measured"
METRIC_COLUMNS = ("metric", "label", "unit", "baseline", "baseline_low", "baseline_high", "candidate",
                  "candidate_low", "candidate_high", "change", "low", "high", "min_effect", "verdict", "regressed",
                  "repeats_needed", "basis")
"""Columns of a comparison's ``metrics`` table: per judged metric, each side's mean with its 95 % interval
(``unit``), the relative change candidate / baseline − 1 with its interval (fractions), the verdict, whether
it is a significant regression, for an inconclusive one the runs per side that would detect ``min_effect``
(else None), and what the intervals cover (``basis``)."""


def metric_row(metric: Metric, est: list[Estimate], difference: Difference, min_effect: float, basis: str,
               unit: str | None = None) -> dict:
    """The ``metrics`` row of ``metric`` from both sides' estimates and difference (:func:`sides_difference`'s)."""
    call = verdict(difference, min_effect, metric.words)
    intervals = [e.interval() for e in est]
    return {"metric": metric.name, "label": metric.label, "unit": unit or metric.unit,
            "baseline": est[0].throughput, "baseline_low": intervals[0][0], "baseline_high": intervals[0][1],
            "candidate": est[1].throughput, "candidate_low": intervals[1][0], "candidate_high": intervals[1][1],
            "change": difference.estimate, "low": difference.low, "high": difference.high,
            "min_effect": min_effect, "verdict": call, "regressed": call == metric.worse,
            "repeats_needed": repeats_to_detect(run_spread(est), min_effect) if call == INCONCLUSIVE else None,
            "basis": basis}


def judge(metric: Metric, baseline: Side, candidate: Side, min_effect: float | None = None,
          run_cv: float | None = None) -> dict:
    """The ``metrics`` row of a metric read from the runs rows (``metric.column``) of both sides; ``not measured``
    where a run of a side lacks it. ``min_effect`` and ``run_cv``: the metric's defaults unless given."""
    min_effect = metric.min_effect if min_effect is None else min_effect
    run_cv = metric.run_cv if run_cv is None else run_cv
    missing = [_missing(side, name, metric.column) for name, side in (("baseline", baseline),
                                                                      ("candidate", candidate))]
    if any(missing):
        return {**dict.fromkeys(METRIC_COLUMNS), "metric": metric.name, "label": metric.label, "unit": metric.unit,
                "min_effect": min_effect, "verdict": NOT_MEASURED, "regressed": False,
                "basis": "; ".join(m for m in missing if m)}
    est = [estimate_runs(side, metric.column) for side in (baseline, candidate)]
    difference, _ = sides_difference(est, run_cv)
    return metric_row(metric, est, difference, min_effect, spread_basis(est, run_cv))


def spread_basis(est: list[Estimate], run_cv: float) -> str:
    """What covers the run-to-run variation of the two sides' estimates, a few words."""
    runs = [e.runs for e in est]
    if min(runs) > 1:
        return f"{runs[0]} and {runs[1]} runs: their spread"
    if max(runs) > 1:
        return f"one run against {max(runs)}: it varies as they do"
    return f"one run a side: run-to-run CV {run_cv:.0%} assumed" if run_cv > 0 else "one run a side: no variation"


def _missing(side: Side, name: str, column: str) -> str:
    if column not in side.runs:
        return f"{name}: no {column}"
    values = pd.to_numeric(side.runs[column], errors="coerce")
    absent, nonpositive = int(values.isna().sum()), int((values <= 0).sum())
    if absent:
        return f"{name}: {absent} of {len(values)} run(s) without {column}"
    return f"{name}: {nonpositive} of {len(values)} run(s) with {column} ≤ 0" if nonpositive else ""


def metric_table(rows: list[dict]) -> pd.DataFrame:
    """The ``metrics`` table of a comparison (:data:`METRIC_COLUMNS`)."""
    return pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
