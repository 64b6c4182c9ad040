"""The one aggregator: step intervals into :class:`Summaries` and each run's measurements (:func:`measure`; both
in docs/data.md, "The shapes"). Each partition's partials (``trainperf.partials``) are added up by the same functions
on a pandas frame, a Dask DataFrame of any size and, part by part, in the store, so the figures are the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trainperf.errors import DataError
from trainperf.partials import (ALLOCATOR_COUNTS, MEMORY, STEP_COMBINE, STEP_SUMS, STEP_TIMES_COMBINE, WORK,
                                empty_intervals, find_warmup, nothing_found, partials, settle, step_times)
from trainperf.ranks import rank_totals, spread, step_times_by_rank
from trainperf.schema import STEP_PHASE_COLUMNS

COMBINE_EVERY = 8
"""Partials added up at a time when many partitions are combined (Dask's ``split_every``)."""


@dataclass
class Repeats:
    """What :func:`repeated_steps` found, as row positions: ``keep`` (a bool per record), ``copies`` (``(row,
    earlier identical row)``), ``redone`` (``(earlier, later)``: a step run again after a restart) and
    ``conflicts`` (``(earlier, later)``: one step recorded twice with different values)."""

    keep: np.ndarray
    copies: list[tuple[int, int]] = field(default_factory=list)
    redone: list[tuple[int, int]] = field(default_factory=list)
    conflicts: list[tuple[int, int]] = field(default_factory=list)


def repeated_steps(records: Mapping[str, Any], restarts: bool = False) -> Repeats | None:
    """The records (step-interval columns, each rank's in the order recorded) that repeat a step of their run and
    rank: a copy equal in every value to an earlier one is dropped; one that differs is, with ``restarts`` and
    where the rank's step count went back before it (a restart from a checkpoint), the latest attempt (the earlier
    dropped), otherwise a conflict the caller refuses. None where every rank's steps advance (the usual case)."""
    step = np.asarray(records["step"])
    rank = np.asarray(records["rank"]) if "rank" in records else np.zeros(len(step), dtype=np.int64)
    run = pd.factorize(np.asarray(records["run_id"]))[0] if "run_id" in records else np.zeros(len(step), np.int64)
    same = (rank[1:] == rank[:-1]) & (run[1:] == run[:-1])
    if not (same & (step[1:] <= step[:-1])).any():
        return None
    frame = pd.DataFrame({name: np.asarray(values) for name, values in records.items()})
    group = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
    first_of = pd.Series(np.arange(len(frame))).groupby(group).transform("min").to_numpy()
    keep = first_of == np.arange(len(frame))
    found = Repeats(keep, [(int(i), int(first_of[i])) for i in np.flatnonzero(~keep)])
    back = np.concatenate([[False], same & (step[1:] < step[:-1])])
    went_back = np.cumsum(back) - np.cumsum(back)[np.maximum.accumulate(
        np.where(np.concatenate([[True], ~same]), np.arange(len(step)), 0))] > 0
    rest = pd.DataFrame({"run_id": run, "rank": rank, "step": step})[keep]
    for _, rows in rest[rest.duplicated(keep=False)].groupby(["run_id", "rank", "step"], sort=False):
        at = rows.index.to_numpy()
        for earlier, later in zip(at[:-1], at[1:]):
            if restarts and went_back[later]:
                keep[earlier] = False
                found.redone.append((int(earlier), int(later)))
            else:
                found.conflicts.append((int(earlier), int(later)))
    return found


def combine_step_times(parts: Sequence[Any]) -> Any:
    """The :func:`step_times` of many partitions (Dask delayed frames) added up, as a Dask DataFrame."""
    return _added_up(parts, step_times(empty_intervals()), ["run_id", "step"], STEP_TIMES_COMBINE)


def _added_up(parts: Sequence[Any], meta: pd.DataFrame, keys: list[str], how: Mapping[str, str]) -> Any:
    """The Dask delayed frames ``parts`` (like ``meta``) added up by ``keys`` in a tree (bounded memory)."""
    import dask.dataframe as dd

    frames = dd.from_delayed(list(parts), meta=meta, verify_meta=False)
    return frames.groupby(keys, sort=False).agg(dict(how), split_every=COMBINE_EVERY, split_out=1)


def settled_times(times: pd.DataFrame, rules: str | Mapping[str, str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`find_warmup` of the step times :func:`combine_step_times` computed (by run and step)."""
    return find_warmup(_with_keys(times).sort_values(["run_id", "step"], kind="stable").reset_index(drop=True), rules)


def _with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """A grouped result with its keys (``run_id`` and the rest) as columns, as a groupby leaves them in the index."""
    return frame.reset_index() if "run_id" not in frame.columns else frame


def combine(parts: Sequence[Any]) -> tuple[Any, Any, Any]:
    """The summaries of many partitions as Dask collections, from each partition's :func:`partials` (Dask delayed
    triples): the per-rank rows joined, the rest added up in a tree (bounded memory). Computed with :func:`finish`."""
    import dask.dataframe as dd

    empty = partials(empty_intervals())
    return (dd.from_delayed([p[0] for p in parts], meta=empty[0], verify_meta=False),
            _added_up([p[1] for p in parts], empty[1], ["run_id", "step"], STEP_COMBINE),
            _added_up([p[2] for p in parts], empty[2], ["run_id", "quantity", "value"], {"count": "sum"}))


def finish(per_rank: pd.DataFrame, per_step: pd.DataFrame, values: pd.DataFrame,
           settled: tuple[pd.DataFrame, pd.DataFrame]) -> Summaries:
    """:class:`Summaries` of what :func:`combine` computed and :func:`settled_times`, each frame sorted by its keys."""
    per_step = _with_keys(per_step)
    for column in STEP_SUMS:  # a sum of partials that had no value is no value, not 0
        per_step[f"{column}_sum"] = per_step[f"{column}_sum"].where(per_step[f"{column}_count"] > 0)
    values = _with_keys(values)
    return Summaries(per_rank.sort_values(["run_id", "rank"], kind="stable").reset_index(drop=True),
                     per_step.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True),
                     values.sort_values(["run_id", "quantity", "value"], kind="stable").reset_index(drop=True),
                     *settled)


@dataclass
class Summaries:
    """What :func:`summarize` made of step intervals (docs/data.md, "The shapes"): ``per_rank``
    (:data:`trainperf.partials.RANK_COLUMNS`), ``per_step`` (per run and step of the measured window: ``ranks``,
    ``step_s_max``, ``n_steps``, ``*_sum`` and ``*_count`` of :data:`STEP_SUMS`), ``values`` (the counts of
    :func:`trainperf.partials.value_partials`), ``step_times`` (:func:`step_times`, warm-up included, with the
    warm-up found) and ``warmup`` (per run, :func:`find_warmup`)."""

    per_rank: pd.DataFrame
    per_step: pd.DataFrame
    values: pd.DataFrame
    step_times: pd.DataFrame = field(default_factory=lambda: nothing_found()[0])
    warmup: pd.DataFrame = field(default_factory=lambda: nothing_found()[1])
    attrs: dict[str, Any] = field(default_factory=dict)
    """What they were read from (as a frame's ``attrs``: ``trainperf.errors.provenance``)."""

    def select(self, run_ids: Iterable[str]) -> Summaries:
        """The summaries of the runs ``run_ids`` (without ``attrs``)."""
        wanted = set(map(str, run_ids))
        return Summaries(*(f[f["run_id"].astype(str).isin(wanted).to_numpy(bool)].reset_index(drop=True)
                           for f in (getattr(self, name) for name in FRAMES)))

    @property
    def rows(self) -> int:
        """Step intervals summarized (every rank's, warm-up included)."""
        return int(self.per_rank["intervals"].sum())

    @property
    def run_ids(self) -> list[str]:
        """The runs, in the order of their first rank."""
        return list(dict.fromkeys(self.per_rank["run_id"].astype(str)))

    @staticmethod
    def concat(parts: Sequence[Summaries]) -> Summaries:
        """The summaries of several inputs as one."""
        if not parts:
            return summarize(empty_intervals())
        return Summaries(*(pd.concat([getattr(p, name) for p in parts], ignore_index=True) for name in FRAMES))


FRAMES = ("per_rank", "per_step", "values", "step_times", "warmup")
"""The frames of :class:`Summaries`, each with a ``run_id`` column."""


def summarize(intervals: Any, scheduler: Any = None, rules: str | Mapping[str, str] = "mser") -> Summaries:
    """The :class:`Summaries` of step intervals: a pandas frame, or a Dask DataFrame whose partitions each hold whole
    ranks, computed on ``scheduler`` (``None``: Dask's default); ``rules``: the warm-up rule, or per run_id."""
    if isinstance(intervals, pd.DataFrame):
        settled = find_warmup(step_times(intervals), rules)
        return finish(*partials(settle(intervals, settled[1])), settled)
    import dask

    parts = intervals.to_delayed()
    times = dask.compute(combine_step_times([dask.delayed(step_times)(p) for p in parts]), scheduler=scheduler)[0]
    settled = settled_times(times, rules)
    combined = combine([dask.delayed(partials, nout=3)(dask.delayed(settle)(p, settled[1])) for p in parts])
    return finish(*dask.compute(*combined, scheduler=scheduler), settled)


def median_of_counts(values: pd.DataFrame, quantity: str) -> float:
    """``numpy.median`` of a quantity of one run's :func:`trainperf.partials.value_partials`, from its counts."""
    rows = values[values["quantity"] == quantity].sort_values("value")
    total = rows["count"].sum()
    if not total:
        return math.nan
    cumulative = rows["count"].cumsum().to_numpy()
    at = [int(np.searchsorted(cumulative, k, side="right")) for k in ((total - 1) // 2, total // 2)]
    return float(rows["value"].to_numpy()[at].mean())


def measure(summaries: Summaries, run_id: str, *, expected_ranks: Sequence[int] | None = None,
            closed_ranks: Sequence[int] | None = None, batch_facts: bool = False,
            model_parallel: float = 1.0) -> dict[str, Any]:
    """The measurements of one run as runs columns (docs/data.md, "Runs rows"). ``complete`` (:func:`stopped_early`)
    checks the ``expected_ranks`` (default: the ranks present, when there are several) and, where given, that the
    ``closed_ranks`` closed their profiler. With ``batch_facts`` (every rank recorded its own work), the batch
    sizes measured, the global batch divided by ``model_parallel`` (the ranks that share their samples)."""
    run = summaries.select([run_id])
    per_rank = run.per_rank.set_index("rank")
    out: dict[str, Any] = {}
    if ranks := spread(rank_totals(run.per_rank)["elapsed_s"].droplevel("run_id")):
        out.update(elapsed_s=ranks["slowest_s"], slowest_rank=int(ranks["slowest_rank"]),
                   mean_rank_elapsed_s=ranks["mean_s"])
        if math.isfinite(ranks["imbalance"]):
            out["rank_imbalance"] = ranks["imbalance"]
    window = per_rank[per_rank["measured_intervals"].gt(0)]
    out.update({name: float(window[name].mean()) for name in STEP_PHASE_COLUMNS if window[name].notna().any()})
    out.update({name: float(window[name].sum()) for name in WORK
                if window[name].notna().any() and window[f"{name}_missing"].sum() == 0})
    if len(window) and window["measured_steps"].notna().all():
        out["steps"] = int(window["measured_steps"].max())
    reference = out.get("slowest_rank", window.index[0] if len(window) else None)
    if reference is not None and math.isfinite(per_rank.at[reference, "warmup_steps"]):
        out["warmup_steps"] = int(per_rank.at[reference, "warmup_steps"])
    if len(run.warmup):
        out["warmup_rule"] = str(run.warmup["warmup_rule"].iloc[0])
    if len(per_rank):
        out["ranks"] = int(len(per_rank))
    if excluded := int(per_rank["excluded_intervals"].sum()):
        out["extra_excluded_records"] = excluded
    for name in MEMORY:
        if window[name].notna().any():
            out[name] = float(window[name].max())
            out[name.replace("_gb", "_mean_gb")] = float(window[name].mean())
    if window["energy_j"].notna().any():
        out["energy_j"] = float(window["energy_j"].sum())
    out.update({name: int(per_rank[name].sum()) for name in ALLOCATOR_COUNTS if per_rank[name].notna().any()})
    if window["loss"].notna().any():
        out["train_loss"] = float(window["loss"].mean())
    stopped = stopped_early(run.per_rank, expected_ranks, closed_ranks)
    if stopped is not None:
        out["complete"] = not stopped
    if stopped:
        out["extra_stopped_early_ranks"] = f"[{', '.join(map(str, stopped))}]"  # a list, never read as a number
    if batch_facts:
        if math.isfinite(micro := median_of_counts(run.values, "micro_steps")):
            out["grad_accum_steps"] = int(micro)
        if math.isfinite(batch := median_of_counts(run.values, "micro_batch")):
            out["micro_batch_size"] = batch
            samples = run.per_step["samples_sum"].where(run.per_step["samples_count"] > 0)
            out["global_batch_size"] = float(samples.median()) / model_parallel
    return out


def stopped_early(per_rank: pd.DataFrame, expected: Sequence[int] | None,
                  closed: Sequence[int] | None) -> dict[int, str] | None:
    """The ranks of one run (its :data:`trainperf.partials.RANK_COLUMNS` rows) that stopped early (docs/data.md,
    "Runs rows", ``complete``), with the reason; ``None`` when it cannot be told (one rank and no expected ranks)."""
    per_rank = per_rank.set_index("rank")
    if expected is None:
        if len(per_rank) < 2:
            return None
        expected = sorted(per_rank.index)
    most, last = (per_rank["intervals"].max(), per_rank["last_step"].max()) if len(per_rank) else (0, 0)
    stopped: dict[int, str] = {}
    for rank in expected:
        reasons = []
        if rank not in per_rank.index:
            reasons.append("no steps recorded")
        elif per_rank.at[rank, "intervals"] < most:
            reasons.append(f"{int(per_rank.at[rank, 'intervals'])} of {int(most)} steps")
        elif per_rank.at[rank, "last_step"] < last:
            reasons.append(f"last step {int(per_rank.at[rank, 'last_step'])} of {int(last)}")
        if closed is not None and rank not in closed:
            reasons.append("profiler not closed")
        if reasons:
            stopped[int(rank)] = ", ".join(reasons)
    return stopped


def incomplete(run_id: str, stopped: dict[int, str]) -> str:
    """The sentence that names the ranks of run ``run_id`` that stopped early."""
    reasons = "; ".join(f"rank {r}: {why}" for r, why in stopped.items())
    return f"run {run_id} is incomplete: rank(s) {', '.join(map(str, stopped))} stopped early ({reasons})"


def job_steps(summaries: Summaries, warmup: int = 0, *, usable_only: bool = False,
              rank_steps: pd.DataFrame | None = None) -> tuple[dict[str, pd.DataFrame], int]:
    """Per run, the job's measured steps, and how many steps were left out because some rank did not record them.
    A run's frame has per step ``step``, ``step_time_s`` (the slowest rank's, s), ``mean_rank_step_s`` (s),
    ``tokens`` and ``samples`` (all ranks), the phase columns (mean over ranks, s; each where every interval has
    it) and, for the runs in ``rank_steps`` (``run_id, rank, step, step_s``), each rank's ``rank_<r>_s`` (s).
    ``warmup``: steps left out after the warm-up. A run with a step without ``step_s``, or fewer than 2 complete
    steps, is a DataError, or with ``usable_only`` left out."""
    out: dict[str, pd.DataFrame] = {}
    dropped = 0
    measured = summaries.per_rank[summaries.per_rank["measured_intervals"].gt(0)]
    ranks_of = measured.groupby(measured["run_id"].astype(str), sort=False).size()
    ids = summaries.per_step["run_id"].astype(str)
    after = summaries.per_step["step"] >= summaries.per_step.groupby(ids)["step"].transform("min") + warmup
    steps, ids = summaries.per_step[after.to_numpy(bool)], ids[after.to_numpy(bool)]
    columns = (*WORK, *STEP_PHASE_COLUMNS)
    counts = steps[[f"{c}_count" for c in columns]].to_numpy(float)
    figures = steps[[f"{c}_sum" for c in columns]].to_numpy(float, copy=True)
    figures[:, len(WORK):] /= counts[:, len(WORK):]  # phases: the mean over ranks; tokens, samples: all ranks
    by_run = steps.groupby(ids.to_numpy(), sort=True).indices
    held = steps["ranks"].to_numpy(float)  # ranks that recorded the step
    complete = held == ids.map(ranks_of).fillna(0).to_numpy(float)
    step, slowest = steps["step"].to_numpy(), steps["step_s_max"].to_numpy()
    mean = (steps["step_s_sum"] / steps["step_s_count"]).to_numpy(float)
    untimed_at = steps["step_s_count"].to_numpy() == 0
    for run_id, where in by_run.items():
        kept = where[complete[where]]
        timed = np.flatnonzero(np.nansum(counts[where], axis=0) == held[where].sum())  # every interval has it
        frame = pd.DataFrame({"step": step[kept], "step_time_s": slowest[kept], "mean_rank_step_s": mean[kept],
                              **{columns[i]: figures[kept, i] for i in timed}})
        mine = rank_steps[rank_steps["run_id"].astype(str) == run_id] if rank_steps is not None else ()
        if len(mine):
            frame = frame.join(step_times_by_rank(mine, frame["step"]))
        untimed = step[kept][untimed_at[kept]]
        problem = (f"step {untimed[0]} has no step_s" if len(untimed) else
                   f"{len(frame)} measured step(s) after the warm-up: at least 2 are needed" if len(frame) < 2
                   else None)
        if problem and usable_only:
            continue
        if problem:
            raise DataError(problem, path=f"run {run_id}")
        dropped += len(where) - len(kept)
        out[run_id] = frame
    return out, dropped
