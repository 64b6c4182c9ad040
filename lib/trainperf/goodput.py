"""Goodput: how much of a run's wall clock was training, and where the rest went (s, per rank then the mean over
ranks; ``goodput`` a fraction). The definition (Google's ML Goodput Measurement, with the warm-up found from the
data in place of the first step) and each part: docs/profiler.md, "Goodput: where the wall clock went". The parts
add up to ``wall_s``; only ranks whose steps file has the wall clock count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from trainperf.schema import OUTSIDE_PREFIX

PARTS: tuple[str, ...] = ("productive_s", "warmup_excess_s", "startup_s", "wait_outside_s", "unaccounted_s",
                          "after_steps_s")
"""The parts of the wall clock that are no phase outside the steps, in the order they are shown (``wait_outside_s``
only where some rank's steps waited for another's phase outside the steps)."""


def goodput(per_rank: pd.DataFrame, wall_s: Mapping[int, float],
            outside: Sequence[Sequence[Any]] = ()) -> dict[str, float]:
    """Runs columns of one run's goodput from its per-rank summaries (``trainperf.partials.RANK_COLUMNS``), each
    rank's wall clock (``wall_s`` by rank, s) and what the ranks did outside their steps (``outside``: ``[rank,
    name, before_s, between_s, after_s]`` rows). Empty when no rank with steps has a wall clock."""
    rows = per_rank[per_rank["rank"].isin(list(wall_s)) & per_rank["intervals"].gt(0)].reset_index(drop=True)
    if rows.empty:
        return {}
    ranks = rows["rank"].astype(int).tolist()
    wall = np.array([wall_s[r] for r in ranks], dtype=float)
    phases = sorted({str(row[1]) for row in outside if int(row[0]) in ranks})
    spent = {name: np.zeros((len(ranks), 3)) for name in phases}
    for rank, name, *seconds in outside:
        if int(rank) in ranks:
            spent[str(name)][ranks.index(int(rank))] += np.asarray(seconds, dtype=float)
    before, between, after = sum(spent.values(), np.zeros((len(ranks), 3))).T  # per rank, s
    first, last, steps = (rows[c].to_numpy(float) for c in ("all_first_start_s", "all_last_end_s", "all_step_s_sum"))
    steady = rows["step_s_sum"].to_numpy(float) / rows["measured_steps"].fillna(rows["measured_intervals"]).to_numpy(float)
    warming = rows["warmup_step_s_sum"].to_numpy(float) - rows["warmup_steps"].fillna(0).to_numpy(float) * steady
    excess = np.clip(np.nan_to_num(warming), 0.0, None)
    # in the measured window's steps (a warm-up step's is in its excess); NaN where no rank timed such a wait
    waited = rows.get("wait_outside_s", pd.Series(np.nan, index=rows.index)).to_numpy(float)
    wait = np.nan_to_num(waited)
    found = {"productive_s": steps - excess - wait, "warmup_excess_s": excess,
             "startup_s": first - before, "unaccounted_s": last - first - steps - between,
             "after_steps_s": wall - last - after,
             **{f"{OUTSIDE_PREFIX}{name}_s": s.sum(axis=1) for name, s in spent.items()}}
    if np.isfinite(waited).any():
        found["wait_outside_s"] = wait
    # times are written to 1 µs: a part that is zero may come out a few µs below
    out = {"wall_s": float(wall.mean()), "goodput": float(found["productive_s"].sum() / wall.sum())}
    out.update({name: float(max(np.mean(values), 0.0)) for name, values in found.items()})
    return out
