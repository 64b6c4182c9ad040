"""Whether a report may call one configuration faster than another, from
each configuration's throughput and 95 % interval (:mod:`trainperf.estimates`:
from its steps, or the spread of its repeats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries, job_steps
from trainperf.estimates import Estimate, distinguish_rows, intervals_of_job_steps, run_spread
from trainperf.report.html import fmt_int, fmt_pct
from trainperf.stats import (FASTER, MIN_EFFECT, POWER, RUN_CV, SLOWER, Difference, detectable_effect,
                             repeats_to_detect, welch_dof)

TIED = "indistinguishable"
NO_INTERVAL = "no interval (one run without steps)"
"""What a report shows in place of an interval a configuration does not have."""


@dataclass(frozen=True)
class Call:
    """``b`` against ``a``: ``verdict`` (``faster``, ``slower`` or :data:`TIED`),
    ``tested`` (both sides had an interval), the relative difference
    ``estimate`` = b / a − 1 with its interval ``low``–``high`` (NaN untested).
    Tested, a difference counts when its interval excludes 0 and it is at least
    :data:`MIN_EFFECT`; untested, when it is at least :data:`MIN_EFFECT`."""

    verdict: str
    tested: bool
    estimate: float
    low: float
    high: float

    def times(self, k: float) -> Difference:
        """The difference of the ratio b / a times ``k`` (e.g. of totals, times a ratio of devices: per device)."""
        return Difference((1 + self.estimate) * k - 1, (1 + self.low) * k - 1, (1 + self.high) * k - 1, math.nan)

    def text(self) -> str:
        """``+3.1 % (95 % interval +1.0 % to +5.2 %)``, or the point figure marked untested."""
        if self.tested:
            return (f"{fmt_pct(self.estimate, signed=True)} (95 % interval {fmt_pct(self.low, signed=True)} to "
                    f"{fmt_pct(self.high, signed=True)})")
        return f"{fmt_pct(self.estimate, signed=True)} (no interval: the noise is not tested)"


def has_interval(row: pd.Series) -> bool:
    """Whether a :func:`trainperf.estimates.configuration_intervals` row has an interval."""
    return bool(row["dof"] > 0 and math.isfinite(row["se_log"]))


def call(table: pd.DataFrame, a: str, b: str, min_effect: float = MIN_EFFECT) -> Call:
    """Configuration ``b`` against ``a`` of a :func:`run_intervals` or
    :func:`trainperf.estimates.configuration_intervals` table (column ``configuration``)."""
    rows = table.drop_duplicates("configuration").set_index("configuration")
    x, y = rows.loc[a], rows.loc[b]
    tested = has_interval(x) and has_interval(y)
    found = distinguish_rows(x, y, min_effect)
    d = found.difference
    if tested:
        verdict = found.verdict if found.verdict in (FASTER, SLOWER) else TIED
    else:
        verdict = TIED if abs(d.estimate) < min_effect else FASTER if d.estimate > 0 else SLOWER
    return Call(verdict, tested, d.estimate, d.low, d.high)


def run_intervals(runs: pd.DataFrame, steps: Summaries | None = None) -> pd.DataFrame:
    """Per run of ``runs`` (same order): the interval of its configuration
    (:func:`trainperf.estimates.configuration_intervals`): ``run_id, configuration``,
    ``unit``, ``throughput`` (``unit`` per second), ``low``, ``high``, ``se_log``,
    ``dof`` and ``basis`` (what the interval covers, or that there is none). A run
    with fewer than 2 complete steps in ``steps`` counts as one without steps."""
    return intervals_per_run(runs, job_frames(steps))


def intervals_per_run(runs: pd.DataFrame, frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """:func:`run_intervals` from the :func:`job_frames` of the steps."""
    found = intervals_of_job_steps(runs, {r: frames[r] for r in runs["run_id"].astype(str) if r in frames})
    row = {run_id: i for i, ids in enumerate(found["run_ids"]) for run_id in ids.split(", ")}
    ids = runs["run_id"].astype(str).tolist()
    out = found.drop(columns=["experiment", "run_ids", "runs", "steps"]).reindex([row.get(r) for r in ids])
    out = out.reset_index(drop=True).assign(basis=lambda o: o["basis"].where(o["low"].notna(), NO_INTERVAL))
    out.insert(0, "run_id", ids)
    return out


def around(found: pd.DataFrame, rate: object) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """The intervals of ``found`` (:func:`run_intervals` rows) around the rates shown, ``rate`` (their
    relative width kept): low, high, and as text (``1,258–1,465``; ``None``: no interval)."""
    k = np.asarray(rate, float) / found["throughput"].to_numpy(float)
    low, high = found["low"].to_numpy(float) * k, found["high"].to_numpy(float) * k
    text = [None if pd.isna(x) else f"{fmt_int(a)}–{fmt_int(b)}" for x, a, b in zip(found["low"], low, high)]
    return low, high, text


def job_frames(steps: Summaries | None) -> dict[str, pd.DataFrame]:
    """:func:`trainperf.aggregate.job_steps` of the runs ``steps`` holds enough of."""
    if steps is None or steps.per_step.empty:
        return {}
    return job_steps(steps, usable_only=True)[0]


def configuration_means(runs: pd.DataFrame, found: pd.DataFrame, columns: tuple[str, ...] | list[str]
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``runs`` (one experiment, index from 0) and ``found`` (its :func:`run_intervals`)
    reduced to the first run of each configuration, ``columns`` the mean over its
    repeats, ``runs`` their number. A run without a throughput is a configuration of its own."""
    key = configuration_of(found).to_numpy()
    first = ~pd.Series(key).duplicated().to_numpy()
    means = {c: runs[c].groupby(key, sort=False).transform("mean").to_numpy(float) for c in columns if c in runs}
    count = pd.Series(key).groupby(key, sort=False).transform("size").to_numpy(int)
    return (runs.assign(**means, runs=count)[first].reset_index(drop=True),
            found[first].reset_index(drop=True))


