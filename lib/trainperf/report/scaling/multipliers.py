"""The scaling studies of a page's runs (their kind, what else changes between their runs, which laws judge
them), their table of multipliers with 95 % intervals, its chart, and how the efficiency moves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from trainperf.estimates import NO_INTERVAL, distinguish
from trainperf.invariants import serial_fraction_possible
from trainperf.report.html import and_list, around, fmt_int, fmt_pct, fmt_times
from trainperf.report.page import keep_experiments
from trainperf.report.run_labels import (by_experiment, configuration_means, configuration_of, doubtful, labels, marks,
                                         study_of)
from trainperf.report.theme import error_bars, tick_labels
from trainperf.scaling import karp_flatt, second_study_rows
from trainperf.stats import FASTER, SLOWER, verdict

SAME_TRAINING = {"single": "ddp"}  # one process is DDP at world size 1: single → ddp is no change


def studies(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of scaling studies measured at two or more device counts (:func:`keep_experiments`), each study
    an experiment named with its kind (``seed000-scaling (weak scaling)``, ``my-sweep (global batch 8; strong
    scaling)``); a run in two studies is in both (:func:`trainperf.scaling.second_study_rows`; docs/reports.md)."""
    shared = second_study_rows(runs)
    if len(shared):
        attrs, runs = runs.attrs, pd.concat([runs, shared], ignore_index=True).copy()  # copy: one block per dtype
        runs.attrs = attrs
    study = study_of(runs)
    kinds = {name: kind_label(group) for name, group in runs.groupby(study, sort=False)}
    named = {name: f"{name[:-1]}; {kinds[name]})" if name != str(experiment) and name.endswith(")")  # a series
             else f"{name} ({kinds[name]})" for name, experiment in zip(study, runs["experiment"])}
    runs = runs.assign(experiment=study.map(named))
    counts = runs.groupby("experiment")["gpus"].nunique()
    return keep_experiments(runs, counts >= 2, ["gpus", "micro_batch_size", "run_id"],
                            "measured at one device count only: no scaling",
                            "no experiment has runs at two or more device counts (column gpus): measure one "
                            "experiment at several device counts, e.g. with torchrun --nproc-per-node 1, 2, 4 "
                            f"(experiments: {', '.join(map(str, counts.index)) or 'none'})")


def changes(group: pd.DataFrame) -> list[str]:
    """What differs between one experiment's runs besides the device count, e.g. ``strategy ddp (from 8 devices) →
    fsdp (from 64 devices)``; a batch scaled with the devices and :data:`SAME_TRAINING` are no change."""
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


KIND_LABELS = {"strong": "strong scaling", "weak": "weak scaling", None: "strong or weak not known"}
"""``scaling_kind`` of :func:`table` and the words :func:`studies` names a study with, by its ``scaling_type``."""


def kind_of(group: pd.DataFrame) -> str | None:
    """The ``scaling_type`` of one study's runs: ``strong``, ``weak``, or None (not known, or mixed)."""
    kinds = group["scaling_type"].dropna().unique() if "scaling_type" in group else []
    return str(kinds[0]) if len(kinds) == 1 else None


def kind_label(group: pd.DataFrame) -> str:
    """:func:`kind_of` one study's runs in words (:data:`KIND_LABELS`)."""
    return KIND_LABELS.get(kind_of(group), KIND_LABELS[None])


JUDGED_BY = {
    "weak": "the same work per device at every device count. The multiplier is Gustafson's scaled speedup and the "
            "efficiency the per-device throughput against the baseline's; Amdahl's law and the Karp–Flatt serial "
            "fraction assume the same total work and are not applied (projection: USL only).",
    "strong": "the same total work per optimizer step at every device count: Amdahl's law, USL and the Karp–Flatt "
              "serial fraction apply.",
    None: "the data does not tell whether the work per step or per device is held (give global_batch_size, tokens "
          "and steps, or scaling_type): judged as strong scaling."}
"""Per :func:`kind_of`, which laws judge a study (README.md, "Scaling"); one not known is judged as strong scaling."""


def laws(runs: pd.DataFrame) -> list[str]:
    """Per study, a sentence on which laws judge it (:data:`JUDGED_BY`)."""
    return [f"{name}: {JUDGED_BY.get(kind_of(group), JUDGED_BY[None])}" for name, group in by_experiment(runs)]


Study = dict[str, tuple[pd.DataFrame, pd.DataFrame]]
"""Per experiment (by name, in the runs' order): its :func:`experiment_rows`."""

SPEED = ("tokens_per_s", "samples_per_s", "elapsed_s")
"""Speed columns a scaling table shows (those any run has), as the mean over a configuration's repeats."""


