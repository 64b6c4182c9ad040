"""The scaling page's "Where the time goes" and "Ranks and stragglers" (docs/reports.md), from the one definition
of a slow rank and its thresholds in ``trainperf.ranks``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.ranks import OUTSIDE_SHARE, imbalanced, median_of_others, name_straggler, rank_totals, rank_waits, spread
from trainperf.report.html import and_list, fmt_int, fmt_num, fmt_pct, fmt_times
from trainperf.report.phases import PHASE_LABELS, breakdown, slowest_wait
from trainperf.report.run_labels import labels

OVERHEAD = ["compute_s", "comm_s", "comm_exposed_s", "wait_outside_s", "data_s", "slowest_wait_s", "comm_overhead",
            "compute_comm_ratio"]


def overhead(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with phase times: ``elapsed_s`` and the :data:`OVERHEAD` columns some run has (s, and the ratios of
    :func:`trainperf.derive.derive`; ``slowest_wait_s``: :func:`trainperf.report.phases.slowest_wait`)."""
    have = runs[runs[[c for c in PHASE_LABELS if c in runs]].notna().any(axis=1)]
    have = have.assign(configuration=labels(have), slowest_wait_s=slowest_wait(have))
    present = [c for c in OVERHEAD if c in have and have[c].notna().any()]
    return have[["experiment", "configuration", "gpus", "elapsed_s", *present]].reset_index(drop=True)


SINGLE_DEVICE_COMM = 0.01
"""Share of its elapsed time from which a run on one device's communication is named."""


def single_device_comm(runs: pd.DataFrame) -> list[str]:
    """A sentence for each run on one device whose communication (``comm_s``) is :data:`SINGLE_DEVICE_COMM`
    of its elapsed time or more: one device exchanges no gradients, so the timer measures something else."""
    if "comm_s" not in runs:
        return []
    one = runs[runs["gpus"].eq(1).fillna(False).to_numpy(bool)
               & (runs["comm_s"] >= SINGLE_DEVICE_COMM * runs["elapsed_s"]).fillna(False).to_numpy(bool)]
    return [f"Run {r['run_id']}: {fmt_num(r['comm_s'])} s of “communication” on a single device "
            f"({fmt_pct(r['comm_s'] / r['elapsed_s'])} of its elapsed time), which has no other device to exchange "
            "gradients with: the timer measures something else as well (waiting for the device, a collective "
            "over one rank, work around it). Part of the communication of the runs on more devices may be the "
            "same, not an exchange." for r in one.to_dict("records")]


def _rank_totals(runs: pd.DataFrame, steps: Summaries) -> pd.DataFrame:
    """:func:`trainperf.ranks.rank_totals` of the multi-rank runs of ``runs``, with ``experiment``, in their order."""
    totals = rank_totals(steps.per_rank).reset_index()
    times = runs[["run_id", "experiment"]].astype(str).drop_duplicates("run_id", keep="last").merge(
        totals.assign(run_id=totals["run_id"].astype(str)), on="run_id")
    return times[times.groupby("run_id")["rank"].transform("size").to_numpy() > 1].reset_index(drop=True)


