"""What one partition of step intervals (whole ranks, each in the order recorded) contributes to the aggregator,
pandas frame or Dask partition alike: its :func:`partials` and the warm-up (:func:`step_times`, :func:`find_warmup`,
:func:`settle`). The measured window: the intervals neither warm-up nor with an evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from trainperf.schema import STEP_INTERVAL_COLUMNS, STEP_PHASE_COLUMNS
from trainperf.steady_state import warmup_length

WORK = ("tokens", "samples")
"""Work columns of an interval: summed over ranks and steps."""
MEMORY = ("peak_memory_gb", "reserved_memory_gb", "host_memory_gb")
"""Memory columns of an interval (GiB): per rank the largest; per run the largest and the mean over ranks."""
ALLOCATOR_COUNTS = ("alloc_retries", "ooms")
"""Counts of an interval that tell of memory pressure: summed over every interval, warm-up included."""

RANK_COLUMNS: tuple[str, ...] = (
    "run_id", "rank", "node", "intervals", "last_step", "measured_intervals", "measured_steps", "warmup_steps",
    "excluded_intervals", "untimed_starts", "first_start_s", "last_end_s", "step_s_sum", *STEP_PHASE_COLUMNS,
    *WORK, *(f"{w}_missing" for w in WORK), "loss", *MEMORY, "energy_j", *ALLOCATOR_COUNTS, "step_s_median",
    "comm_exposed_s_median", "all_first_start_s", "all_last_end_s", "all_step_s_sum", "warmup_step_s_sum",
)
"""Per run and rank (:func:`rank_partials`), over the measured window unless said: counts of intervals and the steps
they cover (NaN where a length is unknown), times (s), work with the intervals lacking it, the last loss, the
largest memory (GiB), energy (J; NaN unless every measured interval has one), allocator counts and the ``all_*`` and
``warmup_*`` columns (all the rank's intervals, warm-up included: what ``trainperf.goodput`` needs)."""

STEP_TIMES_COMBINE: dict[str, str] = {"step_s_max": "max", "n_steps": "max", "warmup": "max"}
"""How :func:`step_times` of several partitions add up."""
STEP_SUMS: tuple[str, ...] = ("step_s", *WORK, *STEP_PHASE_COLUMNS)
"""Columns summed per step across ranks, each with its count of values."""
STEP_COMBINE: dict[str, str] = {"ranks": "sum", "step_s_max": "max", "n_steps": "max",
                                **{f"{c}_sum": "sum" for c in STEP_SUMS}, **{f"{c}_count": "sum" for c in STEP_SUMS}}
"""How :func:`step_partials` of several partitions add up (a rank lies in one partition: ranks add up too)."""

VALUE_QUANTITIES = ("micro_steps", "micro_batch")
"""The run-wide medians ``aggregate.measure`` needs: micro-steps per optimizer step, a rank's samples per micro-step."""


def measured(intervals: Any) -> Any:
    """Whether each interval (of a pandas or a Dask frame) lies in the measured window."""
    return ~(intervals["warmup"].astype(bool) | intervals["includes_evaluation"].astype(bool))


def empty_intervals() -> pd.DataFrame:
    """A step-intervals frame without rows, with every column's type."""
    kinds = {"run_id": "string", "node": "string", "rank": "int64", "step": "int64", "warmup": "bool",
             "includes_evaluation": "bool"}
    return pd.DataFrame({c: pd.Series(dtype=kinds.get(c, "float64")) for c in STEP_INTERVAL_COLUMNS})


def _groups(intervals: pd.DataFrame, by: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group codes of the rows by run and ``by`` (an integer column), in the order of ``(run_id, by)``; and each
    group's run_id and ``by`` value."""
    runs, names = pd.factorize(intervals["run_id"], sort=True)
    other = intervals[by].to_numpy(np.int64)
    low = int(other.min()) if len(other) else 0
    span = int(other.max()) - low + 1 if len(other) else 1
    groups, codes = np.unique(runs.astype(np.int64) * span + (other - low), return_inverse=True)
    return codes, np.asarray(names, dtype=object)[groups // span], groups % span + low


def _per_group(values: pd.Series, n: int) -> np.ndarray:
    """A groupby on group codes as an array over all ``n`` groups (NaN where a group has no row)."""
    return values.reindex(range(n)).to_numpy(float)


def rank_partials(intervals: pd.DataFrame) -> pd.DataFrame:
    """One row per run and rank (:data:`RANK_COLUMNS`, in that order) of ``intervals``, which holds all the rows of
    each of its ranks, in the order recorded."""
    if intervals.empty:
        return pd.DataFrame({c: pd.Series(dtype="string" if c in ("run_id", "node") else
                                          "int64" if c == "rank" else "float64") for c in RANK_COLUMNS})
    codes, run_ids, ranks = _groups(intervals, "rank")
    n = len(run_ids)
    warmup, window = intervals["warmup"].to_numpy(bool), measured(intervals).to_numpy()
    n_steps = intervals["n_steps"].to_numpy(float)

    def count(rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(codes[rows], weights=None if weights is None else weights[rows], minlength=n).astype(float)

    def known_sum(rows: np.ndarray) -> np.ndarray:  # NaN where a length among ``rows`` is unknown
        known = count(rows, np.isfinite(n_steps).astype(float)) == count(rows)
        return np.where(known, count(rows, np.nan_to_num(n_steps)), np.nan)

    first = np.zeros(n, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    out = pd.DataFrame({"run_id": pd.array(run_ids, dtype="string"), "rank": ranks,
                        "node": intervals["node"].to_numpy()[first], "intervals": count(slice(None)),
                        "last_step": _per_group(intervals.groupby(codes)["step"].max(), n),
                        "measured_intervals": count(window), "warmup_steps": known_sum(warmup),
                        "excluded_intervals": count(~warmup & ~window)})
    out["measured_steps"] = np.where(out["measured_intervals"] > 0, known_sum(window), np.nan)
    inside, kept = intervals[window], codes[window]
    start, seconds = inside["start_s"].to_numpy(float), inside["step_s"].to_numpy(float)
    out["untimed_starts"] = count(window, np.isnan(intervals["start_s"].to_numpy(float)).astype(float))
    grouped = inside.groupby(kept)
    out["first_start_s"] = _per_group(grouped["start_s"].min(), n)
    out["last_end_s"] = _per_group(pd.Series(start + seconds).groupby(kept).max(), n)
    sums = grouped[["step_s", *STEP_PHASE_COLUMNS, *WORK]].sum(min_count=1)
    for column in sums.columns:
        out["step_s_sum" if column == "step_s" else column] = _per_group(sums[column], n)
    for name in WORK:
        out[f"{name}_missing"] = count(window, np.isnan(intervals[name].to_numpy(float)).astype(float))
    loss = inside["loss"].to_numpy(float)
    last_loss = np.full(n, np.nan)
    last_loss[kept[~np.isnan(loss)]] = loss[~np.isnan(loss)]  # the last of each rank's, in order, is kept
    out["loss"] = last_loss
    for name, largest in grouped[list(MEMORY)].max().items():
        out[name] = _per_group(largest, n)
    complete = grouped["energy_j"].count() == grouped["step_s"].size()  # every measured interval has one
    out["energy_j"] = _per_group(grouped["energy_j"].sum(min_count=1).where(complete), n)
    for name, total in intervals.groupby(codes)[list(ALLOCATOR_COUNTS)].sum(min_count=1).items():
        out[name] = _per_group(total, n)
    out["step_s_median"] = _per_group(grouped["step_s"].median(), n)
    out["comm_exposed_s_median"] = _per_group(grouped["comm_exposed_s"].median(), n)
    every, seconds = intervals["start_s"].to_numpy(float), intervals["step_s"].to_numpy(float)
    out["all_first_start_s"] = _per_group(intervals.groupby(codes)["start_s"].min(), n)
    out["all_last_end_s"] = _per_group(pd.Series(every + seconds).groupby(codes).max(), n)
    out["all_step_s_sum"] = _per_group(pd.Series(seconds).groupby(codes).sum(min_count=1), n)
    out["warmup_step_s_sum"] = count(warmup, np.nan_to_num(seconds))
    return out[list(RANK_COLUMNS)]


def step_partials(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per run and step of the measured intervals: ``ranks`` (distinct ranks), ``step_s_max``, ``n_steps`` (the
    most any rank's interval covers) and, for each of :data:`STEP_SUMS`, its ``_sum`` and ``_count``."""
    inside = intervals[measured(intervals)]
    codes, run_ids, steps = _groups(inside, "step")
    grouped = inside.groupby(codes)
    out = pd.DataFrame({"run_id": pd.array(run_ids, dtype="string"), "step": steps,
                        "ranks": grouped["rank"].nunique().to_numpy(float),
                        "step_s_max": grouped["step_s"].max().to_numpy(float),
                        "n_steps": grouped["n_steps"].max().to_numpy(float)})
    sums, counts = grouped[list(STEP_SUMS)].sum(min_count=1), grouped[list(STEP_SUMS)].count()
    return out.assign(**{f"{c}_sum": sums[c].to_numpy(float) for c in STEP_SUMS},
                      **{f"{c}_count": counts[c].to_numpy(float) for c in STEP_SUMS})


def step_times(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per run and step of the intervals without evaluation, warm-up included: ``step_s_max`` (the job's time: its
    slowest rank's, s), ``n_steps`` (as :func:`step_partials`) and ``warmup`` (1.0 where a rank flagged it, else 0)."""
    rows = intervals[~intervals["includes_evaluation"].astype(bool).to_numpy()]
    codes, run_ids, steps = _groups(rows, "step")
    found = pd.DataFrame({"step_s_max": rows["step_s"].to_numpy(float), "n_steps": rows["n_steps"].to_numpy(float),
                          "warmup": rows["warmup"].to_numpy(bool).astype(float)}).groupby(codes).max()
    return pd.DataFrame({"run_id": pd.array(run_ids, dtype="string"), "step": steps,
                         **{c: found[c].to_numpy(float) for c in STEP_TIMES_COMBINE}})


def find_warmup(times: pd.DataFrame, rules: str | Mapping[str, str] = "mser") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Where each run's steady state starts, from its :func:`step_times`: at least the leading steps a rank flagged;
    with the rule ``mser`` (``trainperf.steady_state``) the steps MSER drops from the job's time per step after
    them (``step_s_max / n_steps``; records of unknown length and times missing or not positive left out).
    ``rules``: every run's rule, or by run_id (``mser`` where none). Returns ``times`` with ``warmup`` set for the
    steps found, and per run ``warmup_rule`` (``fixed`` where asked, or where MSER had too few steps) and
    ``first_step`` (the first steady step where the rule added warm-up, else NaN)."""
    found = []
    flags = times["warmup"].to_numpy(float).copy()
    for run_id, rows in times.groupby(times["run_id"].astype(str), sort=True):
        at = rows.index.to_numpy()[np.argsort(rows["step"].to_numpy(), kind="stable")]
        flagged = flags[at] > 0
        minimum = int(np.argmin(flagged)) if not flagged.all() else len(at)
        per_step = times["step_s_max"].to_numpy(float)[at] / times["n_steps"].to_numpy(float)[at]
        usable = np.isfinite(per_step) & (per_step > 0)  # a missing or impossible time judges no warm-up
        candidates = np.flatnonzero(~flagged & usable & (np.arange(len(at)) >= minimum))
        rule = rules if isinstance(rules, str) else rules.get(run_id, "mser")
        dropped, used = warmup_length(per_step[candidates], 0, rule)
        first = math.nan
        if dropped:
            first = float(times["step"].to_numpy()[at][candidates[dropped]])
            flags[at[times["step"].to_numpy()[at] < first]] = 1.0
        found.append((run_id, used, first))
    warmup = pd.DataFrame(found, columns=["run_id", "warmup_rule", "first_step"]).astype(
        {"run_id": "string", "warmup_rule": "string", "first_step": "float64"})
    return times.assign(warmup=flags), warmup


def nothing_found() -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`find_warmup` of no interval: its two frames, empty, with their columns."""
    return find_warmup(step_times(empty_intervals()))


def settle(intervals: pd.DataFrame, warmup: pd.DataFrame) -> pd.DataFrame:
    """``intervals`` with every interval before its run's ``first_step`` (:func:`find_warmup`) flagged as warm-up."""
    first = warmup.set_index(warmup["run_id"].astype(str))["first_step"].dropna()
    if first.empty or intervals.empty:
        return intervals
    runs, names = pd.factorize(intervals["run_id"].astype(str))
    bound = first.reindex(list(names)).to_numpy(float)[runs]
    earlier = intervals["step"].to_numpy(float) < bound  # NaN (no bound): False
    return intervals.assign(warmup=intervals["warmup"].to_numpy(bool) | earlier) if earlier.any() else intervals


def value_partials(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per run, counts of each value of :data:`VALUE_QUANTITIES` over the measured intervals: ``run_id, quantity,
    value, count``, in that order."""
    window = measured(intervals).to_numpy()
    runs, names = pd.factorize(intervals["run_id"], sort=True)
    micro = intervals["micro_steps"].to_numpy(float)[window]
    batch = intervals["samples"].to_numpy(float)[window] / np.clip(np.nan_to_num(micro, nan=1.0), 1.0, None)
    frames = []
    for quantity, values in zip(VALUE_QUANTITIES, (micro, batch)):
        known = ~np.isnan(values)
        found = pd.DataFrame({"run": runs[window][known], "value": values[known]}).value_counts().sort_index()
        frames.append(pd.DataFrame({"run_id": pd.array(np.asarray(names, dtype=object)[
            found.index.get_level_values("run").to_numpy()], dtype="string"), "quantity": quantity,
            "value": found.index.get_level_values("value").to_numpy(float), "count": found.to_numpy(float)}))
    out = pd.concat(frames, ignore_index=True).astype({"quantity": "string"})
    return out.sort_values(["run_id", "quantity", "value"], kind="stable").reset_index(drop=True)


def partials(intervals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """What one partition contributes: its :func:`rank_partials`, :func:`step_partials` and :func:`value_partials`."""
    return rank_partials(intervals), step_partials(intervals), value_partials(intervals)