def table(study: Study) -> pd.DataFrame:
    """One row per configuration of each experiment of ``study`` (its repeats' mean, docs/statistics.md):
    ``experiment, configuration, gpus, runs``, the speeds any run has (tokens/s, samples/s, elapsed s) with
    ``interval`` (the throughput's 95 % interval, text), ``ideal`` (devices / the baseline configuration's),
    ``scaling_multiplier`` (×) and ``scaling_efficiency`` with their 95 % intervals (``multiplier_low``/``_high``,
    ``efficiency_low``/``_high``; as text, with their source or why none: ``multiplier_interval``,
    ``efficiency_interval``), ``serial_fraction`` (``serial_low``/``_high``, ``serial_emptied``), ``scaling_basis``,
    ``only_devices_change``, ``scaling_kind``, ``marks``, ``known_error`` and ``concluded`` (no run of it or of the
    baseline configuration is doubtful)."""
    found = pd.concat([rows for rows, _ in study.values()], ignore_index=True)
    speed = [c for c in SPEED if found[c].notna().any()]
    return found[["experiment", "configuration", "gpus", "runs", *speed, "interval", "ideal",
                  "scaling_multiplier", "multiplier_low", "multiplier_high", "multiplier_interval",
                  "scaling_efficiency", "efficiency_low", "efficiency_high", "efficiency_interval",
                  "serial_fraction", "serial_low", "serial_high", "serial_emptied", "scaling_basis", "only_devices_change",
                  "scaling_kind", "marks", "known_error", "concluded"]]


def shown_columns(group: pd.DataFrame) -> list[str]:
    """The columns of one experiment's :func:`table` rows a report shows (none empty): the speed it is compared
    by, the figures, the efficiency's interval as text (the multiplier's is that times the ideal), the marks."""
    speed = "elapsed_s" if str(group["scaling_basis"].iloc[0]).startswith("elapsed") else next(
        (c for c in SPEED if c in group and group[c].notna().any()), "elapsed_s")
    columns = ["configuration", "gpus", "runs", speed, "interval", "scaling_multiplier", "scaling_efficiency",
               "efficiency_interval", "serial_fraction", "marks"]
    keep = group[columns].notna().any() & ~group[columns].isin(["–", ""]).all()
    return [c for c in columns if keep[c]]


INTERVALS = {"scaling_multiplier": ("multiplier_low", "multiplier_high"),
             "scaling_efficiency": ("efficiency_low", "efficiency_high"), "serial_fraction": ("serial_low", "serial_high")}
"""The figures of :func:`table` drawn against the ideal, and the columns of their 95 % intervals."""


def against_ideal(frame: pd.DataFrame, value: str, colors: dict[str, str]) -> Axes:
    """The chart of a figure of :data:`INTERVALS`: ``value`` of :func:`table` rows per experiment (``colors``)
    against the relative devices (log scale) with its 95 % interval, rows not ``concluded`` crossed."""
    ax = sns.lineplot(frame, x="ideal", y=value, hue="experiment", palette=colors, marker="o")
    error_bars(ax, frame, "ideal", value, *INTERVALS[value], color=frame["experiment"].map(colors))
    marked = frame[~frame["concluded"]]  # projected, oversubscribed or incomplete
    ax.scatter(marked["ideal"], marked[value], marker="x", s=60, color=marked["experiment"].map(colors), zorder=3,
               label="not concluded from (marked)")
    ax.set(xscale="log", xlabel="devices relative to the baseline (N / N_baseline)")
    ax.set_xticks(sorted(frame["ideal"].unique()))  # the measured ratios
    tick_labels(ax, "x")
    return ax


BASELINE = "baseline"
SOURCES = {"steps of one run": "steps", "steps, repeats": "steps of repeats", "repeats, no steps": "repeats"}
"""What an interval comes from, in the words of the interval columns."""


