"""Which rank holds a data-parallel job back.

Under DDP every rank waits in the gradient all-reduce until the slowest rank
has its gradients ready, so every rank's step takes as long as the slowest
rank's and per-rank step or backward times look equal: the slow rank hides.
What differs is the wait. A rank that computes longer arrives last at the
all-reduce and waits least; the others wait for it. The communication a rank
waits for (``comm_exposed_s``, the all-reduce time left after its own
backward finished) names the straggler: the rank that waits least, when its
wait is clearly below the others' (the verdict and its threshold are
``trainperf.ranks``'s: :data:`~trainperf.ranks.WAIT_GAP_SHARE`).
"""

from __future__ import annotations

import pandas as pd

from trainperf.aggregate import Summaries, summarize
from trainperf.ranks import WAIT_GAP_SHARE, wait_gaps, waits_enough_less
from trainperf.reading.tables import as_intervals


def rank_waits(summaries: Summaries) -> pd.DataFrame:
    """Per run and rank with measured steps (warm-up left out): rows ``run_id,
    rank, node, steps, step_s, comm_exposed_s, busy_s`` (medians over steps,
    seconds; ``busy_s`` = ``step_s - comm_exposed_s``), by run and rank."""
    per_rank = summaries.per_rank[summaries.per_rank["measured_intervals"].gt(0)]
    out = pd.DataFrame({"run_id": per_rank["run_id"].astype(str), "rank": per_rank["rank"],
                        "node": per_rank["node"], "steps": per_rank["measured_intervals"].astype(int),
                        "step_s": per_rank["step_s_median"], "comm_exposed_s": per_rank["comm_exposed_s_median"]})
    return out.sort_values(["run_id", "rank"]).reset_index(drop=True).assign(
        busy_s=lambda o: o["step_s"] - o["comm_exposed_s"])


def find_straggler(steps: pd.DataFrame | Summaries, run_id: str | None = None,
                   min_gap_share: float = WAIT_GAP_SHARE) -> tuple[pd.DataFrame, str]:
    """Per-rank communication waits of one run and the straggler they name.

    ``steps``: the run's step intervals (``trainperf.load_steps``) or their
    summaries (``trainperf.load_summaries``); ``run_id`` picks a run when
    they hold several. Warm-up steps are left out. Returns the run's
    :func:`rank_waits` rows with ``wait_gap_s`` (how much less the rank waits
    than the median of the other ranks, s) and ``straggler``, and a sentence
    naming the straggler, or saying why none is named (see :func:`name_straggler`)."""
    summaries = steps if isinstance(steps, Summaries) else summarize(as_intervals(steps))
    if run_id is None:
        runs = summaries.run_ids
        if len(runs) != 1:
            raise ValueError(f"the steps hold {len(runs)} runs ({', '.join(runs)}): pass run_id")
        run_id = runs[0]
    return name_straggler(rank_waits(summaries.of(run_id)), run_id, min_gap_share)


def name_straggler(per_rank: pd.DataFrame, run_id: str,
                   min_gap_share: float = WAIT_GAP_SHARE) -> tuple[pd.DataFrame, str]:
    """The straggler among the :func:`rank_waits` rows of run ``run_id``: the
    rank that waits least, when it waits less than the median of the others by
    ``min_gap_share`` of the median step time or more. Returns the rows (index
    from 0) with ``wait_gap_s`` and ``straggler`` added, and a sentence.
    ValueError when the run has no measured steps."""
    if per_rank.empty:
        raise ValueError(f"run {run_id!r}: no measured (non-warm-up) steps")
    waits = per_rank["comm_exposed_s"].reset_index(drop=True)
    per_rank = per_rank.reset_index(drop=True).assign(wait_gap_s=wait_gaps(waits.to_numpy(float)), straggler=False)
    if len(per_rank) < 2:
        return per_rank, f"Run {run_id}: one rank, no straggler to find."
    if waits.isna().all():
        return per_rank, (f"Run {run_id}: no communication waits measured (comm_exposed_s is empty), "
                          "so no straggler can be named.")
    slow = int(waits.idxmin())
    gap = per_rank.at[slow, "wait_gap_s"]
    step = per_rank["step_s"].median()
    rank = int(per_rank.at[slow, "rank"])
    if not waits_enough_less(gap, step, min_gap_share):
        return per_rank, (f"Run {run_id}: no straggler. The ranks wait {_ms(waits.min())} to {_ms(waits.max())} "
                          f"per step for communication (median), a spread below {min_gap_share * 100:.0f} % of a "
                          f"{_ms(step)} step.")
    per_rank.loc[slow, "straggler"] = True
    return per_rank, (f"Run {run_id}: rank {rank} is the straggler. It waits {_ms(waits[slow])} per step for "
                      f"communication, the other ranks {_ms(waits.drop(slow).median())} (median): they wait "
                      f"{_ms(gap)} per step for it, {gap / step * 100:.0f} % of a {_ms(step)} step.")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"
