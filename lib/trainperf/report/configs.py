"""Naming, grouping and ordering runs for people: the experiments in data
order and the ones a report keeps, configuration labels, the throughput unit a set of runs can be
compared in, one row per configuration, the runs a report never concludes from, and the best run
with its margin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.hardware import is_cpu
from trainperf.estimates import configuration_keys
from trainperf.provenance import provenance
from trainperf.report.applicability import NotApplicable
from trainperf.report.html import count, fmt_int
from trainperf.report.noise import around, configuration_means, configuration_of, run_intervals


@dataclass(frozen=True)
class Unit:
    """The unit runs are compared in: ``tokens`` or ``samples`` (per second)."""

    name: str

    @property
    def rate(self) -> str:
        """Column of the all-device rate, e.g. ``tokens_per_s``."""
        return f"{self.name}_per_s"

    @property
    def per_device(self) -> str:
        return f"{self.name}_per_s_per_gpu"

    @property
    def label(self) -> str:
        return f"{self.name}/s"


def unit_of(runs: pd.DataFrame) -> Unit:
    """Tokens when every run has a token rate, else samples when every run has
    a sample rate, else tokens (runs without one show empty rates)."""
    for name in ("tokens", "samples"):
        if f"{name}_per_s" in runs and runs[f"{name}_per_s"].notna().all():
            return Unit(name)
    return Unit("tokens")


DOUBTS = {"measured": (False, "row", "projected or estimated by the source, not measured (measured = false)",
                      "projected"),
          "oversubscribed": (True, "run", "with more busy threads than cores, or on a loaded host "
                                          "(oversubscribed), which measure contention for the CPU, not scaling",
                             "oversubscribed"),
          "complete": (False, "run", "incomplete (a rank stopped early: its work is missing from the throughput)",
                       "incomplete")}
"""Runs shown but never headlined, fitted or projected from (column: the value that says so, the noun
that counts them, why, and the mark a table shows)."""


def doubtful(group: pd.DataFrame) -> pd.Series:
    """Per run of ``group``, whether it is one of :data:`DOUBTS`."""
    return doubt_marks(group) != ""


def doubt_marks(runs: pd.DataFrame) -> pd.Series:
    """Per run, its marks of :data:`DOUBTS` (``projected``, ``oversubscribed, incomplete``; ``""`` for none)."""
    marks = pd.Series("", index=runs.index, dtype=object)
    for column, (value, _, _, mark) in DOUBTS.items():
        if column in runs:
            hit = runs[column].eq(value).fillna(False).to_numpy(bool)
            marks[hit] = [f"{m}, {mark}" if m else mark for m in marks[hit]]
    return marks


def configuration_table(runs: pd.DataFrame, columns: tuple[str, ...] | list[str],
                        steps: Summaries | None = None) -> pd.DataFrame:
    """One row per configuration of ``runs`` (repeats grouped as
    :func:`trainperf.report.noise.run_intervals` groups them; its first run's settings,
    ``columns`` the mean over its repeats, ``runs`` their number), with the 95 % interval of its
    throughput around the mean rate of :func:`unit_of` (``<rate>_low``/``_high``, and ``interval``
    as text: ``–`` for none) and ``doubt``: the :func:`doubt_marks` of any of its repeats (``""``
    for none). ``steps``: the summaries the intervals come from where the runs have steps."""
    runs = runs.reset_index(drop=True)
    found = run_intervals(runs, steps)
    rows, first = configuration_means(runs, found, columns)
    rate = unit_of(runs).rate
    low, high, text = around(first, rows[rate])
    marks = doubt_marks(runs).groupby(configuration_of(found).to_numpy(), sort=False).agg(
        lambda repeats: ", ".join(dict.fromkeys(m for marks in repeats for m in marks.split(", ") if m)))
    return rows.assign(**{f"{rate}_low": low, f"{rate}_high": high}, interval=[t or "–" for t in text],
                       doubt=marks.to_numpy(object))


def experiments(runs: pd.DataFrame) -> list[str]:
    """The experiments of ``runs`` in the order they first appear."""
    return list(dict.fromkeys(runs["experiment"].astype(str)))


def by_experiment(runs: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    """``runs`` grouped by experiment, the experiments in the order they first appear."""
    return runs.groupby(runs["experiment"].astype(str), sort=False)


def several_device_counts(runs: pd.DataFrame) -> pd.Series:
    """Per row of ``runs``, whether its scaling study (its experiment, or the part of it
    that ``scaling_study`` names) was measured at two or more device counts (``gpus``)."""
    study = runs["scaling_study"].fillna(runs["experiment"]) if "scaling_study" in runs else runs["experiment"]
    return runs.groupby(study.astype(str))["gpus"].transform("nunique") > 1


def keep_experiments(runs: pd.DataFrame, keep: pd.Series, by: list[str], why_not: str,
                     none_kept: str) -> pd.DataFrame:
    """The runs of the experiments for which ``keep`` (a bool per experiment) holds,
    :func:`ordered` by ``by``; the others go to ``attrs['skipped']`` with ``why_not``.
    :class:`NotApplicable` saying ``none_kept`` when none is kept."""
    if not keep.any():
        raise NotApplicable(none_kept)
    out = ordered(runs[runs["experiment"].isin(keep.index[keep]).fillna(False).to_numpy(bool)], by)
    out.attrs = {**runs.attrs, **provenance(skipped=[*runs.attrs.get("skipped", ()),
                                                    *((f"experiment {name}", why_not) for name in keep.index[~keep])])}
    return out


def ordered(runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``runs`` with experiments in the order they first appear in the data,
    each sorted by the columns ``by``; a new index from 0, ``attrs`` kept."""
    position = pd.factorize(runs["experiment"].astype(str))[0]
    out = (runs.assign(_experiment_order=position).sort_values(["_experiment_order", *by], kind="stable")
           .drop(columns="_experiment_order").reset_index(drop=True))
    out.attrs = runs.attrs
    return out


