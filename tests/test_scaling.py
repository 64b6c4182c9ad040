"""Scaling laws, Karp-Flatt and fits against hand calculations."""

import numpy as np
import pytest

from trainperf import scaling


def test_amdahl_and_usl_by_hand():
    assert scaling.amdahl(20, 0.05) == pytest.approx(1 / (0.05 + 0.95 / 20))  # 10.256
    assert scaling.usl(16, 0.02, 0.0005) == pytest.approx(16 / (1 + 0.02 * 15 + 0.0005 * 16 * 15))
    assert scaling.usl(1, 0.3, 0.1) == 1.0 and scaling.amdahl(1, 0.3) == 1.0


def test_karp_flatt_on_seed_000_four_gpus():
    # seed 000: 122,599 / 34,086 = 3.5968x on 4 GPUs -> e = (1/3.5968 - 1/4) / (1 - 1/4) = 0.03735
    e = scaling.karp_flatt(np.array([1.0, 122_599 / 34_086]), np.array([1.0, 4.0]))
    assert np.isnan(e[0])
    assert e[1] == pytest.approx((1 / 3.5968 - 0.25) / 0.75, rel=1e-3)


def test_fit_recovers_usl_parameters_from_noisy_measurements():
    p = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
    rng = np.random.default_rng(1)
    measured = scaling.usl(p, 0.03, 0.0004) * (1 + rng.normal(0, 0.005, p.size))
    fit = scaling.fit(p, measured, "usl")
    assert fit.params["sigma"] == pytest.approx(0.03, abs=0.01)
    assert fit.params["kappa"] == pytest.approx(0.0004, abs=0.0002)
    assert 0 < fit.rmse < 0.5
    low, high = fit.band(np.array([64.0, 256.0]))
    assert np.all(low < fit.predict([64.0, 256.0])) and np.all(fit.predict([64.0, 256.0]) < high)
    assert (high - low)[1] > (high - low)[0]  # further from the data, wider
    assert "USL: sigma = " in fit.describe()


def test_amdahl_fit_of_a_pure_amdahl_curve():
    p = np.array([1, 2, 4, 8, 16], dtype=float)
    fit = scaling.fit(p, scaling.amdahl(p, 0.1), "amdahl")
    assert fit.params["s"] == pytest.approx(0.1, abs=1e-4)
    assert fit.rmse < 1e-4


def test_as_many_points_as_parameters_gives_no_error_band():
    fit = scaling.fit(np.array([1.0, 2.0]), np.array([1.0, 1.9]), "usl")
    low, high = fit.band(4.0)
    assert np.isnan(low).all() and np.isnan(high).all()


def test_fit_needs_two_device_counts():
    with pytest.raises(ValueError, match="two or more device counts"):
        scaling.fit(np.array([4.0, 4.0]), np.array([1.0, 1.1]), "amdahl")


def test_band_widens_by_the_relative_error_and_stays_non_negative():
    p = np.array([1, 2, 4], dtype=float)
    measured = np.array([1.0, 1.9, 1.8])  # turns over: a USL fit with large coherency cost
    fit = scaling.fit(p, measured, "usl")
    residual = measured - fit.predict(p)
    assert fit.relative_rmse == pytest.approx(np.sqrt(np.mean((residual / measured) ** 2)))
    low, high = fit.band(np.array([1.0, 64.0]))
    assert np.all(low >= 0)
    assert low[0] <= 1.0 <= high[0]
