"""How pages name, group and order runs: experiments in data order, configuration labels, the throughput unit
runs compare in, one row per configuration, and the marks of runs a page shows but never concludes from
(projected, oversubscribed, incomplete) or whose source has a known error."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.hardware import is_cpu
from trainperf.estimates import configuration_keys, run_intervals
from trainperf.ranks import rank_totals
from trainperf.report.html import around, count, first_of, fmt_int


class Unit(NamedTuple):
    """The unit runs are compared in: ``name`` (``tokens`` or ``samples``), its rate columns (``rate``:
    ``tokens_per_s``; ``per_device``: ``tokens_per_s_per_gpu``) and ``label`` (``tokens/s``)."""

    name: str
    rate: str
    per_device: str
    label: str


def unit_of(runs: pd.DataFrame) -> Unit:
    """Tokens when every run has a token rate, else samples when every run has a sample rate, else tokens."""
    name = next((n for n in ("tokens", "samples") if f"{n}_per_s" in runs and runs[f"{n}_per_s"].notna().all()),
                "tokens")
    return Unit(name, f"{name}_per_s", f"{name}_per_s_per_gpu", f"{name}/s")


def configuration_table(runs: pd.DataFrame, columns: tuple[str, ...] | list[str],
                        found: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per configuration of ``runs`` (:func:`configuration_means` of ``columns``; ``found``: their run
    intervals, None: from no steps) with its throughput's 95 % interval around the mean rate (``<rate>_low``/``_high``,
    ``interval`` as text, ``–`` for none) and ``doubt`` (:func:`configuration_doubts`)."""
    runs = runs.reset_index(drop=True)
    found = run_intervals(runs) if found is None else found
    rows, first = configuration_means(runs, found, columns)
    rate = unit_of(runs).rate
    low, high, text = around(first, rows[rate])
    return rows.assign(**{f"{rate}_low": low, f"{rate}_high": high}, interval=[t or "–" for t in text],
                       doubt=configuration_doubts(runs, found))


