"""The statistics layer: intervals for training speed that respect how it varies (the block bootstrap within a
run, the hierarchical one across repeats), one relative difference with its interval (:class:`Difference`), and one
verdict on it (:func:`verdict`; what a report may say of two configurations: :class:`Verdict`). docs/statistics.md
("Intervals", "The verdict") gives the rules, their references and how often they are right.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import stdtrit
from scipy.stats import nct

LEVEL = 0.95
"""Confidence level of every interval."""
DRAWS = 2000
"""Bootstrap replicates per side."""


def block_length(series: np.ndarray) -> int:
    """Block length (steps) for a circular block bootstrap of ``series``: Politis & White (2004) with Patton,
    Politis & White (2009)'s correction (the formula: docs/statistics.md, "Intervals"), clipped to
    ``[1, min(3√n, n/3)]``; 1 for fewer than 4 steps."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 4:
        return 1
    xc = x - x.mean()
    acov = np.array([np.dot(xc[: n - k], xc[k:]) / n for k in range(n)])
    if acov[0] <= 0:
        return 1
    rho = acov / acov[0]
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = math.ceil(math.sqrt(n)) + kn
    b_max = max(1, math.ceil(min(3 * math.sqrt(n), n / 3)))
    threshold = 2.0 * math.sqrt(math.log10(n) / n)
    insignificant = np.abs(rho[1:]) < threshold  # lag k at index k - 1
    m_hat = next((m for m in range(min(m_max, n - 1)) if insignificant[m: m + kn].all()), None)
    if m_hat is None:
        significant = np.flatnonzero(~insignificant[: m_max])
        m_hat = int(significant[-1]) + 1 if len(significant) else 0
    big_m = min(2 * m_hat, n - 1)
    if big_m == 0:
        return 1
    lags = np.arange(-big_m, big_m + 1)
    t = np.abs(lags) / big_m
    kernel = np.where(t <= 0.5, 1.0, 2.0 * (1.0 - t))
    r = acov[np.abs(lags)]
    g = np.sum(kernel * np.abs(lags) * r)
    d = 4.0 / 3.0 * np.sum(kernel * r) ** 2
    if d <= 0:
        return 1
    b = (2.0 * g ** 2 / d) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(1, round(b)), b_max))


