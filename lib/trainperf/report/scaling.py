"""The scaling report: how much faster each experiment runs as devices are
added, where the time goes, how ranks differ, and what a fitted scaling law
projects beyond the measured scale next to a straight line; projections and
the headline only from experiments that change nothing but the device count."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.invariants import EMPTIED, serial_fraction_possible
from trainperf.report.configs import by_experiment, doubtful, keep_experiments, labels, marks, study_of
from trainperf.report.html import (Html, fmt_int, fmt_num, fmt_pct, fmt_sig, fmt_times, fmt_usd,
                                   headline as banner)
from trainperf.report.noise import (NO_INTERVAL, and_list, around, call, configuration_means, content, intervals_per_run,
                                    job_frames, remember, summaries_content)
from trainperf.report.page import InputError
from trainperf.report.phases import PHASE_LABELS, breakdown, per_experiment, slowest_wait
from trainperf.scaling import NAMES as LAWS, ScalingFit, fit, karp_flatt, parameter_text, second_study_rows
from trainperf.stats import FASTER, SLOWER, verdict
from trainperf.aggregate import Summaries, rank_totals
from trainperf.stragglers import name_straggler, rank_waits

BAND_LEVEL = 0.95
MIN_FIT_POINTS = 3  # device counts before a law is fitted: a 2-parameter law through 2 points has no error
SAME_TRAINING = {"single": "ddp"}  # one process is DDP at world size 1: single → ddp is no change


def studies(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of scaling studies measured at two or more device counts
    (:func:`keep_experiments`), each study as an experiment named with its
    kind: ``seed000-scaling (weak scaling)``. An experiment that holds several
    studies (``scaling_study``: what their runs hold constant) is one per study,
    ``my-sweep (global batch 8; strong scaling)``; a run in two studies
    (``second_scaling_study``) is shown in both, with each study's figures
    (:func:`trainperf.scaling.second_study_rows`)."""
    shared = second_study_rows(runs)
    if len(shared):
        attrs, runs = runs.attrs, pd.concat([runs, shared], ignore_index=True).copy()  # copy: one block per dtype
        runs.attrs = attrs
    study = study_of(runs)
    kinds = runs.groupby(study, sort=False)["scaling_type"].agg(
        lambda k: k.dropna().iloc[0] if k.dropna().nunique() == 1 else None)
    named = {name: _with_kind(name, str(experiment), KIND_LABELS.get(kinds[name], KIND_LABELS[None]))
             for name, experiment in zip(study, runs["experiment"])}
    runs = runs.assign(experiment=study.map(named))
    counts = runs.groupby("experiment")["gpus"].nunique()
    return keep_experiments(runs, counts >= 2, ["gpus", "micro_batch_size", "run_id"],
                            "measured at one device count only: no scaling",
                            "no experiment has runs at two or more device counts (column gpus): measure one "
                            "experiment at several device counts, e.g. with torchrun --nproc-per-node 1, 2, 4 "
                            f"(experiments: {', '.join(map(str, counts.index)) or 'none'})")


def _with_kind(study: str, experiment: str, kind: str) -> str:
    """``study`` (an experiment, or ``experiment (its series)``) with ``kind`` in its brackets."""
    if study != experiment and study.endswith(")"):
        return f"{study[:-1]}; {kind})"
    return f"{study} ({kind})"


# --- what changes besides the device count ------------------------------------------

def changes(group: pd.DataFrame) -> list[str]:
    """What differs between the runs of one experiment besides the device
    count, e.g. ``strategy ddp (from 8 devices) → fsdp (from 64 devices)``.
    A batch scaled with the devices (strong or weak scaling) and single → ddp
    (:data:`SAME_TRAINING`) are no change."""
    columns = [("strategy", "strategy"), ("precision", "precision"), ("model", "model"), ("platform", "platform"),
               ("seq_len", "sequence length")]
    per_device = group["micro_batch_size"] * group["grad_accum_steps"].fillna(1)
    total = group["global_batch_size"].fillna(per_device * group["gpus"])
    if not (per_device.isna().all() or per_device.nunique() <= 1 or total.nunique() <= 1):  # neither strong nor weak
        columns.insert(1, ("micro_batch_size", "micro-batch size"))
    compared = group[[c for c, _ in columns if c in group]]
    if "strategy" in compared:
        compared = compared.assign(strategy=compared["strategy"].astype("string").str.lower().replace(SAME_TRAINING))
    varies = compared.nunique() > 1
    out = []
    for column, what in ((c, w) for c, w in columns if varies.get(c, False)):
        value = [str(v) for v in compared[column]]
        moves = group.iloc[[i for i, v in enumerate(value) if i == 0 or v != value[i - 1]]]
        out.append(f"{what} " + " → ".join(
            f"{fmt_int(v) if isinstance(v, float) else v} (from {fmt_int(g)} device{'s' if g > 1 else ''})"
            for v, g in zip(moves[column], moves["gpus"])))
    return out


def confounded(runs: pd.DataFrame) -> list[str]:
    """A warning for each experiment whose runs differ in more than the device count."""
    return [f"{name} changes more than the device count: {'; '.join(found)}. Its multiplier mixes scaling with "
            "these changes, so it is not fitted or projected."
            for name, group in by_experiment(runs) if (found := changes(group))]


# --- frames ---------------------------------------------------------------------------

SPEED = ("tokens_per_s", "samples_per_s", "elapsed_s")
"""Speed columns a scaling table shows (those any run has), as the mean over a configuration's repeats."""


def table(runs: pd.DataFrame, steps: Summaries | None = None) -> pd.DataFrame:
    """One row per configuration of each experiment (repeats grouped as
    :func:`trainperf.report.noise.run_intervals` groups them, speeds their mean):
    experiment, configuration, devices (``gpus``; ``ideal``: / the baseline
    configuration's), ``runs`` (its repeats), its speed (tokens/s, samples/s,
    elapsed time: those any run has) with ``interval`` (the throughput's 95 %
    interval as text), multiplier (mean throughput / the baseline's; the
    elapsed-time ratio where that is the basis) and efficiency (/ ideal) with
    95 % intervals from that of the throughput ratio (``multiplier_low``/``_high``,
    ``efficiency_low``/``_high``, and as text ``multiplier_interval``,
    ``efficiency_interval``: with what it comes from, or why there is none),
    the Karp–Flatt serial fraction with its interval (``serial_low``/``_high``),
    the basis of the comparison, ``only_devices_change``, ``scaling_kind``,
    ``marks`` (its runs' :func:`trainperf.report.configs.marks`), ``known_error``
    (their sources' known errors, ``""``: none) and ``concluded``: whether conclusions may be drawn from the row (none of its
    runs, nor of the baseline configuration's, is projected, oversubscribed or
    incomplete)."""
    found = pd.concat([rows for rows, _ in _experiments(runs, steps).values()], ignore_index=True)
    speed = [c for c in SPEED if runs[c].notna().any()]
    return found[["experiment", "configuration", "gpus", "runs", *speed, "interval", "ideal",
                  "scaling_multiplier", "multiplier_low", "multiplier_high", "multiplier_interval",
                  "scaling_efficiency", "efficiency_low", "efficiency_high", "efficiency_interval",
                  "serial_fraction", "serial_low", "serial_high", "serial_emptied", "scaling_basis", "only_devices_change",
                  "scaling_kind", "marks", "known_error", "concluded"]]