def configuration_doubts(runs: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """Per configuration of ``runs`` (index from 0; ``found``: their run intervals), in the order of
    :func:`configuration_means`: the :data:`DOUBTS` of any of its repeats, as text (``""``: none)."""
    per_run = pd.Series(_named(doubts(runs), ", "), index=runs.index)
    return per_run.groupby(configuration_of(found).to_numpy(), sort=False).agg(
        lambda repeats: ", ".join(dict.fromkeys(m for marks in repeats for m in marks.split(", ") if m))
    ).tolist()


def configuration_means(runs: pd.DataFrame, found: pd.DataFrame, columns: tuple[str, ...] | list[str]
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``runs`` (one experiment, index from 0) and ``found`` (its :func:`~trainperf.estimates.run_intervals`)
    reduced to the first run of each configuration (a run without a throughput is one of its own), ``columns``
    the mean over its repeats, ``runs`` their number."""
    key = configuration_of(found).to_numpy()
    first = ~pd.Series(key).duplicated().to_numpy()
    means = {c: runs[c].groupby(key, sort=False).transform("mean").to_numpy(float) for c in columns if c in runs}
    repeats = pd.Series(key).groupby(key, sort=False).transform("size").to_numpy(int)
    return (runs.assign(**means, runs=repeats)[first].reset_index(drop=True),
            found[first].reset_index(drop=True))


def configuration_of(found: pd.DataFrame) -> pd.Series:
    """Per row of a :func:`~trainperf.estimates.run_intervals` frame, the configuration its run repeats (its
    run id where it has no throughput: a configuration of its own)."""
    return found["configuration"].fillna(found["run_id"])


def by_experiment(runs: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    """``runs`` grouped by experiment, the experiments in the order they first appear."""
    return runs.groupby(runs["experiment"].astype(str), sort=False)


def study_of(runs: pd.DataFrame) -> pd.Series:
    """Per row of ``runs``, its scaling study as text: ``scaling_study`` where derived, else its experiment."""
    study = runs["scaling_study"].fillna(runs["experiment"]) if "scaling_study" in runs else runs["experiment"]
    return study.astype(str)


def several_device_counts(runs: pd.DataFrame) -> pd.Series:
    """Per row of ``runs``, whether its :func:`study_of` was measured at two or more device counts (``gpus``)."""
    return runs.groupby(study_of(runs))["gpus"].transform("nunique") > 1


def ordered(runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``runs``, experiments in the order they first appear, each sorted by ``by``; index from 0, ``attrs`` kept."""
    position = pd.factorize(runs["experiment"].astype(str))[0]
    out = (runs.assign(_experiment_order=position).sort_values(["_experiment_order", *by], kind="stable")
           .drop(columns="_experiment_order").reset_index(drop=True))
    out.attrs = runs.attrs
    return out


def batch(run: pd.Series | dict, *, compact: bool = False, short: bool = False) -> str:
    """A run's micro-batch and accumulation: ``micro-batch 16 × 64 accumulation`` (``short``: ``… accum.``;
    ``micro-batch 16`` where the accumulation is unknown); ``compact``: ``16 × 64`` (``16 × ?``)."""
    accum = run.get("grad_accum_steps")
    if compact:
        return f"{fmt_int(run['micro_batch_size'])} × {'?' if pd.isna(accum) else fmt_int(accum)}"
    text = f"micro-batch {fmt_int(run['micro_batch_size'])}"
    return text if pd.isna(accum) else f"{text} × {fmt_int(accum)} {'accum.' if short else 'accumulation'}"


def label(run: pd.Series | dict, *, compact: bool = False, skip: tuple[str, ...] = (),
          settings: tuple[str, ...] = ()) -> str:
    """A configuration label: ``4 GPUs across 1 node`` (``processes`` on CPU), then the batch, strategy, model
    and platform where the row has them (but the columns in ``skip``) and the ``settings`` of :data:`SETTINGS`
    asked for (``bf16``, ``activation checkpointing``). ``compact``: one part per line, for chart axes."""
    devices, parts = [], []
    if pd.notna(run.get("gpus")) and "gpus" not in skip:
        platform = run.get("platform")
        devices.append(count(run["gpus"], "process" if isinstance(platform, str) and is_cpu(platform) else "GPU"))
    if pd.notna(run.get("nodes")) and "nodes" not in skip:
        devices.append(count(run["nodes"], "node"))
    if devices:
        parts.append(("\n" if compact else " across ").join(devices))
    accumulation_varies = "grad_accum_steps" not in skip
    if pd.notna(run.get("micro_batch_size")) and ("micro_batch_size" not in skip or accumulation_varies):
        parts.append(batch(run, short=True) if accumulation_varies
                     else f"micro-batch {fmt_int(run['micro_batch_size'])}")
    parts += [str(run[c]) for c in ("strategy", "model", "platform") if pd.notna(run.get(c)) and c not in skip]
    for column in settings:
        value = run.get(column)
        yes, no = SETTINGS[column]
        parts.append(f"{column} unknown".replace("_", " ") if pd.isna(value) else str(value) if yes is None
                     else yes if value else no)
    return ("\n" if compact else ", ").join(parts) if parts else str(run["run_id"])


SETTINGS = {"precision": (None, None), "activation_checkpointing": ("activation checkpointing", "no checkpointing"),
            "compiled": ("compiled", "not compiled")}
"""Settings a label names only where the runs of an experiment differ in them: column → the words for on
and off (None: the value itself)."""
LABEL_DETAILS = ("model", "platform", "strategy", "micro_batch_size", "grad_accum_steps", "gpus", "nodes")


def labels(runs: pd.DataFrame, *, compact: bool = False) -> list[str]:
    """Labels for ``runs`` that leave out what every run of the same experiment shares and name the
    :data:`SETTINGS` its runs differ in; run ids where labels would repeat within an experiment, except, ``compact``
    (chart axes, where the runs of one label are averaged), for the repeats of one configuration, which share theirs."""
    groups = runs["experiment"].astype(str) if "experiment" in runs else pd.Series("", index=runs.index)
    out = [""] * len(runs)
    named = runs[[c for c in runs if c in (*LABEL_DETAILS, *SETTINGS, "run_id", "experiment")]]
    named.attrs = {}  # a slice copies the frame's attrs (skipped lines and all): the label needs none of them
    records, every_key = named.to_dict("records"), configuration_keys(runs).tolist()
    by_experiment = named.groupby(groups.to_numpy(), sort=False)
    distinct = by_experiment.nunique(dropna=False)  # per experiment and column: its values
    for name, at in by_experiment.indices.items():
        shared = tuple(c for c in LABEL_DETAILS if c in named and len(at) > 1 and distinct.at[name, c] == 1)
        differ = tuple(c for c in SETTINGS if c in named and distinct.at[name, c] > 1)
        texts = [label(records[i], compact=compact, skip=shared, settings=differ) for i in at]
        keys = [every_key[i] for i in at]
        repeats_only = len(set(texts)) == len(set(keys)) == len(set(zip(texts, keys)))
        if len(set(texts)) < len(texts) and not (compact and repeats_only):
            texts = [str(records[i]["run_id"]) for i in at]
        for i, text in zip(at, texts):
            out[i] = text
    return out


DOUBTS = {
    "measured": (False, "projected", "projected or estimated by its source, not measured (measured = false)"),
    "oversubscribed": (True, "oversubscribed", "more busy threads than cores, or a loaded host, at the start "
                                               "(oversubscribed): it measures contention for the CPU, not the "
                                               "training"),
    "complete": (False, "incomplete", "a rank's steps file is missing or a rank stopped early (complete = false): "
                                      "its figures cover only some ranks"),
}
"""Runs a page shows, marked, but never headlines or concludes from: column → (the value saying so, mark, why)."""


def doubts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run (rows of ``runs``), whether each of :data:`DOUBTS` applies (a bool column per mark)."""
    return pd.DataFrame({mark: (runs[column].eq(value).fillna(False).astype(bool) if column in runs
                                else pd.Series(False, index=runs.index))
                         for column, (value, mark, _) in DOUBTS.items()}, index=runs.index)


def doubtful(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether it is one of :data:`DOUBTS`: shown, never headlined or concluded from."""
    return doubts(runs).any(axis=1)


def marks(runs: pd.DataFrame) -> pd.Series:
    """Per run, its :data:`DOUBTS` and ``known error`` (worded by :func:`known_errors`), joined by ``; ``."""
    known = runs["known_error"].notna() if "known_error" in runs else False
    return pd.Series(_named(doubts(runs).assign(**{"known error": known}), "; "), index=runs.index, dtype=object)


def _named(found: pd.DataFrame, sep: str) -> list[str]:
    """Per row of ``found`` (a bool column per mark), the names of its true columns joined by ``sep``."""
    return [sep.join(found.columns[row]) for row in found.to_numpy(bool)]


def known_errors(frame: pd.DataFrame) -> list[str]:
    """``configuration: known error.`` for each row of a table ``frame`` whose source has a known error."""
    if "known_error" not in frame:
        return []
    rows = frame[frame["known_error"].notna() & frame["known_error"].ne("")]
    return [f"{name}: {error}." for name, error in zip(rows["configuration"], rows["known_error"])]


def with_marks(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows of runs, with ``run_id``) with their :func:`marks` and ``known_error`` where any has one."""
    ids = frame["run_id"].astype(str)
    shown = ids.map(dict(zip(runs["run_id"].astype(str), marks(runs)))).fillna("")
    if not shown.ne("").any():
        return frame
    known = runs["known_error"] if "known_error" in runs else pd.Series(pd.NA, index=runs.index)
    return frame.assign(marks=shown, known_error=ids.map(dict(zip(runs["run_id"].astype(str), known))))


def doubt_notes(runs: pd.DataFrame) -> list[str]:
    """One sentence per kind of :data:`DOUBTS` that some of ``runs`` are: how many, which and why."""
    found = doubts(runs)
    ids = runs["run_id"].astype(str)
    return [f"{count(int(found[mark].sum()), 'run')} {mark} ({first_of(ids[found[mark]].tolist(), 4)}): {why}; "
            "shown and marked, never headlined." for _, mark, why in DOUBTS.values() if found[mark].any()]


EVALUATION_SHARE = 0.001
"""Share of a run's elapsed time from which its evaluation gets a training-only rate beside the window's."""


def evaluation_rates(runs: pd.DataFrame, steps: Summaries | None) -> pd.DataFrame:
    """Per run whose measured window holds evaluation (a ``validation`` phase inside its steps, or time between
    them: evaluation loops, checkpoints): the rate over the window (``window_rate``, which the page's other figures
    use) and without the evaluation (``training_rate``), in ``unit`` per second (tokens, else samples);
    ``evaluation_s`` (the slowest rank's window less its steps, plus the validation inside them and its wait there
    for another rank's evaluation) and its ``evaluation_share`` of the elapsed time, at least
    :data:`EVALUATION_SHARE`."""
    columns = ["experiment", "configuration", "run_id", "unit", "window_rate", "training_rate", "evaluation_s",
               "evaluation_share"]
    if steps is None or steps.per_rank.empty:
        return pd.DataFrame(columns=columns)
    totals = rank_totals(steps.per_rank)
    stepped = steps.per_rank.set_index(["run_id", "rank"])["step_s_sum"].reindex(totals.index)
    within = ((totals["elapsed_s"] - stepped).clip(lower=0.0) + totals["validation_s"].fillna(0.0)
              + totals["wait_outside_s"].fillna(0.0))
    totals = totals.assign(evaluation_s=within).reset_index()
    slowest = totals.loc[totals.groupby(totals["run_id"].astype(str))["elapsed_s"].idxmax()]
    evaluation = dict(zip(slowest["run_id"].astype(str), slowest["evaluation_s"]))
    shown = runs.assign(configuration=labels(runs), evaluation_s=runs["run_id"].astype(str).map(evaluation))
    shown = shown[(shown["evaluation_s"] > EVALUATION_SHARE * shown["elapsed_s"]).fillna(False).to_numpy(bool)]
    unit = "tokens" if shown["tokens"].notna().all() else "samples"
    return shown.assign(unit=unit, window_rate=shown[unit] / shown["elapsed_s"],
                        training_rate=shown[unit] / (shown["elapsed_s"] - shown["evaluation_s"]),
                        evaluation_share=shown["evaluation_s"] / shown["elapsed_s"])[columns].reset_index(drop=True)


def evaluation_notes(runs: pd.DataFrame, steps: Summaries | None) -> list[str]:
    """What is known of the evaluation of the runs :func:`evaluation_rates` cannot split: a log's intervals that
    include an evaluation, left out of its window (``extra_excluded_records``), and a table's ``validation_s``
    without steps."""
    stepped = set(steps.per_rank["run_id"].astype(str)) if steps is not None else set()
    out = []
    if "extra_excluded_records" in runs:
        left = runs[pd.to_numeric(runs["extra_excluded_records"], errors="coerce").fillna(0).gt(0).to_numpy(bool)]
        out += [f"{r['run_id']}: {count(r['extra_excluded_records'], 'interval')} whose time includes an evaluation "
                "left out of its measured window: its rate is training-only; the rate with evaluation was not "
                "measured." for r in left.to_dict("records")]
    if "validation_s" in runs:
        given = runs[runs["validation_s"].gt(0).fillna(False).to_numpy(bool)
                     & ~runs["run_id"].astype(str).isin(stepped).to_numpy(bool)]
        if len(given):
            out.append(f"{first_of(given['run_id'].astype(str).tolist(), 4)}: validation_s given beside elapsed_s, "
                       "without steps to tell whether elapsed_s includes it: the rate shown is the one given, "
                       "training-only or not as its source measured it; a time breakdown shows the validation as a "
                       "part of its own beside the training loop (trainperf.report.phases.validation_inside).")
    return out
