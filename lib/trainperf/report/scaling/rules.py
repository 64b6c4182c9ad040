"""What to change on the scaling page: its rules, each reading the :class:`ScalingPage`, and its section."""

from __future__ import annotations

import pandas as pd

from trainperf.report.html import Html, fmt_num, fmt_pct
from trainperf.report.scaling.analysis import ScalingPage
from trainperf.report.what_to_change import (Found, Rule, candidates as found_by, clean, data_loading,
                                             exposed_communication, oversubscription, row, section,
                                             waits_for_outside_work)


def outside_steps(slow: pd.DataFrame | None) -> Found:
    """A rank that takes longer than the others (:func:`trainperf.report.scaling.ranks.slow_ranks` ``slow``, of
    the runs a change may be concluded from; None: no per-rank steps given), per experiment: the job ends when
    it does, so its extra time is the gain, of the run's measured window."""
    if slow is None:
        return Found(lacking="no per-rank steps are given, so no rank's own time can be told")
    out = Found()
    for name, group in slow.groupby("experiment", sort=False):
        alone = group["inside"].eq(False).fillna(False)
        waited = group["inside"].eq(True).fillna(False)
        if alone.any():
            rows = group[alone.to_numpy(bool)]
            change = ("Move the work one rank does alone outside the synchronised steps (evaluation, logging, "
                      "checkpointing) off it: spread it over the ranks or run it asynchronously")
        elif waited.any():
            rows = group[waited.to_numpy(bool)]
            change = "Balance the slowest rank's work: the other ranks wait for it inside the synchronised steps"
        else:
            rows = group
            change = "Find what the slowest rank does that the others do not (no communication times tell where)"
        share = rows["extra_s"] / rows["elapsed_s"]
        evidence = "; ".join(f"{r['run_id']}: rank {r['rank']} takes {fmt_num(r['extra_s'], 1)} s longer than rank "
                             f"{r['fastest_rank']} ({fmt_num(r['elapsed_s'], 1)} s against "
                             f"{fmt_num(r['fastest_s'], 1)} s), {fmt_pct(r['extra_s'] / r['elapsed_s'])} of the run"
                             for r in rows.to_dict("records"))
        out.rows.append(row(change, evidence, float(share.mean()), "elapsed time (the slowest rank's)",
                            f"{name}: {', '.join(rows['run_id'])}", runs=len(rows),
                            seconds=float(rows["extra_s"].mean()), per="measured window"))
    if not out.rows:
        out.lacking = "no run has a rank that takes 1.1× its fastest rank or more"
    return out


def slow_rank_work(page: ScalingPage) -> Found:
    """:func:`outside_steps` of the page's slow ranks, of the runs a change may be concluded from."""
    if page.steps is None or page.steps.per_rank.empty:
        return outside_steps(None)
    return outside_steps(page.slow_ranks[page.slow_ranks["run_id"].isin(clean(page.runs)["run_id"].astype(str))])


RULES: tuple[tuple[str, Rule], ...] = (
    ("a rank's work outside the synchronised steps", slow_rank_work),
    ("more busy processes than cores", oversubscription),
    ("waits for another rank's work outside the steps", waits_for_outside_work),
    ("exposed communication", exposed_communication),
    ("data loading", data_loading),
)
"""The scaling page's rules: what each looks at, and its function."""


def candidates(page: ScalingPage) -> tuple[pd.DataFrame, list[str]]:
    """Every candidate change the :data:`RULES` found on ``page``
    (:func:`trainperf.report.what_to_change.candidates`)."""
    return found_by(RULES, page)


def what_to_change(page: ScalingPage) -> Html:
    """The scaling page's "What to change" section (:func:`trainperf.report.what_to_change.section`)."""
    return section(*candidates(page))
