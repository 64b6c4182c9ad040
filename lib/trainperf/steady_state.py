"""Where a run's steady state starts: its warm-up, found from its step times.

The first steps of a training job are slower than the rest (compilation,
autotuning, allocator and cache warm-up, a data loader filling its prefetch
queue), and how many are slow depends on the job. The configured warm-up
(``warmup_steps``: the profiler's argument, a log's sidecar, a steps table's
``warmup`` flags) is the least that is left out; after it, the steady state
starts where the Marginal Standard Error Rule puts it (MSER: White, K. P.
(1997), "An effective truncation heuristic for bias reduction in simulation
output", *Simulation* 69(6), 323-334). Of the job step times after the
minimum, ``x_1 .. x_n`` (each step at its slowest rank), MSER drops the first
``d`` that minimise

    MSER(d) = sum_{i>d} (x_i - mean(x_{d+1..n}))^2 / (n - d)^2,

the squared standard error of the mean of the steps kept, searched over
every ``d`` that keeps three steps or more. Where the minimum lies in the
second half, the run is too short to tell a warm-up from its steady state
(White 1997): the configured warm-up is used (``warmup_rule`` fixed). Dropping slow early steps shrinks the spread more than the loss of
steps widens the error; dropping steady ones does not.

Two choices of this implementation, both measured on synthetic runs of 60 to
2,000 steps (``tests/test_steady_state.py`` keeps the cases):

* batches of one step (MSER), not the means of five (MSER-5: White, Cobb and
  Spratt (2000), "A comparison of five steady-state truncation heuristics
  for simulation", *Proc. Winter Simulation Conference*; Franklin and White
  (2008), "Stationarity tests and MSER-5"): MSER-5 truncates at multiples of
  five steps, and on steady runs of a few hundred steps it cut 30 or more
  steps in one run of twenty, where MSER cut at most a few;
* step times above Tukey's far-out fence (Q3 + 3 IQR of the times after the
  minimum, :func:`far_out_fence`) are clipped to it first: one stall early in
  the run (a garbage collection, a checkpoint taken inside a step) would
  otherwise pull the truncation past it, biasing the measurement; a warm-up
  step clipped to the fence still stands far above the steady steps.

With fewer than :data:`MIN_STEPS` step times after the minimum there is too
little for MSER: only leading times above the far-out fence of the (at least
:data:`MIN_KEPT`) times after them are warm-up (a log of a few intervals
whose first one still compiles: ``warmup_rule`` mser), else the configured
warm-up is used (``warmup_rule`` fixed), as it is when a run asks for it
(``warmup_rule: fixed``).
"""

from __future__ import annotations

import numpy as np

RULES = ("mser", "fixed")
"""How a run's warm-up is chosen: ``mser`` (found from the step times, never
less than the configured warm-up) or ``fixed`` (the configured warm-up)."""
MIN_STEPS = 10
"""Step times after the configured warm-up that MSER needs; with fewer, the configured warm-up is used."""
MIN_KEPT = 3
"""Step times MSER keeps at least (the statistic of the last one or two is no measure of spread)."""
FAR_OUT_IQR = 3.0
"""Tukey's far-out fence: Q3 + 3 IQR."""


def far_out_fence(values: np.ndarray) -> float:
    """Tukey's far-out fence of ``values``: Q3 + :data:`FAR_OUT_IQR` x (Q3 - Q1)."""
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 + FAR_OUT_IQR * (q3 - q1))


def mser_statistic(times: np.ndarray) -> np.ndarray:
    """MSER(d) of ``times`` for every d from 0 to len - 1: the sum of squared
    deviations of ``times[d:]`` from their mean over (len - d)^2 (s^2 for
    times in seconds)."""
    x = np.asarray(times, dtype=float)
    kept = np.arange(len(x), 0, -1, dtype=float)
    total = np.cumsum(x[::-1])[::-1]
    squares = np.cumsum((x * x)[::-1])[::-1]
    spread = np.maximum(squares - total * total / kept, 0.0)  # rounding may leave a tiny negative
    return spread / (kept * kept)


def mser_truncation(times: np.ndarray) -> int:
    """How many of the first ``times`` MSER drops (see the module's
    docstring): far-out times clipped to the fence, the truncation searched
    over every ``d`` that keeps :data:`MIN_KEPT` times or more. A truncation
    in the second half means the run is too short to tell its warm-up from
    its steady state (White 1997); the caller then uses the configured one."""
    x = np.asarray(times, dtype=float)
    x = np.minimum(x, far_out_fence(x))
    return int(np.argmin(mser_statistic(x)[:len(x) - MIN_KEPT + 1]))


def _slow_start(times: np.ndarray) -> int:
    """How many leading ``times`` of a run too short for MSER lie above the
    far-out fence of the :data:`MIN_KEPT` or more times after them (a first
    logged interval still compiling or autotuning, at 1.5 times the steady
    step in a real Composer log): none where fewer than :data:`MIN_KEPT` + 1."""
    slow = 0
    while len(times) - slow > MIN_KEPT and times[slow] > far_out_fence(times[slow + 1:]):
        slow += 1
    return slow


def warmup_length(times: np.ndarray, minimum: int, rule: str) -> tuple[int, str]:
    """The warm-up of a run, as a number of its step times, and the rule that
    chose it: ``times`` are the job's step times in order (each step at its
    slowest rank, seconds per step), of which the first ``minimum`` are the
    configured warm-up (each finite and positive: a NaN or a negative time
    would move the truncation, so a caller leaves them out). ``rule``: one of :data:`RULES`; ``mser`` with fewer
    than :data:`MIN_STEPS` times after the minimum gives the minimum (as
    ``fixed``) plus any far-out times it starts with (:func:`_slow_start`)."""
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
    if cut > len(after) // 2:  # the slowest stretch is late: no warm-up to find, too short to judge
        return minimum, "fixed"
    return minimum + cut, "mser"