KIND_LABELS = {"strong": "strong scaling", "weak": "weak scaling", None: "strong or weak not known"}
"""``scaling_kind`` of :func:`table`, from a study's ``scaling_type``; :func:`studies` puts it in the study's name."""


def kind_of(group: pd.DataFrame) -> str | None:
    """The ``scaling_type`` of one study's runs: ``strong``, ``weak``, or None (not known, or mixed)."""
    kinds = group["scaling_type"].dropna().unique() if "scaling_type" in group else []
    return str(kinds[0]) if len(kinds) == 1 else None


def laws(runs: pd.DataFrame) -> list[str]:
    """Per study, which laws judge it: strong scaling by Amdahl, USL and the
    Karp–Flatt serial fraction (the same total work on more devices); weak
    scaling by Gustafson's scaled speedup — the multiplier, since the work
    grows with the devices — and the per-device throughput (efficiency), with
    USL for a projection; one not known, as strong scaling, said so."""
    out = []
    for name, group in by_experiment(runs):
        kind = kind_of(group)
        if kind == "weak":
            out.append(f"{name}: the same work per device at every device count. The multiplier is Gustafson's "
                       "scaled speedup and the efficiency the per-device throughput against the baseline's; "
                       "Amdahl's law and the Karp–Flatt serial fraction assume the same total work and are not "
                       "applied (projection: USL only).")
        elif kind == "strong":
            out.append(f"{name}: the same total work per optimizer step at every device count: Amdahl's law, "
                       "USL and the Karp–Flatt serial fraction apply.")
        else:
            out.append(f"{name}: the data does not tell whether the work per step or per device is held (give "
                       "global_batch_size, tokens and steps, or scaling_type): judged as strong scaling.")
    return out


def shown_columns(group: pd.DataFrame) -> list[str]:
    """The columns of one experiment's :func:`table` rows a report shows: the speed its
    comparison is based on (elapsed time, else tokens/s, else samples/s), its interval and the
    efficiency's as text (the multiplier's is the efficiency's times the ideal), the figures, the
    rows' marks, and nothing empty."""
    if str(group["scaling_basis"].iloc[0]).startswith("elapsed"):
        speed = "elapsed_s"
    else:
        speed = next((c for c in SPEED if c in group and group[c].notna().any()), "elapsed_s")
    columns = ["configuration", "gpus", "runs", speed, "interval", "scaling_multiplier", "scaling_efficiency",
               "efficiency_interval", "serial_fraction", "marks"]
    keep = group[columns].notna().any() & ~group[columns].isin(["–", ""]).all()
    return [c for c in columns if keep[c]]


BASELINE = "baseline"
SOURCES = {"steps of one run": "steps", "steps, repeats": "steps of repeats", "repeats, no steps": "repeats"}
"""What an interval comes from, in the words of the interval columns."""


def _experiments(runs: pd.DataFrame, steps: Summaries | None) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per experiment, :func:`_experiment`; computed once per process for the same
    ``runs`` and ``steps`` (by content): the headline, table and notes all ask."""
    return remember(("scaling", content(runs), *summaries_content(steps)),
                    lambda: {name: _experiment(group, job_frames(steps)) for name, group in by_experiment(runs)})


def _experiment(runs: pd.DataFrame, frames: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One experiment's :func:`table` rows and their
    :func:`trainperf.report.noise.run_intervals` rows (same order) from the steps'
    :func:`trainperf.report.noise.job_frames`; shared: not to be changed."""
    group = runs.reset_index(drop=True)
    weak = kind_of(group) == "weak"  # Karp–Flatt assumes the same total work: none for weak scaling
    every = intervals_per_run(group, frames)
    key = every["configuration"].fillna(every["run_id"])
    base_key = set(key[(group["run_id"] == group["baseline_run_id"]).fillna(False).to_numpy(bool)])  # its configuration
    rows, found = configuration_means(group, every, (*SPEED, "scaling_multiplier"))
    at_base = found.index[found["configuration"].fillna(found["run_id"]).isin(base_key)]
    base = at_base[0] if len(at_base) else None
    multiplier, ideal = rows["scaling_multiplier"], pd.Series(np.nan, index=rows.index)
    if base is not None:
        multiplier, ideal = multiplier / multiplier[base], rows["gpus"] / rows.at[base, "gpus"]
    low, high, multiplier_text, efficiency_text = map(np.array, zip(*(
        _multiplier_interval(found, i, base, m, p) for i, m, p in zip(rows.index, multiplier, ideal))))
    def serial(speedup: np.ndarray, devices: np.ndarray) -> np.ndarray:
        return np.full(len(rows), np.nan) if weak else karp_flatt(speedup, devices)

    point = serial(multiplier, ideal)
    possible = serial_fraction_possible(point)  # outside [0, 1]: emptied, said by serial_notes

    known = group["known_error"] if "known_error" in group else pd.Series(pd.NA, index=group.index)
    shown = group.assign(marks=marks(group), doubtful=doubtful(group), known_error=known.astype(object)
                         ).groupby(key.to_numpy(), sort=False)
    row_marks = shown["marks"].agg(lambda m: "; ".join(dict.fromkeys(x for x in m if x)))
    row_errors = shown["known_error"].agg(lambda m: "; ".join(dict.fromkeys(x for x in m.dropna() if x)))
    row_doubt = shown["doubtful"].any()
    configuration = found["configuration"].fillna(found["run_id"])
    doubt = configuration.map(row_doubt).to_numpy(bool)
    concluded = ~doubt & (base is not None) & (not doubt[base] if base is not None else False)
    return rows.assign(
        configuration=labels(rows), interval=_throughput_intervals(found, rows), ideal=ideal,
        multiplier_low=low, multiplier_high=high,  # e falls as S rises; its interval held within [0, 1]
        serial_low=np.where(possible, np.clip(serial(high, ideal), 0, 1), np.nan),
        serial_high=np.where(possible, np.clip(serial(low, ideal), 0, 1), np.nan), multiplier_interval=multiplier_text.tolist(),
        efficiency_interval=efficiency_text.tolist(), scaling_multiplier=multiplier,
        scaling_efficiency=multiplier / ideal, efficiency_low=low / ideal, efficiency_high=high / ideal,
        serial_fraction=np.where(possible, point, np.nan), serial_emptied=np.isfinite(point) & ~possible,
        only_devices_change=not changes(group),
        scaling_kind=KIND_LABELS.get(kind_of(group), KIND_LABELS[None]),
        marks=configuration.map(row_marks).to_numpy(object), known_error=configuration.map(row_errors).to_numpy(object),
        concluded=concluded), found