def ranks(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per rank of each run with two or more ranks in ``steps``: rows ``experiment, run_id, rank, elapsed_s,
    slowest, of_slowest`` (its elapsed time, s, and as a fraction of its run's slowest rank's), in the runs' order."""
    if steps is None or steps.per_rank.empty:
        return pd.DataFrame(columns=["experiment", "run_id", "rank", "elapsed_s", "slowest", "of_slowest"])
    times = _rank_totals(runs, steps)
    top = times.groupby("run_id")["elapsed_s"].transform("max")
    return times[["experiment", "run_id", "rank", "elapsed_s"]].assign(slowest=times["elapsed_s"].eq(top),
                                                                        of_slowest=times["elapsed_s"] / top)


SPREAD_COLUMNS = ["run_id", "ranks", "slowest_rank", "slowest_s", "mean_s", "fastest_s", "imbalance"]


def rank_spread(runs: pd.DataFrame, per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per multi-rank run, the spread of its ranks' elapsed times (:func:`trainperf.ranks.spread`: s, and the
    imbalance slowest / fastest) with ``mean_understates`` = 1 − mean / slowest; from the :func:`ranks` rows
    ``per_rank`` where there are any, else from the runs' own per-rank columns."""
    if len(per_rank):
        out = pd.DataFrame([{"run_id": run_id, "ranks": len(rows), **spread(rows.set_index("rank")["elapsed_s"])}
                            for run_id, rows in per_rank.groupby("run_id", sort=False)], columns=SPREAD_COLUMNS)
    elif {"rank_imbalance", "mean_rank_elapsed_s"} <= set(runs.columns) and runs["rank_imbalance"].notna().any():
        have = runs[runs["rank_imbalance"].notna()]
        out = pd.DataFrame({"run_id": have["run_id"], "ranks": have.get("ranks"),
                            "slowest_rank": have.get("slowest_rank"), "slowest_s": have["elapsed_s"],
                            "mean_s": have["mean_rank_elapsed_s"],
                            "fastest_s": have["elapsed_s"] / have["rank_imbalance"]}).reset_index(drop=True)
        out["imbalance"] = out["slowest_s"] / out["fastest_s"]
    else:
        return pd.DataFrame(columns=[*SPREAD_COLUMNS, "mean_understates"])
    return out.assign(mean_understates=1 - out["mean_s"] / out["slowest_s"])


def rank_note(steps: Summaries | None, per_rank: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Why no per-rank chart of :func:`ranks` is drawn ("" when one is); ``summary``: :func:`rank_spread`."""
    if len(per_rank):
        return ""
    if steps is not None and len(steps.per_rank):
        return "Every run in the per-rank data has a single rank: no spread to show."
    return ("No per-rank steps given: set the steps parameter to per-rank step tables or profiler run folders to see "
            "every rank" + (" (the table shows the runs' own per-rank figures)." if len(summary) else "."))


def straggler(summary: pd.DataFrame) -> str:
    """A sentence on the run of :func:`rank_spread` ``summary`` with the largest imbalance when it is
    :func:`trainperf.ranks.imbalanced`; "" otherwise."""
    worst = summary.loc[summary["imbalance"].idxmax()] if summary["imbalance"].notna().any() else None
    if worst is None or not imbalanced(worst["slowest_s"], worst["fastest_s"]):
        return ""
    rank = f"rank {int(worst['slowest_rank'])}" if pd.notna(worst["slowest_rank"]) else "the slowest rank"
    return (f"Straggler: in run {worst['run_id']}, {rank} takes {fmt_times(worst['imbalance'])} as long as the "
            f"fastest rank. The mean over ranks understates this run's elapsed time by "
            f"{fmt_pct(worst['mean_understates'])}, so a speed-up computed from it is "
            f"{fmt_pct(worst['slowest_s'] / worst['mean_s'] - 1)} too high.")


def stragglers(runs: pd.DataFrame, steps: Summaries | None) -> tuple[pd.DataFrame, list[str]]:
    """Per multi-rank run in ``steps`` (in the runs' order) :func:`trainperf.ranks.name_straggler`'s sentence, and
    its rows where it measured communication waits (``comm_exposed_s`` as ``comm_wait_s``)."""
    columns = ["experiment", "run_id", "rank", "node", "steps", "step_s", "comm_wait_s", "busy_s", "wait_gap_s",
               "straggler"]
    if steps is None or steps.per_rank.empty:
        return pd.DataFrame(columns=columns), []
    experiment = dict(zip(runs["run_id"].astype(str), runs["experiment"].astype(str)))
    ranks_of = steps.per_rank.groupby(steps.per_rank["run_id"].astype(str))["rank"].nunique()
    waits = rank_waits(steps)
    parts, sentences = [], []
    for run_id in (r for r in runs["run_id"].astype(str) if ranks_of.get(r, 0) > 1):
        try:
            per_rank, sentence = name_straggler(waits[waits["run_id"] == run_id], run_id)
        except ValueError as exc:
            sentences.append(f"Run {run_id}: {exc}.")
            continue
        if per_rank["comm_exposed_s"].notna().any():
            parts.append(per_rank.assign(experiment=experiment[run_id])
                         .rename(columns={"comm_exposed_s": "comm_wait_s"}))
        sentences.append(sentence)
    frame = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    return frame, sentences


def rank_phases(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per rank of each :func:`trainperf.ranks.imbalanced` run (in the runs' order): ``experiment, run_id, rank,
    elapsed_s``, its phase totals over the measured window (s, labelled by :func:`trainperf.report.phases.breakdown`;
    NaN for a phase another run timed) and ``beyond_fastest_s`` (s) over its run's fastest rank."""
    empty = pd.DataFrame(columns=["experiment", "run_id", "rank", "elapsed_s", "beyond_fastest_s"])
    totals = _rank_totals(runs, steps) if steps is not None and len(steps.per_rank) else empty
    times = totals.groupby("run_id")["elapsed_s"]
    slow = imbalanced(times.transform("max"), times.transform("min"))
    if not slow.any():
        return empty
    parts = [pd.concat([group[["experiment", "run_id", "rank", "elapsed_s"]], breakdown(group, per_step=False)[0]],
                       axis=1).assign(beyond_fastest_s=group["elapsed_s"] - group["elapsed_s"].min())
             for _, group in totals[slow].groupby("run_id", sort=False)]
    out = pd.concat(parts, ignore_index=True)  # a phase another run timed is NaN, its extra time last
    return out[[*(c for c in out if c != "beyond_fastest_s"), "beyond_fastest_s"]]


SLOW_RANK_COLUMNS = ["experiment", "run_id", "rank", "fastest_rank", "elapsed_s", "fastest_s", "extra_s", "phase",
                     "phase_extra_s", "comm", "comm_s", "others_comm_s", "waited_s", "inside"]


def slow_ranks(table: pd.DataFrame) -> pd.DataFrame:
    """Per run of :func:`rank_phases` ``table`` (s over the measured window): its slowest ``rank`` and
    ``fastest_rank``, their ``elapsed_s`` and ``fastest_s``, the ``extra_s`` between them, the ``phase`` holding
    most of it (``phase_extra_s``), the communication timed (``comm``: its label; ``comm_s`` the slowest rank's,
    ``others_comm_s`` the median of the others'), ``waited_s`` = ``others_comm_s − comm_s`` and ``inside``: whether
    the others wait for it in the synchronised steps (``waited_s`` ≥ :data:`~trainperf.ranks.OUTSIDE_SHARE` ·
    ``extra_s``; NA where no communication was timed)."""
    rows = []
    phase_names = [c for c in table if c not in ("experiment", "run_id", "rank", "elapsed_s", "beyond_fastest_s")]
    comm = next((c for c in (PHASE_LABELS["comm_exposed_s"], PHASE_LABELS["comm_s"]) if c in table), None)
    for run_id, group in table.groupby("run_id", sort=False):
        slow, fast = group.loc[group["elapsed_s"].idxmax()], group.loc[group["elapsed_s"].idxmin()]
        where = max(phase_names, key=lambda c: slow[c] - fast[c]) if phase_names else None
        theirs = median_of_others(group[comm].to_numpy(float), group.index.get_loc(slow.name)) if comm else np.nan
        known = pd.notna(theirs) and pd.notna(slow[comm])
        mine, theirs = (slow[comm], theirs) if known else (np.nan, np.nan)
        extra = slow["elapsed_s"] - fast["elapsed_s"]
        rows.append({"experiment": slow["experiment"], "run_id": run_id, "rank": int(slow["rank"]),
                     "fastest_rank": int(fast["rank"]), "elapsed_s": slow["elapsed_s"],
                     "fastest_s": fast["elapsed_s"], "extra_s": extra, "phase": where,
                     "phase_extra_s": slow[where] - fast[where] if where is not None else np.nan,
                     "comm": comm if known else None, "comm_s": mine, "others_comm_s": theirs,
                     "waited_s": theirs - mine, "inside": (theirs - mine >= OUTSIDE_SHARE * extra) if known else pd.NA})
    return pd.DataFrame(rows, columns=SLOW_RANK_COLUMNS)


def longer(r: dict) -> str:
    """A row of :func:`slow_ranks` in words: ``rank 3 takes 2.0 s longer than rank 0 (12.0 s against 10.0 s)``."""
    return (f"rank {r['rank']} takes {fmt_num(r['extra_s'], 1)} s longer than rank {r['fastest_rank']} "
            f"({fmt_num(r['elapsed_s'], 1)} s against {fmt_num(r['fastest_s'], 1)} s)")


def rank_time_notes(slow: pd.DataFrame) -> list[str]:
    """Per run of :func:`slow_ranks` ``slow``: in which phase its slowest rank spends its extra time, and whether the
    other ranks wait for it inside the synchronised steps or it works alone outside them (``inside``)."""
    out = []
    for r in slow.to_dict("records"):
        text = f"Run {r['run_id']}: {longer(r)}"
        if r["phase"] is not None:
            text += f", {fmt_num(r['phase_extra_s'], 1)} s of it in {r['phase']}"
        if pd.isna(r["inside"]):
            out.append(text + ". No communication times: whether the other ranks wait for it cannot be told.")
        elif r["inside"]:
            out.append(text + f". The other ranks' {r['comm']} is {fmt_num(r['waited_s'], 1)} s longer than its own: "
                              "they wait for it in the synchronised steps (a straggler inside the steps), and the job "
                              "is as slow as this rank.")
        else:
            out.append(text + f". Yet the other ranks' {r['comm']} is not longer ({fmt_num(r['others_comm_s'], 1)} s "
                              f"against its own {fmt_num(r['comm_s'], 1)} s): they do not wait for this work in the "
                              "gradient all-reduce, so it happens outside the synchronised steps — work this rank does "
                              "alone (evaluation, logging, checkpointing, or a step the others do not share). The job "
                              "ends when this rank does; the other ranks idle at the end, which is the “waiting for "
                              "the slowest rank” of the time breakdown.")
    return out


def named_ranks(waits: pd.DataFrame, limit: int = 8) -> tuple[pd.DataFrame, str]:
    """The rows of :func:`stragglers`' frame a page names: every rank of a run of at most ``limit``; of a larger
    run, the ``limit // 2`` that wait least, as many that wait most and its straggler; a sentence naming those."""
    parts, partial = [], []
    for run_id, rows in waits.groupby("run_id", sort=False):
        if len(rows) > limit:
            order = rows.sort_values("comm_wait_s", kind="stable").index
            keep = order[:limit // 2].union(order[-(limit - limit // 2):]).union(rows.index[rows["straggler"]])
            partial.append(f"{run_id} ({len(keep)} of {fmt_int(len(rows))})")
            rows = rows.loc[keep].sort_values("rank")
        parts.append(rows)
    named = pd.concat(parts) if parts else waits
    if not partial:
        return named, ""
    return named, (f"Runs of more than {limit} ranks name the {limit // 2} ranks that wait least, the "
                   f"{limit - limit // 2} that wait most and the straggler: {and_list(partial)}; their charts show every rank.")

