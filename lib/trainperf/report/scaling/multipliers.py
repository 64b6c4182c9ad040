"""The table of multipliers (per configuration of each scaling study, with 95 % intervals), the chart each of its
figures is drawn in, and how the efficiency moves from one device count to the next."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from trainperf.estimates import NO_INTERVAL, distinguish
from trainperf.invariants import serial_fraction_possible
from trainperf.report.html import and_list, around, fmt_int, fmt_pct, fmt_times
from trainperf.report.run_labels import configuration_means, configuration_of, doubtful, labels, marks
from trainperf.report.theme import error_bars, tick_labels
from trainperf.report.scaling.studies import changes, kind_label, kind_of
from trainperf.scaling import karp_flatt
from trainperf.stats import FASTER, SLOWER, verdict

Study = dict[str, tuple[pd.DataFrame, pd.DataFrame]]
"""Per experiment (by name, in the runs' order): its :func:`experiment_rows`."""

SPEED = ("tokens_per_s", "samples_per_s", "elapsed_s")
"""Speed columns a scaling table shows (those any run has), as the mean over a configuration's repeats."""


def table(study: Study) -> pd.DataFrame:
    """One row per configuration of each experiment of ``study`` (its repeats' mean, docs/statistics.md):
    ``experiment, configuration, gpus, runs``, the speeds any run has (tokens/s, samples/s, elapsed s) with
    ``interval`` (the throughput's 95 % interval, text), ``ideal`` (devices / the baseline configuration's),
    ``scaling_multiplier`` (×) and ``scaling_efficiency`` with their 95 % intervals (``multiplier_low``/``_high``,
    ``efficiency_low``/``_high``; as text ``multiplier_interval``, ``efficiency_interval``: with their source, or why
    there is none), ``serial_fraction`` with ``serial_low``/``_high`` and ``serial_emptied``, ``scaling_basis``,
    ``only_devices_change``, ``scaling_kind``, ``marks``, ``known_error`` (``""``: none) and ``concluded`` (none of
    its runs, nor the baseline configuration's, is projected, oversubscribed or incomplete)."""
    found = pd.concat([rows for rows, _ in study.values()], ignore_index=True)
    speed = [c for c in SPEED if found[c].notna().any()]
    return found[["experiment", "configuration", "gpus", "runs", *speed, "interval", "ideal",
                  "scaling_multiplier", "multiplier_low", "multiplier_high", "multiplier_interval",
                  "scaling_efficiency", "efficiency_low", "efficiency_high", "efficiency_interval",
                  "serial_fraction", "serial_low", "serial_high", "serial_emptied", "scaling_basis", "only_devices_change",
                  "scaling_kind", "marks", "known_error", "concluded"]]


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


INTERVALS = {"scaling_multiplier": ("multiplier_low", "multiplier_high"),
             "scaling_efficiency": ("efficiency_low", "efficiency_high"), "serial_fraction": ("serial_low", "serial_high")}
"""The figures of :func:`table` drawn against the ideal, and the columns of their 95 % intervals."""


def against_ideal(frame: pd.DataFrame, value: str, colors: dict[str, str]) -> Axes:
    """The chart the scaling page draws for each figure of :data:`INTERVALS`: ``value`` of :func:`table` rows
    ``frame`` per experiment (in ``colors``) against the devices relative to the baseline (log scale, ticks at the
    measured ratios), with its 95 % interval, rows no conclusion is drawn from crossed; the cell adds the ideal,
    the title, the y axis and the legend."""
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
    """One experiment's :func:`table` rows and their :func:`trainperf.estimates.run_intervals` rows (same order),
    from its runs and their run_intervals ``every`` (per run, same order)."""
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
    row_marks = shown["marks"].agg(lambda m: "; ".join(dict.fromkeys(x for x in m if x)))
    row_errors = shown["known_error"].agg(lambda m: "; ".join(dict.fromkeys(x for x in m.dropna() if x)))
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
    """The 95 % interval of configuration ``i``'s multiplier against the baseline
    configuration ``base`` (rows of ``found``), around the ``multiplier`` shown: low,
    high, and as text the multiplier's and the efficiency's (``BASELINE``, or why none)."""
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
    """Per experiment of ``study`` whose configurations have intervals: how its efficiency moves from one
    device count to the next, a rise or drop only beyond the noise (:func:`trainperf.stats.verdict`),
    between configurations a conclusion may be drawn from (``concluded``, :func:`table`)."""
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