def batch(run: pd.Series | dict, *, compact: bool = False, short: bool = False) -> str:
    """A run's micro-batch and accumulation: ``micro-batch 16 × 64 accumulation``
    (``short``: ``… accum.``; ``micro-batch 16`` where the accumulation is
    unknown); ``compact``: ``16 × 64`` (``16 × ?``)."""
    accum = run.get("grad_accum_steps")
    if compact:
        return f"{fmt_int(run['micro_batch_size'])} × {'?' if pd.isna(accum) else fmt_int(accum)}"
    text = f"micro-batch {fmt_int(run['micro_batch_size'])}"
    return text if pd.isna(accum) else f"{text} × {fmt_int(accum)} {'accum.' if short else 'accumulation'}"


def label(run: pd.Series | dict, *, compact: bool = False, skip: tuple[str, ...] = ()) -> str:
    """A configuration label: ``4 GPUs across 1 node`` (``processes`` on CPU),
    plus the batch, strategy, model and platform where the row has them
    (except the columns of :data:`LABEL_DETAILS` in ``skip``). ``compact``: one part per line, for chart axes."""
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
    for column in ("strategy", "model", "platform"):
        if pd.notna(run.get(column)) and column not in skip:
            parts.append(str(run[column]))
    return ("\n" if compact else ", ").join(parts) if parts else str(run["run_id"])


LABEL_DETAILS = ("model", "platform", "strategy", "micro_batch_size", "grad_accum_steps", "gpus", "nodes")


def labels(runs: pd.DataFrame, *, compact: bool = False) -> list[str]:
    """Labels for ``runs`` that leave out what every run of the same
    experiment shares (e.g. the platform of a single-platform study); run ids
    where labels would repeat within an experiment, except, ``compact`` (chart
    axes, where the runs of one label are averaged), for the repeats of one
    configuration (:func:`trainperf.estimates.configuration_keys`), which share theirs."""
    groups = runs["experiment"].astype(str) if "experiment" in runs else pd.Series("", index=runs.index)
    out = pd.Series("", index=runs.index, dtype=object)
    for _, group in runs.groupby(groups, sort=False):
        shared = tuple(c for c in LABEL_DETAILS if c in group and len(group) > 1 and group[c].nunique(dropna=False) == 1)
        texts = [label(r, compact=compact, skip=shared) for r in group.to_dict("records")]
        keys = configuration_keys(group).tolist()
        repeats_only = len(set(texts)) == len(set(keys)) == len(set(zip(texts, keys)))
        if len(set(texts)) < len(texts) and not (compact and repeats_only):
            texts = [str(r) for r in group["run_id"]]
        out.loc[group.index] = texts
    return out.tolist()


class Ranking(NamedTuple):
    """The best run by a column, the runner-up and the ``margin`` (best / runner-up − 1
    for larger-is-better, runner-up / best − 1 otherwise)."""

    best: pd.Series
    runner_up: pd.Series | None
    margin: float


def rank(runs: pd.DataFrame, column: str, *, larger_is_better: bool = True) -> Ranking:
    """The best run of ``runs`` by ``column`` and its margin over the runner-up."""
    candidates = runs[runs[column].notna()].sort_values(column, ascending=not larger_is_better)
    if candidates.empty:
        raise ValueError(f"no run has {column}")
    best = candidates.iloc[0]
    if len(candidates) == 1:
        return Ranking(best, None, float("nan"))
    second = candidates.iloc[1]
    a, b = float(best[column]), float(second[column])
    return Ranking(best, second, a / b - 1 if larger_is_better else b / a - 1)
