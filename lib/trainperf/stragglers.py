"""The straggler of a data-parallel run, from its steps: :func:`find_straggler` (the verdict and its threshold are
``trainperf.ranks``'s: :func:`~trainperf.ranks.name_straggler`)."""

from __future__ import annotations

import pandas as pd

from trainperf.aggregate import Summaries, summarize
from trainperf.ranks import name_straggler, rank_waits
from trainperf.reading.tables import as_intervals

__all__ = ["find_straggler", "name_straggler", "rank_waits"]


def find_straggler(steps: pd.DataFrame | Summaries, run_id: str | None = None) -> tuple[pd.DataFrame, str]:
    """Per-rank communication waits of one run and the straggler they name (:func:`~trainperf.ranks.name_straggler`).
    ``steps``: the run's step intervals (``trainperf.load_steps``) or their summaries (``trainperf.load_summaries``);
    ``run_id`` picks a run when they hold several. Warm-up steps are left out."""
    summaries = steps if isinstance(steps, Summaries) else summarize(as_intervals(steps))
    if run_id is None:
        runs = summaries.run_ids
        if len(runs) != 1:
            raise ValueError(f"the steps hold {len(runs)} runs ({', '.join(runs)}): pass run_id")
        run_id = runs[0]
    return name_straggler(rank_waits(summaries.select([run_id])), run_id)