def configuration_of(found: pd.DataFrame) -> pd.Series:
    """Per row of a :func:`run_intervals` frame, the configuration its run repeats (its run id where
    it has no throughput: a configuration of its own)."""
    return found["configuration"].fillna(found["run_id"])


def ties_with_fastest(intervals: pd.DataFrame) -> np.ndarray:
    """Per row of a :func:`run_intervals` frame of one experiment: whether it is the
    fastest configuration or indistinguishable from it."""
    fastest = intervals.loc[intervals["throughput"].idxmax(), "configuration"]
    return np.array([call(intervals, fastest, name).verdict == TIED for name in intervals["configuration"]])


def and_list(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


DETECT = 0.05
"""The difference whose repeats a sentence that calls configurations indistinguishable states (5 %)."""


@dataclass(frozen=True)
class Resolution:
    """What the data of two configurations could tell apart: ``detectable``, the smallest relative
    difference of throughput they detect with 80 % power at 95 % confidence
    (:func:`trainperf.stats.detectable_effect`; NaN without an interval), and ``repeats``, the runs of
    each that would detect ``effect`` (:func:`trainperf.stats.repeats_to_detect` at their runs' spread,
    or at :data:`trainperf.stats.RUN_CV` where neither has an interval: ``assumed``)."""

    detectable: float
    repeats: int | None
    effect: float
    assumed: bool


def resolution(x: pd.Series, y: pd.Series, effect: float = DETECT) -> Resolution:
    """The :class:`Resolution` of two rows of a :func:`run_intervals` table (``se_log``, ``dof`` and,
    where given, ``runs``: how many runs the configuration has; 1 when absent)."""
    if has_interval(x) and has_interval(y):
        se = math.hypot(x["se_log"], y["se_log"])
        sides = [Estimate(r["throughput"], r["se_log"], r["dof"], int(r.get("runs", 1)), 0) for r in (x, y)]
        detectable = detectable_effect(se, welch_dof(x["se_log"], x["dof"], y["se_log"], y["dof"]))
        return Resolution(detectable, repeats_to_detect(run_spread(sides), effect), effect, False)
    return Resolution(math.nan, repeats_to_detect(RUN_CV, effect), effect, True)


def resolution_text(found: list[Resolution]) -> str:
    """A clause for a sentence calling configurations indistinguishable: the smallest difference their
    data could detect (a range over several pairs) and the runs of each that would detect
    :attr:`Resolution.effect` (the most any pair needs), or that without an interval no difference can be."""
    effect = fmt_pct(found[0].effect, 0)
    repeats = max((r.repeats for r in found if r.repeats is not None), default=None)
    tested = [r.detectable for r in found if not r.assumed]
    if not tested:
        return ("without an interval (a configuration has one run without steps) these data detect no difference; at the "
                f"assumed run-to-run variation of {fmt_pct(RUN_CV, 0)}, {repeats} runs of each would detect {effect}")
    low, high = min(tested), max(tested)
    smallest = fmt_pct(low) if fmt_pct(low) == fmt_pct(high) else f"{fmt_pct(low)} to {fmt_pct(high)}"
    text = (f"the smallest difference these data could detect is {smallest} (with {fmt_pct(POWER, 0)} power at "
            "95 % confidence)")
    if len(tested) < len(found):
        text += ", and none where a configuration has no interval"
    return text + (f"; {repeats} runs of each would detect {effect}" if repeats is not None else "")