def experiment_rows(runs: pd.DataFrame, every: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One experiment's :func:`table` rows and their run intervals, from its runs and their run intervals ``every``."""
    group, every = runs.reset_index(drop=True), every.reset_index(drop=True)
    weak = kind_of(group) == "weak"  # Karp–Flatt assumes the same total work: none for weak scaling
    key = configuration_of(every)
    base_key = set(key[(group["run_id"] == group["baseline_run_id"]).fillna(False).to_numpy(bool)])  # its configuration
    rows, found = configuration_means(group, every, (*SPEED, "scaling_multiplier"))
    configuration = configuration_of(found)
    at_base = found.index[configuration.isin(base_key)]
    base = at_base[0] if len(at_base) else None
    multiplier, ideal = rows["scaling_multiplier"], pd.Series(np.nan, index=rows.index)
    if base is not None:
        multiplier, ideal = multiplier / multiplier[base], rows["gpus"] / rows.at[base, "gpus"]
    low, high, multiplier_text, efficiency_text = map(np.array, zip(*(
        _multiplier_interval(found, i, base, m, p) for i, m, p in zip(rows.index, multiplier, ideal))))
    point = karp_flatt(multiplier, ideal, weak)
    possible = serial_fraction_possible(point)  # outside [0, 1]: emptied, said by serial_notes

    known = group["known_error"] if "known_error" in group else pd.Series(pd.NA, index=group.index)
    shown = group.assign(marks=marks(group), doubtful=doubtful(group), known_error=known.astype(object)
                         ).groupby(key.to_numpy(), sort=False)
    row_marks, row_errors = (shown[c].agg(lambda m: "; ".join(dict.fromkeys(x for x in m.dropna() if x)))
                             for c in ("marks", "known_error"))
    doubt = configuration.map(shown["doubtful"].any()).to_numpy(bool)
    concluded = ~doubt & (base is not None and not doubt[base])
    rate = [rows[f"{unit}_per_s"].iat[i] if f"{unit}_per_s" in rows else throughput  # around the rate shown
            for i, (unit, throughput) in enumerate(zip(found["unit"], found["throughput"]))]
    return rows.assign(
        configuration=labels(rows), interval=[text or "–" for text in around(found, rate)[2]], ideal=ideal,
        multiplier_low=low, multiplier_high=high,  # e falls as S rises; its interval held within [0, 1]
        serial_low=np.where(possible, np.clip(karp_flatt(high, ideal, weak), 0, 1), np.nan),
        serial_high=np.where(possible, np.clip(karp_flatt(low, ideal, weak), 0, 1), np.nan), multiplier_interval=multiplier_text.tolist(),
        efficiency_interval=efficiency_text.tolist(), scaling_multiplier=multiplier,
        scaling_efficiency=multiplier / ideal, efficiency_low=low / ideal, efficiency_high=high / ideal,
        serial_fraction=np.where(possible, point, np.nan), serial_emptied=np.isfinite(point) & ~possible,
        only_devices_change=not changes(group), scaling_kind=kind_label(group),
        marks=configuration.map(row_marks).to_numpy(object), known_error=configuration.map(row_errors).to_numpy(object),
        concluded=concluded), found


def _multiplier_interval(found: pd.DataFrame, i: int, base: int | None, multiplier: float, ideal: float
                         ) -> tuple[float, float, str, str]:
    """The 95 % interval of row ``i``'s multiplier against row ``base`` of ``found``, around the ``multiplier``
    shown: low, high, and as text the multiplier's and the efficiency's (or why none)."""
    if i == base:
        return np.nan, np.nan, BASELINE, BASELINE
    if base is None or pd.isna(found.at[i, "throughput"]) or pd.isna(found.at[base, "throughput"]):
        return np.nan, np.nan, "–", NO_INTERVAL
    ratio = distinguish(found, found.at[base, "configuration"], found.at[i, "configuration"])
    if not ratio.tested:
        why = NO_INTERVAL if pd.isna(found.at[i, "low"]) else "no interval (the baseline is one run without steps)"
        return np.nan, np.nan, "–", why
    scale = multiplier / (1 + ratio.difference.estimate)
    low, high = (1 + ratio.difference.low) * scale, (1 + ratio.difference.high) * scale
    source = " and ".join(dict.fromkeys(SOURCES.get(found.at[j, "basis"], found.at[j, "basis"]) for j in (i, base)))
    return (low, high, f"{fmt_times(low, 2)}–{fmt_times(high, 2)}",
            f"{fmt_pct(low / ideal)}–{fmt_pct(high / ideal)} ({source})")


def efficiency_notes(study: Study) -> list[str]:
    """Per experiment of ``study`` with intervals: how its efficiency moves between the ``concluded`` configurations
    of consecutive device counts, a rise or drop only beyond the noise (:func:`trainperf.stats.verdict`)."""
    out = []
    for name, (rows, found) in study.items():
        kept = rows.index[rows["concluded"] | (rows["ideal"] == 1)]
        if found["low"].isna().any() or len(kept) < 2 or not rows.loc[kept, "concluded"].any():
            continue
        moves, shown = [], rows["scaling_efficiency"]
        for a, b in zip(kept[:-1], kept[1:]):
            eff = distinguish(found, found.loc[a, "configuration"], found.loc[b, "configuration"]).difference.times(
                rows.loc[a, "gpus"] / rows.loc[b, "gpus"])  # efficiency ratio = throughput ratio × devices ratio
            move = {FASTER: "rises", SLOWER: "falls"}.get(verdict(eff), "does not change beyond the noise")
            moves.append(f"{move} from {fmt_int(rows.loc[a, 'gpus'])} to {fmt_int(rows.loc[b, 'gpus'])} devices "
                         f"({fmt_pct(shown[a], 0)} → {fmt_pct(shown[b], 0)}, 95 % interval of the change "
                         f"{fmt_pct(eff.low, 0, signed=True)} to {fmt_pct(eff.high, 0, signed=True)})")
        out.append(f"{name}: scaling efficiency {'; it '.join(moves)}." + left_out(rows))
    return out


def left_out(rows: pd.DataFrame) -> str:
    """`` Left out: 4 devices (oversubscribed).``: the rows of one study's :func:`table` no conclusion is drawn from."""
    doubted = rows[~rows["concluded"] & (rows["ideal"] != 1)]
    if doubted.empty:
        return ""
    return " Left out: " + and_list([f"{fmt_int(g)} devices ({m or 'its baseline is doubtful'})"
                                     for g, m in zip(doubted["gpus"], doubted["marks"])]) + "."

