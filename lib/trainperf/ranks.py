"""Which rank holds a job back: each rank's elapsed time, the slowest rank, the imbalance between ranks and the
straggler verdicts, with the one set of thresholds they use. The aggregator (the runs columns ``elapsed_s``,
``slowest_rank``, ``mean_rank_elapsed_s`` and ``rank_imbalance``), the straggler finder (``trainperf.stragglers``),
the scaling page's ranks (``trainperf.report.scaling.ranks``) and the live view (``trainperf.profiler.watch``)
all take them from here.

A rank is judged two ways, each with its threshold:

* over the measured window, by its elapsed time ``e_r`` (:func:`rank_elapsed`): the slowest rank has the largest
  (the job's elapsed time is its, never the mean over ranks), the imbalance is ``max_r e_r / min_r e_r``
  (:func:`spread`), and a run is imbalanced from :data:`IMBALANCE_STRAGGLER` (:func:`imbalanced`); whether
  the other ranks wait for its extra time inside the synchronised steps is told with :data:`OUTSIDE_SHARE`.
* per synchronised step, by the communication each rank waits for (``comm_exposed_s``): under DDP every rank's
  step lasts as long as the slowest's, so the slow rank shows as the one that waits least, a straggler when the
  other ranks wait more by :data:`WAIT_GAP_SHARE` of a step or more (:func:`waits_enough_less`); while a run
  is written, its slowest rank is the one with the most work a step (step time less that wait).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trainperf.schema import STEP_PHASE_COLUMNS

IMBALANCE_STRAGGLER = 1.1
"""Imbalance (the slowest rank's elapsed time over the measured window / the fastest rank's; a ratio of seconds)
from which a run's slowest rank is called a straggler and its extra time is explained: 10 % more time than the
fastest rank, beyond the spread of a balanced job's ranks (the seed runs on 4 GPUs: 1.02)."""
WAIT_GAP_SHARE = 0.05
"""Share of the median step time (seconds of wait per second of step) by which the rank that waits least for
communication must wait less than the other ranks' median to be named the straggler. A share of one step, not
of the window: a straggler inside the synchronised steps delays every step by the gap, so 5 % of each step is
5 % of the job, where the window's ranks differ by the work one rank does alone."""
OUTSIDE_SHARE = 0.5
"""A slow rank's extra time (s) counts as waited for inside the synchronised steps when the other ranks'
communication is longer than its own by at least this share of it; otherwise it lies outside them (work the
rank does alone)."""


def rank_elapsed(per_rank: pd.DataFrame) -> pd.Series:
    """Each rank's elapsed time over the measured window (s), from per-rank summaries
    (``trainperf.partials.RANK_COLUMNS``): the end of its last interval minus the start of its first where
    every interval of its run has a start, else the sum of its intervals' times. Same index as ``per_rank``."""
    run = per_rank["run_id"].astype(str)
    timed = per_rank.groupby(run, sort=False)["untimed_starts"].transform("sum").eq(0)
    timed &= per_rank["measured_intervals"].gt(0)
    return (per_rank["last_end_s"] - per_rank["first_start_s"]).where(timed, per_rank["step_s_sum"])


def rank_totals(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per run and rank with measured intervals: ``elapsed_s`` (:func:`rank_elapsed`)
    and the phase totals over the measured window (s; NaN where never timed).
    Index ``run_id, rank``."""
    out = per_rank[["run_id", "rank", *STEP_PHASE_COLUMNS]].assign(elapsed_s=rank_elapsed(per_rank).to_numpy())
    return out[per_rank["measured_intervals"].gt(0).to_numpy()].set_index(["run_id", "rank"])


def slowest(times: np.ndarray) -> int | None:
    """The position of the slowest rank among ``times`` (each rank's time, s): the largest known one, the
    first of equals; None when no time is known."""
    return int(np.nanargmax(times)) if np.isfinite(times).any() else None


def spread(elapsed: pd.Series) -> dict[str, Any]:
    """The ranks of one run from their elapsed times (s; indexed by rank, NaN unknown): ``slowest_rank`` (its
    label), ``slowest_s``, ``mean_s`` and ``fastest_s`` (s), and ``imbalance`` = slowest / fastest (NaN where the
    fastest took no time). Empty when no time is known."""
    at = slowest(elapsed.to_numpy(float))
    if at is None:
        return {}
    top, low = float(elapsed.max()), float(elapsed.min())
    return {"slowest_rank": elapsed.index[at], "slowest_s": top, "mean_s": float(elapsed.mean()), "fastest_s": low,
            "imbalance": top / low if low > 0 else math.nan}


def imbalanced(slowest_s: Any, fastest_s: Any) -> Any:
    """Whether a run's slowest rank (elapsed ``slowest_s``) takes :data:`IMBALANCE_STRAGGLER` times its fastest
    (``fastest_s``) or more: floats or arrays alike (False where either is unknown)."""
    return slowest_s >= IMBALANCE_STRAGGLER * fastest_s


def median_of_others(values: np.ndarray, at: int) -> float:
    """The median over the ranks other than position ``at`` of a per-rank value (NaN left out; NaN when no
    other rank has one): what a rank is compared with."""
    others = np.delete(np.asarray(values, float), at)
    known = others[~np.isnan(others)]
    return float(np.median(known)) if len(known) else math.nan


def wait_gaps(waits: np.ndarray) -> np.ndarray:
    """How much less each rank waits for communication than the median of the other ranks (s per step)."""
    return np.array([median_of_others(waits, i) - waits[i] for i in range(len(waits))], dtype=float)


def waits_enough_less(gap: float, step_s: float, min_gap_share: float = WAIT_GAP_SHARE) -> bool:
    """The straggler verdict of the rank that waits least: its :func:`wait_gaps` gap (s) is ``min_gap_share``
    (:data:`WAIT_GAP_SHARE`) of the median step ``step_s`` (s) or more."""
    return bool(gap >= min_gap_share * step_s)


def waited_for(others_comm_s: float, comm_s: float, extra_s: float) -> bool:
    """Whether the other ranks wait for a slow rank's ``extra_s`` (s) inside the synchronised steps: their
    communication (``others_comm_s``, s) is longer than its own (``comm_s``) by :data:`OUTSIDE_SHARE` of it."""
    return bool(others_comm_s - comm_s >= OUTSIDE_SHARE * extra_s)
