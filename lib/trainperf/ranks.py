"""Which rank holds a job back, defined once with one set of thresholds (docs/reports.md, "Which rank holds a job
back"). Over the measured window a rank is judged by its elapsed time; under DDP, where every rank's step lasts as
long as the slowest's, the slow rank is the one that waits least for communication (:func:`name_straggler`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from trainperf.schema import STEP_PHASE_COLUMNS

if TYPE_CHECKING:
    from trainperf.aggregate import Summaries

IMBALANCE_STRAGGLER = 1.1
"""Imbalance (slowest rank's elapsed time / fastest rank's, s / s) from which a run's slowest rank is a straggler
whose extra time the scaling page explains: 10 % more, beyond a balanced job's spread (seed 004 on 4 GPUs: 1.02)."""
WAIT_GAP_SHARE = 0.05
"""Share of the median step (s / s) by which the rank that waits least must wait less than the other ranks' median
to be named the straggler: a gap inside the synchronised steps delays every step, so 5 % of a step is 5 % of the job."""
OUTSIDE_SHARE = 0.5
"""Share of a slow rank's extra time (s / s) by which the other ranks' communication must be longer than its own
for them to wait for it inside the synchronised steps; less, and the extra time is work it does alone outside them."""


def rank_totals(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per run and rank with measured intervals (``trainperf.partials.RANK_COLUMNS`` rows): ``elapsed_s`` over the
    measured window (s: last end − first start where every interval of its run has a start, else the sum of its
    intervals' times) and the phase totals (s; NaN where never timed). Index ``run_id, rank``."""
    timed = per_rank.groupby(per_rank["run_id"].astype(str), sort=False)["untimed_starts"].transform("sum").eq(0)
    elapsed = (per_rank["last_end_s"] - per_rank["first_start_s"]).where(timed, per_rank["step_s_sum"])
    out = per_rank[["run_id", "rank", *STEP_PHASE_COLUMNS]].assign(elapsed_s=elapsed.to_numpy())
    return out[per_rank["measured_intervals"].gt(0).to_numpy()].set_index(["run_id", "rank"])


def slowest(times: np.ndarray) -> int | None:
    """The position of the slowest rank among ``times`` (s): the largest known, the first of equals; None if none."""
    return int(np.nanargmax(times)) if np.isfinite(times).any() else None


def step_times_by_rank(rank_steps: pd.DataFrame, steps: pd.Series) -> pd.DataFrame:
    """Each rank's time (s) of each of one run's ``steps``, from its ``rank, step, step_s`` rows (a step recorded
    twice: the longer): a column ``rank_<r>_s`` per rank, a row per step of ``steps`` (NaN where a rank has none)."""
    wide = rank_steps.groupby(["step", "rank"], sort=True)["step_s"].max().unstack("rank").reindex(steps)
    return pd.DataFrame({f"rank_{int(rank)}_s": wide[rank].to_numpy() for rank in wide.columns})


def slowest_shares(times: pd.DataFrame) -> dict[str, float]:
    """Per column of ``times`` (a row per step, a :func:`step_times_by_rank` column per rank, s), the fraction of
    the steps of which that rank is the slowest (the first of equals)."""
    counts = times.idxmax(axis=1).value_counts(normalize=True)
    return {rank: float(counts.get(rank, 0.0)) for rank in times.columns}


def spread(elapsed: pd.Series) -> dict[str, Any]:
    """One run's ``slowest_rank`` (label), ``slowest_s``, ``mean_s``, ``fastest_s`` (s) and ``imbalance`` (slowest
    / fastest; NaN where the fastest took no time) from its ranks' elapsed times (s, by rank); empty if none known."""
    at = slowest(elapsed.to_numpy(float))
    if at is None:
        return {}
    top, low = float(elapsed.max()), float(elapsed.min())
    return {"slowest_rank": elapsed.index[at], "slowest_s": top, "mean_s": float(elapsed.mean()), "fastest_s": low,
            "imbalance": top / low if low > 0 else math.nan}


def imbalanced(slowest_s: Any, fastest_s: Any) -> Any:
    """Whether the slowest rank (``slowest_s``) takes :data:`IMBALANCE_STRAGGLER` times the fastest or more."""
    return slowest_s >= IMBALANCE_STRAGGLER * fastest_s


def median_of_others(values: np.ndarray, at: int) -> float:
    """The median of a per-rank value over the ranks but position ``at`` (NaN left out; NaN if none has one)."""
    others = np.delete(np.asarray(values, float), at)
    known = others[~np.isnan(others)]
    return float(np.median(known)) if len(known) else math.nan


def rank_waits(summaries: Summaries) -> pd.DataFrame:
    """Per run and rank with measured steps (warm-up left out): rows ``run_id, rank, node, steps, step_s,
    comm_exposed_s, busy_s`` (medians over steps, s; ``busy_s = step_s − comm_exposed_s``), by run and rank."""
    per_rank = summaries.per_rank[summaries.per_rank["measured_intervals"].gt(0)]
    out = pd.DataFrame({"run_id": per_rank["run_id"].astype(str), "rank": per_rank["rank"],
                        "node": per_rank["node"], "steps": per_rank["measured_intervals"].astype(int),
                        "step_s": per_rank["step_s_median"], "comm_exposed_s": per_rank["comm_exposed_s_median"]})
    return out.sort_values(["run_id", "rank"]).reset_index(drop=True).assign(
        busy_s=lambda o: o["step_s"] - o["comm_exposed_s"])


def name_straggler(per_rank: pd.DataFrame, run_id: str) -> tuple[pd.DataFrame, str]:
    """The straggler among the :func:`rank_waits` rows of run ``run_id``: the rank that waits least, when it waits
    less than the median of the others by :data:`WAIT_GAP_SHARE` of the median step or more. Returns the rows
    (index from 0) with ``wait_gap_s`` (how much less the rank waits than the median of the others, s per step)
    and ``straggler``, and a sentence naming it or saying why none is named. ValueError without measured steps."""
    if per_rank.empty:
        raise ValueError(f"run {run_id!r}: no measured (non-warm-up) steps")
    waits = per_rank["comm_exposed_s"].reset_index(drop=True)
    gaps = [median_of_others(waits.to_numpy(float), i) - waits[i] for i in range(len(waits))]
    per_rank = per_rank.reset_index(drop=True).assign(wait_gap_s=np.array(gaps, dtype=float), straggler=False)
    if len(per_rank) < 2:
        return per_rank, f"Run {run_id}: one rank, no straggler to find."
    if waits.isna().all():
        return per_rank, (f"Run {run_id}: no communication waits measured (comm_exposed_s is empty), "
                          "so no straggler can be named.")
    slow = int(waits.idxmin())
    gap, step = per_rank.at[slow, "wait_gap_s"], per_rank["step_s"].median()
    if not gap >= WAIT_GAP_SHARE * step:
        return per_rank, (f"Run {run_id}: no straggler. The ranks wait {_ms(waits.min())} to {_ms(waits.max())} "
                          f"per step for communication (median), a spread below {WAIT_GAP_SHARE * 100:.0f} % of a "
                          f"{_ms(step)} step.")
    per_rank.loc[slow, "straggler"] = True
    return per_rank, (f"Run {run_id}: rank {int(per_rank.at[slow, 'rank'])} is the straggler. It waits "
                      f"{_ms(waits[slow])} per step for communication, the other ranks "
                      f"{_ms(waits.drop(slow).median())} (median): they wait {_ms(gap)} per step for it, "
                      f"{gap / step * 100:.0f} % of a {_ms(step)} step.")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


SLOWEST_STEPS_SHARE = 0.5
"""Share of the steps (fraction) of which one rank must be the slowest to be named the straggler of a comparison,
and at least 1.5 times the share it would have were every rank as often the slowest (1.5 / ranks)."""


def often_slowest(shares: np.ndarray) -> int | None:
    """The position of the rank that is the slowest of the most steps (``shares``: per rank, the fraction of steps
    of which it is the slowest) where it is a straggler (:data:`SLOWEST_STEPS_SHARE`); else None."""
    at = slowest(shares)
    return at if at is not None and shares[at] >= max(SLOWEST_STEPS_SHARE, 1.5 / len(shares)) else None
