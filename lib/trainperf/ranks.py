"""Which rank holds a job back, defined once for the aggregator (``slowest_rank``, ``rank_imbalance``,
``mean_rank_elapsed_s``), the straggler finder (``trainperf.stragglers``), the scaling page's ranks
(``trainperf.report.scaling.ranks``) and the live view (``trainperf.profiler.watch``), with one set of thresholds.

Over the measured window a rank is judged by its elapsed time (:func:`rank_totals`): the slowest rank has the
largest (the job's elapsed time is its), the imbalance is slowest / fastest (:func:`spread`), a run is imbalanced
from :data:`IMBALANCE_STRAGGLER` (:func:`imbalanced`). Per synchronised step (DDP) every rank's step lasts as
long as the slowest's, so the slow rank is the one that waits least for communication (``comm_exposed_s``):
a straggler from :data:`WAIT_GAP_SHARE` (:func:`waits_enough_less`); while a run is written, the slowest rank
is the one with the most work a step (step time less that wait: :func:`slowest`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trainperf.schema import STEP_PHASE_COLUMNS

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
    """Per run and rank with measured intervals of per-rank summaries (``trainperf.partials.RANK_COLUMNS``):
    ``elapsed_s`` over the measured window (s: the end of its last interval minus the start of its first where
    every interval of its run has a start, else the sum of its intervals' times) and the phase totals over the
    window (s; NaN where never timed). Index ``run_id, rank``."""
    timed = per_rank.groupby(per_rank["run_id"].astype(str), sort=False)["untimed_starts"].transform("sum").eq(0)
    elapsed = (per_rank["last_end_s"] - per_rank["first_start_s"]).where(timed, per_rank["step_s_sum"])
    out = per_rank[["run_id", "rank", *STEP_PHASE_COLUMNS]].assign(elapsed_s=elapsed.to_numpy())
    return out[per_rank["measured_intervals"].gt(0).to_numpy()].set_index(["run_id", "rank"])


def slowest(times: np.ndarray) -> int | None:
    """The position of the slowest rank among ``times`` (s): the largest known, the first of equals; None if none."""
    return int(np.nanargmax(times)) if np.isfinite(times).any() else None


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


def wait_gaps(waits: np.ndarray) -> np.ndarray:
    """How much less each rank waits for communication than the median of the other ranks (s per step)."""
    return np.array([median_of_others(waits, i) - waits[i] for i in range(len(waits))], dtype=float)


def waits_enough_less(gap: float, step_s: float, min_gap_share: float = WAIT_GAP_SHARE) -> bool:
    """The straggler verdict of the rank that waits least: its gap (s) is ``min_gap_share`` of the step (s) or more."""
    return bool(gap >= min_gap_share * step_s)


SLOWEST_STEPS_SHARE = 0.5
"""Share of the steps (fraction) of which one rank must be the slowest to be named the straggler of a comparison,
and at least 1.5 times the share it would have were every rank as often the slowest (1.5 / ranks)."""


def often_slowest(shares: np.ndarray) -> int | None:
    """The position of the rank that is the slowest of the most steps (``shares``: per rank, the fraction of steps
    of which it is the slowest) where it is a straggler (:data:`SLOWEST_STEPS_SHARE`); else None."""
    at = slowest(shares)
    return at if at is not None and shares[at] >= max(SLOWEST_STEPS_SHARE, 1.5 / len(shares)) else None