def block_means(matrix: np.ndarray, block: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Circular block bootstrap: ``draws`` replicates, ``(draws, quantities)``, of the column means of ``matrix``
    (steps × quantities, no NaN), each from ``ceil(n / block)`` blocks of consecutive steps, cut to ``n`` steps."""
    m = np.asarray(matrix, dtype=float)
    n = len(m)
    block = max(1, min(block, n))
    blocks = math.ceil(n / block)
    cum = np.vstack([np.zeros((1, m.shape[1])), np.cumsum(np.concatenate([m, m[:block]]), axis=0)])
    starts = rng.integers(0, n, size=(draws, blocks))
    lengths = np.full(blocks, block)
    lengths[-1] = n - (blocks - 1) * block  # the last block is cut to n steps
    return (cum[starts + lengths] - cum[starts]).sum(axis=1) / n  # (draws, blocks, quantities), over the blocks


@dataclass
class Resampled:
    """Bootstrap replicates of one side: ``replicates``, ``(draws, slots, quantities)`` column means of each
    run drawn into each slot (slots = runs of the side); ``dof``: the independent pieces less one (runs − 1
    with repeats, blocks − 1 in a single run); ``blocks``: the block length of each run (steps)."""

    replicates: np.ndarray
    dof: float
    blocks: list[int]

    @property
    def bias_correction(self) -> float:
        """Factor for the bootstrap standard error of a mean of ``k = dof + 1`` independent pieces:
        ``√(k/(k − 1))`` (docs/statistics.md, "Small samples")."""
        return math.sqrt((self.dof + 1) / self.dof)


def resample_runs(runs: list[np.ndarray], draws: int = DRAWS, seed: int = 0) -> Resampled:
    """Hierarchical bootstrap of one side (``runs``: one ``steps × quantities`` matrix per run, step times first):
    each replicate draws the runs with replacement, then blocks of steps within each (:func:`block_length`)."""
    rng = np.random.default_rng(seed)
    slots = len(runs)
    blocks = [block_length(r[:, 0]) for r in runs]
    per_run = np.stack([block_means(r, b, draws * slots, rng).reshape(draws, slots, -1)
                        for r, b in zip(runs, blocks)])  # (runs, draws, slots, quantities)
    if slots == 1:
        chosen = np.zeros((draws, 1), dtype=int)
        dof = max(1.0, len(runs[0]) / blocks[0] - 1.0)
    else:
        chosen = rng.integers(0, slots, size=(draws, slots))
        dof = float(slots - 1)
    return Resampled(per_run[chosen, np.arange(draws)[:, None], np.arange(slots)[None, :]], dof, blocks)


def t_quantile(dof: float) -> float:
    """Two-sided Student t quantile for :data:`LEVEL` (the normal one for infinite ``dof``; NaN when none)."""
    return float(stdtrit(dof, 0.5 + LEVEL / 2)) if dof > 0 and not math.isnan(dof) else math.nan


def log_interval(estimate: float, se_log: float, dof: float) -> tuple[float, float]:
    """``exp(log estimate ± t · se_log)``: an interval for a positive quantity (NaN without ``dof``)."""
    half = t_quantile(dof) * se_log
    return estimate * math.exp(-half), estimate * math.exp(half)


def welch_dof(se_a: float, dof_a: float, se_b: float, dof_b: float) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum or difference of two independent estimates (a known term:
    infinite ``dof``); NaN when a term has no ``dof`` or both are 0."""
    terms = [(se, dof) for se, dof in ((se_a, dof_a), (se_b, dof_b)) if se != 0]
    if not terms or any(math.isnan(se) or not dof > 0 for se, dof in terms):
        return math.nan
    den = sum(se ** 4 / dof for se, dof in terms)
    return (se_a ** 2 + se_b ** 2) ** 2 / den if den > 0 else math.inf


@dataclass(frozen=True)
class Difference:
    """Relative difference ``b / a − 1`` of two positive estimates, with its interval ``low``–``high``
    (fractions; NaN without one) on ``dof`` degrees of freedom."""

    estimate: float
    low: float = math.nan
    high: float = math.nan
    dof: float = math.nan

    @property
    def tested(self) -> bool:
        """Whether it has an interval."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def times(self, k: float) -> Difference:
        """The difference of the ratio b / a times ``k`` (e.g. of totals, times a ratio of devices: per device)."""
        return Difference((1 + self.estimate) * k - 1, (1 + self.low) * k - 1, (1 + self.high) * k - 1)


def relative_difference(a: float, se_log_a: float, dof_a: float, b: float, se_log_b: float, dof_b: float,
                        dof: float | None = None) -> Difference:
    """``b / a − 1`` with the interval ``exp(log(b/a) ± t(ν) · √(se_a² + se_b²)) − 1`` (independent sides; ν
    Welch's unless ``dof`` is given)."""
    ratio = b / a
    dof = welch_dof(se_log_a, dof_a, se_log_b, dof_b) if dof is None else dof
    low, high = log_interval(ratio, math.hypot(se_log_a, se_log_b), dof)
    return Difference(ratio - 1.0, low - 1.0, high - 1.0, dof)


RUN_CV = 0.08
"""Default run-to-run coefficient of variation of a run's throughput (fraction): how much a second run of the same
configuration differs beyond its own step noise, assumed where a side has one run and no repeats; from two sweeps
of ``trainperf bench`` (``benchmarks/run_cv.py``; docs/statistics.md, "How 8 % was derived")."""


def with_run_to_run(se_log: float, dof: float, run_cv: float = RUN_CV) -> tuple[float, float]:
    """A single run's ``se_log`` and ``dof`` (its steps' noise) widened to its configuration's throughput:
    ``√(se_log² + run_cv²)``, ``run_cv`` known (infinite degrees of freedom), Welch's ``dof`` for the sum."""
    return math.hypot(se_log, run_cv), welch_dof(se_log, dof, run_cv, math.inf)


MIN_EFFECT = 0.02
"""Default minimum effect: a relative difference in throughput smaller than 2 % is not called a change."""
FASTER, SLOWER, SAME, INCONCLUSIVE = "faster", "slower", "no detectable difference", "inconclusive"
POWER = 0.80
"""Power at which :func:`repeats_to_detect` detects the minimum effect."""
DETECT = 0.05
"""The difference whose repeats a sentence that calls configurations indistinguishable states (5 %)."""


def verdict(difference: Difference, min_effect: float = MIN_EFFECT, words: tuple[str, str] = (FASTER, SLOWER)
            ) -> str:
    """``faster`` / ``slower`` (``words``: an increase's and a decrease's names) when the interval excludes 0 **and**
    the estimate is at least ``min_effect`` (a fraction) from 0; ``no detectable difference`` when the interval lies
    within ``±min_effect``; else, and always without one, ``inconclusive`` (docs/statistics.md, "The verdict")."""
    if not difference.tested:
        return INCONCLUSIVE
    if difference.low > 0 and difference.estimate >= min_effect:
        return words[0]
    if difference.high < 0 and difference.estimate <= -min_effect:
        return words[1]
    return SAME if -min_effect <= difference.low and difference.high <= min_effect else INCONCLUSIVE


TIED = "indistinguishable"
"""What a report says of two configurations it may not rank."""


@dataclass(frozen=True)
class Verdict:
    """What a report may say of configuration ``b`` against ``a``: ``verdict``, ``faster``, ``slower`` or
    :data:`TIED`, from their ``difference`` (b / a − 1). ``tested`` (both have an interval): faster or slower
    only as :func:`verdict` says; untested, when the estimate is at least ``min_effect`` (a fraction)."""

    difference: Difference
    tested: bool
    min_effect: float = MIN_EFFECT
    a: str = "a"
    b: str = "b"

    @property
    def verdict(self) -> str:
        d = self.difference
        if self.tested:
            found = verdict(d, self.min_effect)
            return found if found in (FASTER, SLOWER) else TIED
        return TIED if abs(d.estimate) < self.min_effect else FASTER if d.estimate > 0 else SLOWER

    @property
    def distinguishable(self) -> bool:
        """Tested, and faster or slower by :func:`verdict`."""
        return self.tested and self.verdict != TIED

    @property
    def sentence(self) -> str:
        """``b is faster than a: +4.0% (95 % interval …).``, or that they are indistinguishable."""
        d = self.difference
        figure = f"{d.estimate:+.1%}" + (f" (95 % interval {d.low:+.1%} to {d.high:+.1%})" if d.tested
                                          else " (no interval: one run without steps)")
        if not self.distinguishable:
            return (f"{self.b} and {self.a} are indistinguishable: {figure}, within the noise or below "
                    f"{self.min_effect:.0%}.")
        return f"{self.b} is {self.verdict} than {self.a}: {figure}."


def t_test_power(n: float, effect: float) -> float:
    """Power of a two-sided two-sample t test at :data:`LEVEL` with ``n`` observations per group and a
    standardized ``effect`` (difference of means / standard deviation of one observation)."""
    return t_power(effect * math.sqrt(n / 2), 2 * n - 2)


def t_power(shift: float, dof: float) -> float:
    """Power of a two-sided t test at :data:`LEVEL` when the true difference is ``shift`` standard errors:
    ``P(|T| > t(½ + LEVEL/2, dof))``, ``T`` noncentral t (``dof`` may be infinite: the normal)."""
    critical = stdtrit(dof, 0.5 + LEVEL / 2)
    # the lower tail as the upper tail of the mirrored distribution: scipy's nct.cdf is NaN far in its tail
    return float(nct.sf(critical, dof, shift) + nct.sf(critical, dof, -shift))


def detectable_effect(se_log: float, dof: float) -> float:
    """The smallest relative difference (fraction) a t test on a log ratio with standard error ``se_log`` detects
    with :data:`POWER`: ``exp(k · se_log) − 1``, ``k`` where :func:`t_power` reaches it (docs/statistics.md, "The
    smallest difference the data could detect"). NaN unless ``se_log`` and ``dof`` are positive numbers."""
    if not (math.isfinite(se_log) and se_log > 0 and dof > 0):
        return math.nan
    return math.expm1(_reaching(lambda k: t_power(k, dof), 0.0, xtol=1e-9) * se_log)


def repeats_to_detect(sd_log: float, min_effect: float = MIN_EFFECT) -> int | None:
    """Runs per side that would detect a change of ``min_effect`` (a fraction) with :data:`POWER`: the smallest whole
    ``n ≥ 2`` whose :func:`t_test_power` at ``log(1 + min_effect) / sd_log`` reaches it (``sd_log``: the standard
    deviation of one run's log throughput, fraction); None without ``sd_log`` or with a minimum effect of 0."""
    if not (math.isfinite(sd_log) and sd_log > 0 and min_effect > 0):
        return None
    effect = math.log1p(min_effect) / sd_log
    if t_test_power(2, effect) >= POWER:
        return 2
    return math.ceil(_reaching(lambda n: t_test_power(n, effect), 2.0, xtol=1e-6) - 1e-9)


def _reaching(power_at: Callable[[float], float], low: float, xtol: float) -> float:
    """Where the increasing ``power_at`` reaches :data:`POWER` above ``low`` (Brent's root)."""
    high = 4.0
    while power_at(high) < POWER:
        high *= 2
    return float(brentq(lambda x: power_at(x) - POWER, low, high, xtol=xtol))
