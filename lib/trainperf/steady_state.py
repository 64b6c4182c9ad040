"""Where a run's steady state starts: its warm-up, found from its step times (s per step) by the Marginal Standard
Error Rule (MSER, White 1997) after the configured warm-up. The rule, its reference, the two choices of this
implementation and how they were measured: docs/profiler.md, "Steady state: the warm-up found from the data".
"""

from __future__ import annotations

import numpy as np

RULES = ("mser", "fixed")
"""``mser`` (the warm-up found from the step times, never less than the configured one) or ``fixed``."""
MIN_STEPS = 10
"""Step times after the configured warm-up that MSER needs; with fewer, the configured warm-up is used."""
MIN_KEPT = 3
"""Step times MSER keeps at least (the statistic of the last one or two is no measure of spread)."""
FAR_OUT_IQR = 3.0
"""Tukey's far-out fence: Q3 + 3 IQR."""


def far_out_fence(values: np.ndarray) -> float:
    """Tukey's far-out fence of ``values`` (:data:`FAR_OUT_IQR`)."""
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 + FAR_OUT_IQR * (q3 - q1))


def mser_statistic(times: np.ndarray) -> np.ndarray:
    """MSER(d) of ``times`` for every d from 0 to len - 1: the sum of squared deviations of ``times[d:]`` from their
    mean over (len - d)^2 (s^2). The sums are of the times less their median: MSER is unchanged, and the rounding of
    a long run's sums stays below the spread of its steps (a steady state of equal times has none)."""
    x = np.asarray(times, dtype=float)
    x = x - np.median(x)
    kept = np.arange(len(x), 0, -1, dtype=float)
    total = np.cumsum(x[::-1])[::-1]
    squares = np.cumsum((x * x)[::-1])[::-1]
    spread = np.maximum(squares - total * total / kept, 0.0)  # rounding may leave a tiny negative
    return spread / (kept * kept)


def mser_truncation(times: np.ndarray) -> int:
    """How many of the first ``times`` MSER drops: far-out times clipped to the fence, the truncation searched
    over every ``d`` that keeps :data:`MIN_KEPT` times or more."""
    x = np.asarray(times, dtype=float)
    x = np.minimum(x, far_out_fence(x))
    return int(np.argmin(mser_statistic(x)[:len(x) - MIN_KEPT + 1]))


def _slow_start(times: np.ndarray) -> int:
    """How many leading ``times`` of a run too short for MSER lie above the far-out fence of the :data:`MIN_KEPT`
    or more times after them (a first interval still compiling or autotuning: 1.5 × the steady step in a real
    Composer log)."""
    slow = 0
    while len(times) - slow > MIN_KEPT and times[slow] > far_out_fence(times[slow + 1:]):
        slow += 1
    return slow


def warmup_length(times: np.ndarray, minimum: int, rule: str) -> tuple[int, str]:
    """The warm-up of a run, as a number of its step ``times`` (in order, s per step, each at its slowest rank;
    finite and positive after the configured ``minimum``), and the rule that chose it (one of :data:`RULES`):
    ``mser`` with fewer than :data:`MIN_STEPS` times after the minimum keeps the minimum (``fixed``) plus any
    far-out times it starts with."""
    if rule not in RULES:
        raise ValueError(f"warm-up rule {rule!r}: one of {', '.join(RULES)}")
    after = np.asarray(times, dtype=float)[minimum:]
    if not (np.isfinite(after) & (after > 0)).all():
        raise ValueError("step times must be finite and positive: leave out those that are not")
    if rule == "fixed":
        return minimum, "fixed"
    if len(after) < MIN_STEPS:
        slow = _slow_start(after)
        return (minimum + slow, "mser") if slow else (minimum, "fixed")
    cut = mser_truncation(after)
    if cut > len(after) // 2:  # too short to tell warm-up from steady state (White 1997)
        return minimum, "fixed"
    return minimum + cut, "mser"