def _multiplier_interval(found: pd.DataFrame, i: int, base: int | None, multiplier: float, ideal: float
                         ) -> tuple[float, float, str, str]:
    """The 95 % interval of configuration ``i``'s multiplier against the baseline
    configuration ``base`` (rows of ``found``), around the ``multiplier`` shown: low,
    high, and as text the multiplier's and the efficiency's (``BASELINE``, or why none)."""
    if i == base:
        return np.nan, np.nan, BASELINE, BASELINE
    if base is None or pd.isna(found.at[i, "throughput"]) or pd.isna(found.at[base, "throughput"]):
        return np.nan, np.nan, "–", NO_INTERVAL
    ratio = call(found, found.at[base, "configuration"], found.at[i, "configuration"])
    if not ratio.tested:
        why = NO_INTERVAL if pd.isna(found.at[i, "low"]) else "no interval (the baseline is one run without steps)"
        return np.nan, np.nan, "–", why
    scale = multiplier / (1 + ratio.estimate)
    low, high = (1 + ratio.low) * scale, (1 + ratio.high) * scale
    source = " and ".join(dict.fromkeys(SOURCES.get(found.at[j, "basis"], found.at[j, "basis"]) for j in (i, base)))
    return (low, high, f"{fmt_times(low, 2)}–{fmt_times(high, 2)}",
            f"{fmt_pct(low / ideal)}–{fmt_pct(high / ideal)} ({source})")


