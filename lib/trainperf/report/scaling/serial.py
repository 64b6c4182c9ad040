"""The Karp–Flatt serial fraction of each strong-scaling study: how it moves with the devices, beyond the
noise where the measurements have intervals, and what that means."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf.invariants import EMPTIED
from trainperf.report.html import fmt_int, fmt_sig
from trainperf.report.noise import and_list
from trainperf.report.scaling.multipliers import left_out

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


def serial_notes(every_row: pd.DataFrame) -> list[str]:
    """How each experiment's serial fraction (of its rows of
    :func:`trainperf.report.scaling.multipliers.table`, ``every_row``) moves with devices, and what that
    means: a move only beyond the noise where its configurations have intervals
    (see :func:`serial_trend`); without intervals, said to be untested. Only rows
    a conclusion may be drawn from (``concluded``) count; an experiment left with
    fewer than two says so. First, the experiments whose e lies outside [0, 1]
    somewhere (emptied by ``trainperf.invariants``: not plotted) say where."""
    out = [f"{name}: the Karp–Flatt fraction e is outside [0, 1] at "
           f"{and_list([fmt_int(g) + ' devices' for g in group.loc[group['serial_emptied'], 'gpus']])} "
           f"({EMPTIED}: {SERIAL_OUTSIDE}); not plotted."
           for name, group in every_row.groupby("experiment", sort=False) if group["serial_emptied"].any()]
    frame = every_row.dropna(subset=["serial_fraction"])
    for name, every in frame.groupby("experiment", sort=False):
        group = every[every["concluded"]]
        left = left_out(every)
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

