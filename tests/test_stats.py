"""Known-answer statistics: block length, bootstrap coverage on AR(1) series, hierarchy, verdicts."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from trainperf import stats


def ar1(rng, n, phi, sd=1.0):
    """AR(1) series x_t = phi x_(t-1) + e_t, started from its stationary distribution."""
    e = rng.normal(0, sd, n)
    x = np.empty(n)
    x[0] = e[0] / math.sqrt(1 - phi ** 2)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


def test_block_length_matches_the_ar1_optimum():
    # For AR(1) the circular-block-bootstrap optimum of Politis & White (2004) is
    # b = (6 phi^2 / (1 - phi^2)^2)^(1/3) n^(1/3): 13.9 steps for phi = 0.5, n = 1000.
    rng = np.random.default_rng(3)
    phi, n = 0.5, 1000
    expected = (6 * phi ** 2 / (1 - phi ** 2) ** 2) ** (1 / 3) * n ** (1 / 3)
    found = [stats.block_length(ar1(rng, n, phi)) for _ in range(20)]
    assert expected == pytest.approx(13.9, abs=0.05)
    assert np.median(found) == pytest.approx(expected, rel=0.35)
    white = [stats.block_length(rng.normal(size=n)) for _ in range(20)]
    assert np.median(white) <= 2  # uncorrelated steps: (almost) no blocks needed
    assert stats.block_length(np.ones(50)) == 1 and stats.block_length(np.array([1.0, 2.0])) == 1


def coverage(phi, block=None, trials=200, n=120, seed=11):
    """Share of trials whose 95 % interval for throughput (1 / mean step time) covers the truth."""
    rng = np.random.default_rng(seed)
    truth, hits = 1.0, 0
    for i in range(trials):
        time = 1.0 + 0.1 * ar1(rng, n, phi)
        run = np.column_stack([time, np.ones(n)])
        if block is None:
            res = stats.resample_runs([run], draws=400, seed=i)
        else:  # forced block length: the plain (iid) bootstrap when 1
            rep = stats.block_means(run, block, 400, np.random.default_rng(i))[:, None, :]
            res = stats.Resampled(rep, n / block - 1, [block])
        throughput = res.replicates[..., 1] / res.replicates[..., 0]
        se = np.std(np.log(throughput[:, 0]), ddof=1)
        low, high = stats.log_interval(n / time.sum(), se, res.dof)
        hits += low <= truth <= high
    return hits / trials


def test_block_bootstrap_interval_covers_95_percent_of_ar1_series():
    assert 0.90 <= coverage(phi=0.5) <= 0.99
    # the plain bootstrap ignores the correlation: intervals too narrow by sqrt((1 + phi)/(1 - phi)) = sqrt(3)
    assert coverage(phi=0.5, block=1) < 0.85


def test_repeats_bring_run_to_run_variance_into_the_interval():
    # 5 runs per trial; each run's speed is offset by a run effect (sd 5 %) that steps cannot see
    rng = np.random.default_rng(5)
    hits, trials, widths = 0, 150, []
    for i in range(trials):
        runs = [np.column_stack([(1 + rng.normal(0, 0.05)) * (1 + 0.02 * rng.normal(size=40)), np.ones(40)])
                for _ in range(5)]
        res = stats.resample_runs(runs, draws=300, seed=i)
        rep = (res.replicates[..., 1] / res.replicates[..., 0]).mean(axis=1)
        estimate = np.mean([1 / r[:, 0].mean() for r in runs])
        low, high = stats.log_interval(estimate, np.std(np.log(rep), ddof=1), res.dof)
        widths.append(high / low - 1)
        hits += low <= 1.0 <= high  # the true mean speed: 1 step/s (to first order in the run effect)
    assert res.dof == 4
    assert 0.88 <= hits / trials <= 1.0
    assert np.median(widths) > 0.08  # ± t(4) · 5 % / sqrt(5) ≈ ± 6 %: wider than the steps alone (± 1 %)


def test_relative_difference_by_hand():
    d = stats.relative_difference(100.0, 0.02, 9.0, 90.0, 0.03, 9.0)
    se = math.hypot(0.02, 0.03)
    nu = se ** 4 / (0.02 ** 4 / 9 + 0.03 ** 4 / 9)
    t = scipy_stats.t.ppf(0.975, nu)
    assert d.estimate == pytest.approx(-0.1)
    assert d.low == pytest.approx(0.9 * math.exp(-t * se) - 1)
    assert d.high == pytest.approx(0.9 * math.exp(t * se) - 1)
    assert d.dof == pytest.approx(nu)


@pytest.mark.parametrize("estimate, low, high, expected", [
    (-0.10, -0.15, -0.05, "slower"),
    (0.10, 0.05, 0.15, "faster"),
    (-0.01, -0.015, -0.005, "no detectable difference"),  # clear, but the whole interval is within ±2 %
    (0.002, -0.019, 0.02, "no detectable difference"),  # 0 inside, and so narrow that a 2 % change is ruled out
    (-0.10, -0.25, 0.05, "inconclusive"),  # large, but the interval includes 0
    (0.0, -0.01, 0.025, "inconclusive"),  # centred on 0, but a +2 % change is not ruled out
    (-0.015, -0.03, -0.002, "inconclusive"),  # clear, below the minimum effect, but -3 % is not ruled out
    (-0.10, math.nan, math.nan, "inconclusive"),  # no interval: nothing is ruled out
])
def test_verdict_needs_clarity_and_the_minimum_effect(estimate, low, high, expected):
    assert stats.verdict(stats.Difference(estimate, low, high, 10.0)) == expected


# Reference figures: statsmodels 0.15.0, TTestIndPower().solve_power(effect_size=d, alpha=0.05, power=0.8,
# ratio=1, alternative="two-sided") prints 393.4057 (d = 0.2), 63.7656 (0.5), 25.5246 (0.8), 16.7147 (1.0);
# TTestIndPower().power(effect_size=0.5, nobs1=20, alpha=0.05) prints 0.337939. Cohen (1988), Statistical
# Power Analysis, table 2.4.1: n = 393, 64 and 26 per group for d = 0.2, 0.5 and 0.8 at a = 0.05 two-sided.
@pytest.mark.parametrize("d, statsmodels_n", [(0.2, 393.4057), (0.5, 63.7656), (0.8, 25.5246), (1.0, 16.7147)])
def test_repeats_to_detect_is_the_two_sample_t_test_sample_size(d, statsmodels_n):
    assert stats.t_test_power(statsmodels_n, d) == pytest.approx(0.80, abs=1e-5)
    sd = math.log1p(0.02) / d  # a run's sd of log throughput at which a 2 % change is d standard deviations
    assert stats.repeats_to_detect(sd, 0.02) == math.ceil(statsmodels_n)
    # by hand, the normal approximation 2 (z_0.975 + z_0.8)^2 / d^2 is a little under the t test's figure
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    assert 2 * z ** 2 / d ** 2 < statsmodels_n < 2 * z ** 2 / d ** 2 + 2


@pytest.mark.parametrize("d, statsmodels_n", [(0.2, 393.4057), (0.5, 63.7656), (0.8, 25.5246), (1.0, 16.7147)])
def test_detectable_effect_is_the_inverse_of_the_t_test_sample_size(d, statsmodels_n):
    # statsmodels (figures above): n a side detects a standardized effect d with 80 % power; the difference
    # of two means of n runs with sd 1 has se √(2/n) on 2n - 2 degrees of freedom
    sd = 0.05
    found = stats.detectable_effect(sd * math.sqrt(2 / statsmodels_n), 2 * statsmodels_n - 2)
    assert math.log1p(found) == pytest.approx(d * sd, rel=1e-5)


def test_detectable_effect_with_a_known_noise_is_z_975_plus_z_80_standard_errors():
    # by hand: 1.959964 + 0.841621 = 2.801585 standard errors (the normal, infinite degrees of freedom)
    assert math.log1p(stats.detectable_effect(0.01, math.inf)) == pytest.approx(0.02801585, rel=1e-5)
    assert math.isnan(stats.detectable_effect(math.nan, 10)) and math.isnan(stats.detectable_effect(0.01, 0))


def test_power_of_a_small_t_test_and_the_limits_of_the_repeats():
    assert stats.t_test_power(20, 0.5) == pytest.approx(0.337939, abs=1e-6)  # statsmodels, as above
    assert stats.repeats_to_detect(0.001, 0.02) == 2  # two runs a side detect 2 % through 0.1 % noise
    assert stats.repeats_to_detect(math.nan, 0.02) is None and stats.repeats_to_detect(0.05, 0.0) is None
    assert stats.repeats_to_detect(0.08 * math.sqrt(2), 0.02) > 500  # noise far above the effect: hundreds


def test_block_means_is_deterministic_and_keeps_the_mean():
    m = np.column_stack([np.arange(10.0), np.ones(10)])
    a = stats.block_means(m, 3, 1000, np.random.default_rng(0))
    b = stats.block_means(m, 3, 1000, np.random.default_rng(0))
    assert np.array_equal(a, b)
    assert a[:, 1] == pytest.approx(np.ones(1000))
    assert a[:, 0].mean() == pytest.approx(4.5, abs=0.1)


def test_bootstrap_of_few_runs_is_corrected_to_the_unbiased_standard_error():
    # three runs of steady steps (1.0, 1.1 and 1.25 s a step): only the runs vary, so the standard
    # error of their mean step time is the textbook sd(ddof=1) / sqrt(3); resampling 3 runs gives
    # sd(ddof=0) / sqrt(3), low by sqrt(2/3)
    times = np.array([1.0, 1.1, 1.25])
    runs = [np.column_stack([np.full(30, t), np.ones(30)]) for t in times]
    res = stats.resample_runs(runs, draws=20000, seed=1)
    raw = np.std(res.replicates[..., 0].mean(axis=1), ddof=1)
    assert raw == pytest.approx(np.std(times) / math.sqrt(3), rel=0.03)
    assert res.bias_correction == pytest.approx(math.sqrt(3 / 2))
    assert raw * res.bias_correction == pytest.approx(np.std(times, ddof=1) / math.sqrt(3), rel=0.03)
    # one run of 30 uncorrelated steps: 30 blocks of one step, the plain bootstrap's n / (n - 1)
    one = stats.resample_runs([np.column_stack([np.arange(30.0) % 7, np.ones(30)])], draws=10)
    assert one.blocks == [1] and one.bias_correction == pytest.approx(math.sqrt(30 / 29))


def test_a_single_run_gets_the_run_to_run_variation_as_a_known_term():
    se, dof = stats.with_run_to_run(0.02, 5.0, 0.08)
    assert se == pytest.approx(math.hypot(0.02, 0.08))
    assert dof == pytest.approx((0.02 ** 2 + 0.08 ** 2) ** 2 / (0.02 ** 4 / 5))  # Welch with the 8 % known
    assert stats.with_run_to_run(0.0, 5.0, 0.08) == (0.08, math.inf)  # steady steps: the run term alone
    assert stats.t_quantile(math.inf) == pytest.approx(scipy_stats.norm.ppf(0.975))
    assert stats.with_run_to_run(0.02, 5.0, 0.0) == (0.02, 5.0)