def _throughput_intervals(found: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """Each configuration's throughput interval as text (``1,258–1,465``; ``–``: none), around the rate shown."""
    rate = [rows[f"{unit}_per_s"].iat[i] if f"{unit}_per_s" in rows else throughput
            for i, (unit, throughput) in enumerate(zip(found["unit"], found["throughput"]))]
    return [text or "–" for text in around(found, rate)[2]]


def efficiency_notes(runs: pd.DataFrame, steps: Summaries | None = None) -> list[str]:
    """Per experiment whose configurations have intervals: how its efficiency moves from one
    device count to the next, a rise or drop only beyond the noise (:func:`trainperf.stats.verdict`),
    between configurations a conclusion may be drawn from (``concluded``, :func:`table`)."""
    out = []
    for name, (rows, found) in _experiments(runs, steps).items():
        kept = rows.index[rows["concluded"] | (rows["ideal"] == 1)]
        if found["low"].isna().any() or len(kept) < 2 or not rows.loc[kept, "concluded"].any():
            continue
        moves, shown = [], rows["scaling_efficiency"]
        for a, b in zip(kept[:-1], kept[1:]):
            eff = call(found, found.loc[a, "configuration"], found.loc[b, "configuration"]).times(
                rows.loc[a, "gpus"] / rows.loc[b, "gpus"])  # efficiency ratio = throughput ratio × devices ratio
            move = {FASTER: "rises", SLOWER: "falls"}.get(verdict(eff), "does not change beyond the noise")
            moves.append(f"{move} from {fmt_int(rows.loc[a, 'gpus'])} to {fmt_int(rows.loc[b, 'gpus'])} devices "
                         f"({fmt_pct(shown[a], 0)} → {fmt_pct(shown[b], 0)}, 95 % interval of the change "
                         f"{fmt_pct(eff.low, 0, signed=True)} to {fmt_pct(eff.high, 0, signed=True)})")
        out.append(f"{name}: scaling efficiency {'; it '.join(moves)}." + _left_out(rows))
    return out


def _left_out(rows: pd.DataFrame) -> str:
    """`` Left out: 4 devices (oversubscribed).``: the rows of one study's :func:`table` no conclusion is drawn from."""
    doubted = rows[~rows["concluded"] & (rows["ideal"] != 1)]
    if doubted.empty:
        return ""
    return " Left out: " + and_list([f"{fmt_int(g)} devices ({m or 'its baseline is doubtful'})"
                                     for g, m in zip(doubted["gpus"], doubted["marks"])]) + "."


def phases(runs: pd.DataFrame) -> pd.DataFrame:
    """Time per step in each phase of each configuration (:func:`trainperf.report.phases.long_form`)."""
    return per_experiment(runs, lambda group: labels(group, compact=True))


OVERHEAD = ["compute_s", "comm_s", "comm_exposed_s", "data_s", "slowest_wait_s", "comm_overhead", "compute_comm_ratio"]


def overhead(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with phase times: elapsed, compute, communication (all and exposed) and data
    seconds, ``slowest_wait_s`` (:func:`trainperf.report.phases.slowest_wait`: the time the phases
    of a typical rank leave to waiting for the slowest), ``comm_overhead`` and ``compute_comm_ratio``
    (see :func:`trainperf.derive.derive`); columns no run has are left out."""
    have = runs[runs[[c for c in PHASE_LABELS if c in runs]].notna().any(axis=1)]
    have = have.assign(configuration=labels(have), slowest_wait_s=slowest_wait(have))
    present = [c for c in OVERHEAD if c in have and have[c].notna().any()]
    return have[["experiment", "configuration", "gpus", "elapsed_s", *present]].reset_index(drop=True)


def ranks(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per rank of each run with two or more ranks in ``steps``: rows
    ``experiment, run_id, rank, elapsed_s, slowest, of_slowest`` (the rank's
    elapsed time as a fraction of its run's slowest rank), in the runs' order."""
    columns = ["experiment", "run_id", "rank", "elapsed_s", "slowest", "of_slowest"]
    if steps is None or steps.per_rank.empty:
        return pd.DataFrame(columns=columns)
    totals = rank_totals(steps.per_rank).reset_index()
    times = runs[["run_id", "experiment"]].astype(str).drop_duplicates("run_id", keep="last").merge(
        totals.assign(run_id=totals["run_id"].astype(str)), on="run_id")  # in the runs' order, by rank
    times = times[times.groupby("run_id")["rank"].transform("size").to_numpy() > 1].reset_index(drop=True)
    top = times.groupby("run_id")["elapsed_s"].transform("max")
    return times.assign(slowest=times["elapsed_s"].eq(top), of_slowest=times["elapsed_s"] / top)[columns]


def rank_summary(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per multi-rank run: ranks, the slowest rank, slowest / mean / fastest
    elapsed seconds, imbalance (slowest / fastest) and ``mean_understates``:
    how much the mean over ranks understates the job's elapsed time, 1 − mean
    / slowest. From ``steps`` where given, else from the runs' own per-rank columns."""
    per_rank = ranks(runs, steps)
    if len(per_rank):
        g = per_rank.groupby("run_id", sort=False)["elapsed_s"]
        out = pd.DataFrame({"ranks": g.size(), "slowest_rank": per_rank.loc[g.idxmax(), "rank"].to_numpy(),
                            "slowest_s": g.max(), "mean_s": g.mean(), "fastest_s": g.min()}).reset_index()
    elif {"rank_imbalance", "mean_rank_elapsed_s"} <= set(runs.columns) and runs["rank_imbalance"].notna().any():
        have = runs[runs["rank_imbalance"].notna()]
        out = pd.DataFrame({"run_id": have["run_id"], "ranks": have.get("ranks"),
                            "slowest_rank": have.get("slowest_rank"), "slowest_s": have["elapsed_s"],
                            "mean_s": have["mean_rank_elapsed_s"],
                            "fastest_s": have["elapsed_s"] / have["rank_imbalance"]}).reset_index(drop=True)
    else:
        return pd.DataFrame(columns=["run_id", "ranks", "slowest_rank", "slowest_s", "mean_s", "fastest_s",
                                     "imbalance", "mean_understates"])
    return out.assign(imbalance=out["slowest_s"] / out["fastest_s"],
                      mean_understates=1 - out["mean_s"] / out["slowest_s"])


def rank_note(runs: pd.DataFrame, steps: Summaries | None, per_rank: pd.DataFrame) -> str:
    """Why no per-rank chart is drawn, or an empty string when one is."""
    if len(per_rank):
        return ""
    if steps is None or steps.per_rank.empty:
        return ("No per-rank steps given: set the steps parameter to per-rank step tables or profiler run folders "
                "to see every rank" + (" (the table shows the runs' own per-rank figures)."
                                       if len(rank_summary(runs, None)) else "."))
    return "Every run in the per-rank data has a single rank: no spread to show."


STRAGGLER = 1.1  # imbalance (slowest / fastest rank) from which the worst run is called out


def straggler(summary: pd.DataFrame) -> str:
    """A sentence on the run with the largest rank imbalance when it is
    :data:`STRAGGLER` or more; empty otherwise."""
    if summary.empty or not summary["imbalance"].max() >= STRAGGLER:
        return ""
    worst = summary.loc[summary["imbalance"].idxmax()]
    rank = f"rank {int(worst['slowest_rank'])}" if pd.notna(worst["slowest_rank"]) else "the slowest rank"
    return (f"Straggler: in run {worst['run_id']}, {rank} takes {fmt_times(worst['imbalance'])} as long as the "
            f"fastest rank. The mean over ranks understates this run's elapsed time by "
            f"{fmt_pct(worst['mean_understates'])}, so a speed-up computed from it is "
            f"{fmt_pct(worst['slowest_s'] / worst['mean_s'] - 1)} too high.")


def stragglers(runs: pd.DataFrame, steps: Summaries | None) -> tuple[pd.DataFrame, list[str]]:
    """For every run with two or more ranks in ``steps``, in the runs' order,
    :func:`trainperf.stragglers.find_straggler`'s per-rank frame and sentence:
    rows ``experiment, run_id, rank, node, steps, step_s, comm_wait_s, busy_s,
    wait_gap_s, straggler`` (medians over the measured steps, seconds;
    ``comm_wait_s``: the communication the rank waits for, ``comm_exposed_s``)
    of the runs that measured communication waits, and one sentence per run
    naming its straggler, or saying why none is named."""
    columns = ["experiment", "run_id", "rank", "node", "steps", "step_s", "comm_wait_s", "busy_s", "wait_gap_s",
               "straggler"]
    if steps is None or steps.per_rank.empty:
        return pd.DataFrame(columns=columns), []
    experiment = dict(zip(runs["run_id"].astype(str), runs["experiment"].astype(str)))
    ranks_of = steps.per_rank.groupby(steps.per_rank["run_id"].astype(str))["rank"].nunique()
    waits = rank_waits(steps)
    of_run = dict(iter(waits.groupby(waits["run_id"].astype(str), sort=False)))
    parts, sentences = [], []
    for run_id in (r for r in runs["run_id"].astype(str) if ranks_of.get(r, 0) > 1):
        try:
            per_rank, sentence = name_straggler(of_run.get(run_id, waits.iloc[:0]), run_id)
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
    """Where each rank's time goes, per rank of each run in ``steps`` whose slowest rank takes
    :data:`STRAGGLER` times its fastest or more (in the runs' order): ``experiment, run_id, rank,
    elapsed_s``, the phases the run's ranks timed (their totals over the measured window, s, as
    :func:`trainperf.report.phases.breakdown` splits them: labelled columns; NaN for a phase another
    run timed) and ``beyond_fastest_s``: the rank's elapsed time − its run's fastest rank's."""
    per_rank = ranks(runs, steps)
    slow = per_rank.groupby("run_id")["of_slowest"].transform("min") <= 1 / STRAGGLER
    if not slow.any():
        return pd.DataFrame(columns=["experiment", "run_id", "rank", "elapsed_s", "beyond_fastest_s"])
    totals = rank_totals(steps.per_rank).reset_index()
    totals = per_rank.loc[slow, ["experiment", "run_id", "rank"]].merge(
        totals.assign(run_id=totals["run_id"].astype(str)), on=["run_id", "rank"])
    parts = []
    for _, group in totals.groupby("run_id", sort=False):
        seconds, _ = breakdown(group, per_step=False)
        parts.append(pd.concat([group[["experiment", "run_id", "rank", "elapsed_s"]], seconds], axis=1).assign(
            beyond_fastest_s=group["elapsed_s"] - group["elapsed_s"].min()))
    out = pd.concat(parts, ignore_index=True)
    return out[[*(c for c in out if c != "beyond_fastest_s"), "beyond_fastest_s"]]


OUTSIDE_SHARE = 0.5
"""A slow rank's extra time counts as waited for inside the synchronised steps when the other ranks'
communication is longer than its own by at least this share of it."""


SLOW_RANK_COLUMNS = ["experiment", "run_id", "rank", "fastest_rank", "elapsed_s", "fastest_s", "extra_s", "phase",
                     "phase_extra_s", "comm", "comm_s", "others_comm_s", "waited_s", "inside"]


def slow_ranks(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per run whose slowest rank takes :data:`STRAGGLER` times its fastest or more (:func:`rank_phases`), in
    the runs' order: its slowest ``rank`` and ``fastest_rank``, their ``elapsed_s`` and ``fastest_s``, the
    ``extra_s`` between them, the ``phase`` (label) in which the slowest spends most of it and how much
    (``phase_extra_s``), the communication timed (``comm``: its label; ``comm_s`` the slowest rank's,
    ``others_comm_s`` the median of the other ranks'), ``waited_s`` = ``others_comm_s − comm_s`` and
    ``inside``: whether the other ranks wait for it in the synchronised steps (their communication is
    longer by :data:`OUTSIDE_SHARE` of ``extra_s`` or more), false where the extra time lies outside them
    (work the rank does alone), NA where no communication was timed. Seconds over the measured window."""
    table, rows = rank_phases(runs, steps), []
    phase_names = [c for c in table if c not in ("experiment", "run_id", "rank", "elapsed_s", "beyond_fastest_s")]
    comm = next((c for c in (PHASE_LABELS["comm_exposed_s"], PHASE_LABELS["comm_s"]) if c in table), None)
    for run_id, group in table.groupby("run_id", sort=False):
        slow, fast = group.loc[group["elapsed_s"].idxmax()], group.loc[group["elapsed_s"].idxmin()]
        if not slow["elapsed_s"] >= STRAGGLER * fast["elapsed_s"]:
            continue
        where = max(phase_names, key=lambda c: slow[c] - fast[c]) if phase_names else None
        others = group.drop(index=slow.name)
        known = comm is not None and pd.notna(slow[comm]) and others[comm].notna().any()
        mine, theirs = (slow[comm], others[comm].median()) if known else (np.nan, np.nan)
        extra = slow["elapsed_s"] - fast["elapsed_s"]
        rows.append({"experiment": slow["experiment"], "run_id": run_id, "rank": int(slow["rank"]),
                     "fastest_rank": int(fast["rank"]), "elapsed_s": slow["elapsed_s"],
                     "fastest_s": fast["elapsed_s"], "extra_s": extra, "phase": where,
                     "phase_extra_s": slow[where] - fast[where] if where is not None else np.nan,
                     "comm": comm if known else None, "comm_s": mine, "others_comm_s": theirs,
                     "waited_s": theirs - mine, "inside": (theirs - mine >= OUTSIDE_SHARE * extra) if known else pd.NA})
    return pd.DataFrame(rows, columns=SLOW_RANK_COLUMNS)


def rank_time_notes(runs: pd.DataFrame, steps: Summaries | None) -> list[str]:
    """Per run of :func:`slow_ranks`: in which phase the slowest rank spends its extra time, and whether the
    other ranks wait for it in the synchronised steps (their communication, where they wait in the gradient
    all-reduce, grows by :data:`OUTSIDE_SHARE` of it or more) or not: then the extra time lies outside the
    synchronised steps (work one rank does alone), the job ends when that rank does, and the others idle at
    the end."""
    out = []
    for r in slow_ranks(runs, steps).to_dict("records"):
        text = (f"Run {r['run_id']}: rank {r['rank']} takes {fmt_num(r['extra_s'], 1)} s longer than rank "
                f"{r['fastest_rank']} ({fmt_num(r['elapsed_s'], 1)} s against {fmt_num(r['fastest_s'], 1)} s)")
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


RANKS_NAMED = 8
"""Ranks a run names (labels on its chart, rows in its table) at most: a larger run names those that wait least
and most for communication, and its straggler."""


def named_ranks(waits: pd.DataFrame, limit: int = RANKS_NAMED) -> tuple[pd.DataFrame, str]:
    """The rows of :func:`stragglers`' frame that a page names, by run and rank: every rank of a run with at
    most ``limit``; of a larger run, the ``limit // 2`` ranks that wait least, as many that wait most and its
    straggler. And a sentence saying which runs show only some of their ranks ("" when none does)."""
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


TREND_STEP = 1.2  # factor by which the serial fraction must change to count as a change


def serial_trend(e: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None) -> str:
    """How the Karp–Flatt serial fraction ``e`` (in order of devices) moves. A
    move counts when the later value is :data:`TREND_STEP` times the earlier or
    more (or less; for values ≤ 0, a superlinear multiplier: any difference)
    and, where the 95 % intervals ``low``–``high`` are given, the two intervals
    do not overlap. ``moves both ways`` when one step rises and another falls;
    else ``grows`` or ``falls`` from the first value to the last; else ``is
    within the noise`` when a move without the intervals would have counted,
    or ``stays about constant``."""
    e = np.asarray(e, dtype=float)
    low = e if low is None else np.where(np.isnan(low), e, low)
    high = e if high is None else np.where(np.isnan(high), e, high)
    steps = [_serial_move(e, low, high, i, i + 1) for i in range(len(e) - 1)]
    if 1 in steps and -1 in steps:
        return "moves both ways"
    end = _serial_move(e, low, high, 0, len(e) - 1)
    if end:
        return "grows" if end > 0 else "falls"
    untested = [_serial_move(e, e, e, i, j) for i, j in [*zip(range(len(e) - 1), range(1, len(e))), (0, len(e) - 1)]]
    return "is within the noise" if any(untested) else "stays about constant"


def _serial_move(e: np.ndarray, low: np.ndarray, high: np.ndarray, a: int, b: int) -> int:
    """+1 when ``e[b]`` rises beyond ``e[a]`` (see :func:`serial_trend`), −1 when it falls, else 0."""
    positive = e[a] > 0 and e[b] > 0
    if (e[b] > e[a] * TREND_STEP if positive else e[b] > e[a]) and low[b] > high[a]:
        return 1
    if (e[b] < e[a] / TREND_STEP if positive else e[b] < e[a]) and high[b] < low[a]:
        return -1
    return 0


MEANING = {"grows": "overhead grows with scale (communication, synchronisation) — Amdahl's law alone will be "
                    "optimistic",
           "falls": "the baseline carries a cost the larger runs amortise (or the work per device changes)",
           "stays about constant": "a fixed serial part limits scaling, as Amdahl's law assumes",
           "moves both ways": "no single serial part explains these runs; other changes between them (nodes, "
                              "strategy, noise) weigh more",
           "is within the noise": "its changes lie within the 95 % intervals of the measurements, so no trend can "
                                  "be read from them"}


def serial_notes(runs: pd.DataFrame, steps: Summaries | None = None) -> list[str]:
    """How each experiment's serial fraction moves with devices, and what that
    means: a move only beyond the noise where its configurations have intervals
    (see :func:`serial_trend`); without intervals, said to be untested. Only rows
    a conclusion may be drawn from (``concluded``) count; an experiment left with
    fewer than two says so. First, the experiments whose e lies outside [0, 1]
    somewhere (emptied by ``trainperf.invariants``: not plotted) say where."""
    every_row = table(runs, steps)
    out = [f"{name}: the Karp–Flatt fraction e is outside [0, 1] at "
           f"{and_list([fmt_int(g) + ' devices' for g in group.loc[group['serial_emptied'], 'gpus']])} "
           f"({EMPTIED}: {SERIAL_OUTSIDE}); not plotted."
           for name, group in every_row.groupby("experiment", sort=False) if group["serial_emptied"].any()]
    frame = every_row.dropna(subset=["serial_fraction"])
    for name, every in frame.groupby("experiment", sort=False):
        group = every[every["concluded"]]
        left = _left_out(every)
        e = group["serial_fraction"].to_numpy(float)
        if len(e) < 2:
            if len(group) < len(every):
                out.append(f"{name}: no trend of e is read: fewer than two of its values come from runs a "
                           f"conclusion may be drawn from.{left}")
            continue
        tested = group["serial_low"].notna().all()
        trend = serial_trend(e, group["serial_low"].to_numpy(float), group["serial_high"].to_numpy(float))
        caveat = " Two values only: a weak indication." if len(e) == 2 and trend not in (
            "moves both ways", "is within the noise") else ""
        if not tested and trend != "stays about constant":
            caveat += " No intervals (runs measured once without steps): the noise is not tested."
        values = " → ".join(fmt_sig(v) if pd.isna(lo) else f"{fmt_sig(v)} (95 % interval {fmt_sig(lo)} to "
                            f"{fmt_sig(hi)})"
                            for v, lo, hi in zip(e, group["serial_low"], group["serial_high"]))
        out.append(f"{name}: e {trend} ({values} at "
                   f"{', '.join(f'{x:g}' for x in group['ideal'])}× the baseline devices) — "
                   f"{MEANING[trend]}.{caveat}{left}")
    return out


SERIAL_OUTSIDE = ("below 0 the speedup is super-linear, above 1 more devices were slower than fewer: no serial "
                  "share of the work explains either")
"""Why a Karp–Flatt fraction outside [0, 1] is not shown."""


# --- fits and projections -------------------------------------------------------

@dataclass
class Projection:
    """One experiment's fits and their projection to ``target`` relative devices."""

    experiment: str
    p: np.ndarray
    multiplier: np.ndarray
    fits: dict[str, ScalingFit]
    target: float
    base_gpus: float

    def naive(self, p: np.ndarray | float) -> np.ndarray:
        """The straight-line projection from the largest measured point:
        ``S(p_max) · p / p_max`` (as in a report that multiplies one node's
        throughput by the number of nodes)."""
        last = int(np.argmax(self.p))
        return self.multiplier[last] * np.asarray(p, dtype=float) / self.p[last]

    @property
    def best(self) -> ScalingFit:
        """The law that fits the measured multipliers best (lowest RMSE) among
        those whose error is known (:attr:`~trainperf.scaling.ScalingFit.has_band`); among all when none is."""
        known = [f for f in self.fits.values() if f.has_band]
        return min(known or self.fits.values(), key=lambda f: f.rmse)

    def targets(self) -> list[float]:
        """Relative device counts to tabulate: doublings from the largest measured up to the target."""
        points = float(self.p.max()) * 2.0 ** np.arange(1, 64)
        return [*points[points < self.target].tolist(), self.target]


def project(name: str, p: np.ndarray, multiplier: np.ndarray, target: float, base_gpus: float,
            fitted: tuple[str, ...] = tuple(LAWS)) -> Projection:
    """Fit the laws ``fitted`` (default Amdahl and USL) to one series (``p``:
    relative devices, the baseline's ``p = 1``; ``base_gpus``: its devices) and
    keep them for projection to ``target``."""
    fits = {law: fit(p, multiplier, law) for law in fitted}
    return Projection(name, np.asarray(p, float), np.asarray(multiplier, float), fits, float(target), base_gpus)


def projections(runs: pd.DataFrame, project_to_gpus: float | None = None) -> list[Projection]:
    """USL fits, and Amdahl's for strong scaling (:func:`laws`), for every
    experiment that changes only the device count and has
    :data:`MIN_FIT_POINTS` device counts or more, projected to ``project_to_gpus`` devices
    (default: 8 × the largest measured); once per process for the same ``runs`` and target."""
    found = remember(("projections", content(runs), repr(project_to_gpus)), lambda: _projections(runs, project_to_gpus))
    return copy.deepcopy(found)


def _projections(runs: pd.DataFrame, project_to_gpus: float | None) -> list[Projection]:
    out = []
    for name, group in by_experiment(runs):
        if changes(group):
            continue
        doubt = doubtful(group)
        named = group.loc[group["run_id"] == group["baseline_run_id"], "gpus"]
        base_gpus = float(named.iloc[0]) if len(named) else float(group["gpus"].min())
        if doubt[group["gpus"] == base_gpus].any():  # every multiplier is measured against a doubtful baseline
            continue
        group = group[~doubt].dropna(subset=["scaling_multiplier"])
        p = group["gpus"].to_numpy(float) / base_gpus  # relative devices, the baseline's p = 1
        if len(np.unique(p)) < MIN_FIT_POINTS:
            continue
        target = (project_to_gpus / base_gpus) if project_to_gpus else 8 * float(p.max())
        if target <= p.max():
            raise InputError(f"project_to_gpus={project_to_gpus:g} is not beyond the largest measured "
                             f"scale of {name} ({group['gpus'].max():g} devices)")
        fitted = ("usl",) if kind_of(group) == "weak" else tuple(LAWS)  # Amdahl: fixed total work only
        out.append(project(name, p, group["scaling_multiplier"].to_numpy(float), target, base_gpus, fitted))
    return out


MAX_BAND = 4.0
"""A projection whose 95 % band's high end is more than this many times its low end (or that has no band)
is out of the data's reach: it is neither drawn, tabulated nor headlined."""
BEYOND_REACH = "the data cannot project this far"


def within_reach(f: ScalingFit, relative: np.ndarray, measured_max: float) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Where the fit ``f`` projects (relative devices ``relative``, in increasing order): within the
    measured scale (``measured_max``), and beyond it as far as its 95 % band spans :data:`MAX_BAND` or
    less; and the band (low, high) at every point."""
    low, high = f.band(relative, BAND_LEVEL)
    narrow = high <= MAX_BAND * low  # False where there is no band (NaN)
    reach = (relative <= measured_max) | np.logical_and.accumulate(narrow | (relative <= measured_max))
    return reach, low, high


def curves(found: list[Projection], points: int = 60) -> pd.DataFrame:
    """The fitted laws, the straight line and the ideal from 1 to the target:
    rows ``experiment, devices, relative, curve, multiplier, low, high, band``
    (``low``/``high``: the fit's 95 % band, NaN for the lines and for a law
    without a band; ``band``: ``95 % band``, or why there is none). A law is
    drawn only as far as it projects (:func:`within_reach`): beyond the measured
    scale, while its band spans :data:`MAX_BAND` or less."""
    rows = []
    for proj in found:
        x = np.geomspace(1, proj.target, points)
        lines = []
        for law, f in proj.fits.items():
            reach, low, high = within_reach(f, x, float(proj.p.max()))
            lines.append(pd.DataFrame({"curve": f"{LAWS[law]} fit", "relative": x, "multiplier": f.predict(x),
                                       "low": low, "high": high, "band": "95 % band" if f.has_band else f.why_no_band}
                                      )[reach])
        beyond = x[x >= proj.p.max()]
        lines.append(pd.DataFrame({"curve": "straight line (efficiency held at the last point)", "relative": beyond,
                                   "multiplier": proj.naive(beyond)}))
        lines.append(pd.DataFrame({"curve": "ideal", "relative": x, "multiplier": x}))
        rows += [frame.assign(experiment=proj.experiment, devices=frame["relative"] * proj.base_gpus)
                 for frame in lines]
    columns = ["experiment", "devices", "relative", "curve", "multiplier", "low", "high", "band"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


def projected(found: list[Projection]) -> pd.DataFrame:
    """Per experiment and projected device count (doublings up to the
    target): each law's multiplier and its 95 % band as text (``{law}_band``:
    ``5.1×–6.3×``; where the band spans more than :data:`MAX_BAND` or there is
    none, no multiplier and :data:`BEYOND_REACH` with the band or why there is
    none), the straight line and the ideal."""
    parts = []
    for proj in found:
        p = np.array(proj.targets())
        part = pd.DataFrame({"experiment": proj.experiment, "devices": p * proj.base_gpus})
        for law, f in proj.fits.items():
            reach, low, high = within_reach(f, p, float(proj.p.max()))  # one call per law: each draws anew
            band = [f"{fmt_times(a)}–{fmt_times(b)}" if ok else
                    f"{BEYOND_REACH}: {f'95 % band {fmt_times(a)}–{fmt_times(b)}' if f.has_band else f.why_no_band}"
                    for ok, a, b in zip(reach, low, high)]
            part = part.assign(**{law: np.where(reach, f.predict(p), np.nan), f"{law}_band": band})
        parts.append(part.assign(naive=proj.naive(p), ideal=p))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fit_parameters(found: list[Projection]) -> pd.DataFrame:
    """Per experiment, law and parameter: the fitted value, its standard
    error, the text to show, the law's RMSE (×) over the measured points and
    ``band``: why the law has no band (empty when it has one)."""
    rows = [{"experiment": proj.experiment, "law": LAWS[law], "parameter": name, "value": value,
             "stderr": f.stderr[name], "shown": parameter_text(value, f.stderr[name]), "rmse": f.rmse,
             "points": len(f.devices), "band": "" if f.has_band else f.why_no_band}
            for proj in found for law, f in proj.fits.items() for name, value in f.params.items()]
    return pd.DataFrame(rows)


def fit_notes(found: list[Projection]) -> list[str]:
    """One line per experiment and law (parameters and RMSE), and a warning where the USL fit peaks
    within 4 × the projection's target; a sentence saying why nothing is fitted when ``found`` is empty."""
    if not found:
        return [f"No experiment that changes only the device count has {MIN_FIT_POINTS} or more device counts: no "
                "law is fitted, and nothing is projected."]
    params = fit_parameters(found)
    out = [f"{name} — {law}: {', '.join(f'{p} = {s}' for p, s in zip(g['parameter'], g['shown']))}; RMSE "
           f"{fmt_sig(g['rmse'].iloc[0])}× over {g['points'].iloc[0]} points"
           + ("" if g["band"].iloc[0] == "" else f"; {g['band'].iloc[0]}, no standard errors")
           for (name, law), g in params.groupby(["experiment", "law"], sort=False)]
    out += [f"The USL fit of {proj.experiment} peaks at about {fmt_int(peak * proj.base_gpus)} devices: beyond "
            "that, adding devices makes it slower." for proj in found if (peak := proj.fits["usl"].peak) < proj.target * 4]
    for proj in found:
        x = np.geomspace(1, proj.target, 60)
        for law, f in proj.fits.items():
            reach = x[within_reach(f, x, float(proj.p.max()))[0]].max()
            if reach < proj.target:
                why = "its 95 % band spans more than 4×" if f.has_band else "its error is not known"
                out.append(f"{proj.experiment} — {LAWS[law]}: beyond {fmt_int(reach * proj.base_gpus)} devices "
                           f"{why}: {BEYOND_REACH}, so it is not drawn or tabulated there.")
    return out


# --- headline and cost -------------------------------------------------------------------

def headline(runs: pd.DataFrame, project_to_gpus: float | None = None, steps: Summaries | None = None) -> Html:
    """The largest measured scale-up among experiments that change only the
    device count (from rows a conclusion may be drawn from: ``concluded`` of
    :func:`table`, none projected, oversubscribed or incomplete), its efficiency
    (with its 95 % interval where ``steps`` or repeats give one), and the
    fitted projection vs. the straight line; weak scaling in its own words
    (the devices process more, they do not finish sooner); without such an
    experiment, says so and projects nothing."""
    study = {name: rows for name, (rows, _) in _experiments(runs, steps).items()}
    real = [name for name, rows in study.items() if rows["concluded"].any()]
    clean = [name for name in real if study[name]["only_devices_change"].iloc[0]]

    def shown(name: str) -> pd.DataFrame:  # the rows a headline may come from
        rows = study[name]
        return rows[rows["concluded"] | (rows["ideal"] == 1)] if name in real else rows

    def scale(name: str) -> tuple[float, float]:  # the largest measured scale, then the widest span
        gpus = shown(name)["gpus"]
        return gpus.max(), gpus.max() / gpus.min()

    widest = max(clean or real or list(study), key=scale)
    group = shown(widest)
    top, base = group.loc[group["gpus"].idxmax()], group.loc[group["gpus"].idxmin()]
    known = (f" (95 % interval {fmt_pct(top['efficiency_low'])}–{fmt_pct(top['efficiency_high'])})"
             if pd.notna(top["efficiency_low"]) else "")
    weak = top["scaling_kind"] == KIND_LABELS["weak"]
    if pd.notna(top["multiplier_low"]) and top["multiplier_low"] <= 1 <= top["multiplier_high"]:
        speed = (f"indistinguishable in {'throughput' if weak else 'speed'} on {fmt_int(top['gpus'])} devices and on "
                 f"{fmt_int(base['gpus'])} ({fmt_times(top['scaling_multiplier'], 2)}, 95 % interval "
                 f"{fmt_times(top['multiplier_low'], 2)}–{fmt_times(top['multiplier_high'], 2)})")
    elif weak:
        speed = (f"{fmt_int(top['gpus'])} devices process {fmt_times(top['scaling_multiplier'], 1)} as much per "
                 f"second as {fmt_int(base['gpus'])}, each doing the same work per step")
    else:
        speed = (f"{fmt_times(top['scaling_multiplier'], 1)} faster on {fmt_int(top['gpus'])} devices than on "
                 f"{fmt_int(base['gpus'])}")
    text = f"{widest}: {speed} — {fmt_pct(top['scaling_efficiency'], 0)} scaling efficiency{known}."
    if not real:
        text = ("No experiment measures scaling without doubt (see the warnings: projected, oversubscribed or "
                "incomplete runs). The widest, " + text[:-1] + ", supports no conclusion.")
    elif not clean:
        text = ("No experiment changes only the device count, so none is projected. The widest, " + text[:-1]
                + ", mixes scaling with other changes.")
    figures = [(fmt_times(top["scaling_multiplier"], 1), f"multiplier at {fmt_int(top['gpus'])} devices"),
               (fmt_pct(top["scaling_efficiency"], 0), "scaling efficiency there")]
    for proj in (p for p in projections(runs, project_to_gpus) if p.experiment == widest):
        low, high = proj.best.band(proj.target, BAND_LEVEL)
        at = fmt_int(proj.target * proj.base_gpus)
        if not high[0] <= MAX_BAND * low[0]:  # a band over 4x wide (or none) projects nothing
            figures.append(("–", f"the data cannot project to {at} devices ({LAWS[proj.best.law]} 95 % band "
                                 f"{fmt_num(low[0], 0)}–{fmt_num(high[0], 0)}×)"))
            continue
        peak = proj.best.peak
        peaks = f"; it peaks at about {fmt_int(peak * proj.base_gpus)} devices" if peak < proj.target else ""
        figures += [(fmt_times(proj.best.predict(proj.target).item(), 0),
                     f"{LAWS[proj.best.law]} projection at {at} devices (95 % band {fmt_num(low[0], 0)}–"
                     f"{fmt_num(high[0], 0)}×{peaks})"),
                    (fmt_times(proj.naive(proj.target).item(), 0), f"straight-line projection at {at} devices")]
    return banner(text, figures)


def _priced(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with a price per device-hour."""
    return runs[runs["price_per_gpu_hour"].notna()] if "price_per_gpu_hour" in runs else runs.iloc[0:0]


def cost(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with a price per device-hour: price, elapsed, device-hours, cost,
    USD per million tokens (``usd_per_million_tokens``; samples where a run lacks
    tokens: ``…_samples``; ``price_per_gpu_hour · gpus / 3600 s/h / rate · 10⁶``;
    left out where a run lacks both), cost efficiency (baseline cost per unit
    of work / this run's) and, where a run has any, ``marks`` (:func:`trainperf.report.configs.marks`)
    and ``known_error``."""
    priced = _priced(runs)
    known = priced["known_error"] if "known_error" in priced else pd.Series(pd.NA, index=priced.index)
    out = priced.assign(configuration=labels(priced) if len(priced) else [], marks=marks(priced), known_error=known)
    columns = ["experiment", "configuration", "gpus", "price_per_gpu_hour", "elapsed_s", "gpu_hours", "cost_usd"]
    rate = next((c for c in ("tokens_per_s", "samples_per_s") if len(priced) and priced[c].notna().all()), None)
    if rate:
        unit = f"usd_per_million_{rate.removesuffix('_per_s')}"
        out[unit] = priced["price_per_gpu_hour"] * priced["gpus"] / 3600 / priced[rate] * 1e6
        columns.append(unit)
    return out[[*columns, "cost_efficiency", *(["marks", "known_error"] if out["marks"].ne("").any() else [])]
               ].reset_index(drop=True)


def cost_notes(runs: pd.DataFrame) -> list[str]:
    """Per experiment with prices: how much faster its largest run is and how much dearer each unit of work;
    said to be the source's projection where a run of the two is one (``measured`` false)."""
    out = []
    for name, group in by_experiment(_priced(runs)):
        top, base = group.loc[group["gpus"].idxmax()], group.loc[group["gpus"].idxmin()]
        if top.name != base.name and pd.notna(top["cost_efficiency"]) and top["cost_efficiency"] > 0:
            projected = doubtful(group.loc[[base.name, top.name]]).any()
            out.append(f"{name}: going from {fmt_int(base['gpus'])} to {fmt_int(top['gpus'])} devices makes the job "
                       f"{fmt_times(top['scaling_multiplier'], 1)} faster and each unit of work "
                       f"{fmt_pct(1 / top['cost_efficiency'] - 1, 0)} more expensive ({fmt_usd(base['cost_usd'])} → "
                       f"{fmt_usd(top['cost_usd'])} per run)"
                       + (" — by figures that are not all measurements (see their marks), so no conclusion."
                          if projected else "."))
    return out
