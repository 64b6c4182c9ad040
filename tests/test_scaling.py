"""Scaling laws, Karp-Flatt and fits against hand calculations."""

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from trainperf import DataWarning, derive, load_runs, scaling
from trainperf.table_rules import check_runs


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
    assert fit.params["gamma"] == pytest.approx(1.0, abs=1e-4)
    assert fit.rmse < 1e-4


def test_as_many_points_as_parameters_gives_no_error_band():
    fit = scaling.fit(np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.9, 3.2]), "usl")
    low, high = fit.band(4.0)
    assert np.isnan(low).all() and np.isnan(high).all()


def test_a_fit_knows_whether_it_has_a_band_and_where_the_usl_peaks():
    p = np.array([1, 2, 4, 8, 16, 32], dtype=float)
    usl_fit = scaling.fit(p, scaling.usl(p, 0.03, 0.0004), "usl")
    # S(p) = p / (1 + sigma (p - 1) + kappa p (p - 1)) peaks at p* = sqrt((1 - sigma) / kappa) = sqrt(0.97 / 0.0004)
    assert usl_fit.peak == pytest.approx(49.244, rel=1e-3)
    assert usl_fit.has_band and usl_fit.name == "USL"
    assert scaling.fit(p, scaling.amdahl(p, 0.1), "amdahl").peak == np.inf
    assert scaling.fit(p, p, "usl").peak == np.inf  # kappa at its bound: no retrograde term, no peak
    three = scaling.fit(np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.9, 3.2]), "usl")
    assert not three.has_band
    assert three.why_no_band == "no band (3 device counts, 3 parameters: measure a 4th device count)"
    # two repeats at each of the same 3 device counts: 6 points, but the law's shape is still untested
    repeated = scaling.fit(np.repeat([1.0, 2.0, 4.0], 2), np.array([1.0, 1.04, 1.9, 1.84, 3.2, 3.1]), "usl")
    assert not repeated.has_band
    assert repeated.why_no_band == "no band (3 device counts, 3 parameters: measure a 4th device count)"


def test_band_is_the_spread_of_the_curves_of_the_parameter_draws():
    """The band, recomputed here draw by draw: the same seeded draws of the parameters
    (clipped to their bounds), the 2.5 % and 97.5 % quantiles of their curves, widened by the relative RMSE."""
    p = np.array([1, 2, 4, 8, 16], dtype=float)
    fit = scaling.fit(p, np.array([1.0, 1.9, 3.5, 6.1, 9.8]), "usl")
    theta = np.random.default_rng(0).multivariate_normal(list(fit.params.values()), fit.covariance, size=4000)
    theta = np.clip(theta, [0, 0, 0], [1, 1, np.inf])
    at = np.array([4.0, 64.0])
    curves = np.array([[t[2] * n / (1 + t[0] * (n - 1) + t[1] * n * (n - 1)) for n in at] for t in theta])
    low, high = fit.band(at)
    np.testing.assert_allclose(low, np.quantile(curves, 0.025, axis=0) * (1 - fit.relative_rmse), rtol=1e-12)
    np.testing.assert_allclose(high, np.quantile(curves, 0.975, axis=0) * (1 + fit.relative_rmse), rtol=1e-12)


def test_fit_needs_two_device_counts():
    with pytest.raises(ValueError, match="two or more device counts"):
        scaling.fit(np.array([4.0, 4.0]), np.array([1.0, 1.1]), "amdahl")


def test_band_widens_by_the_relative_error_and_stays_non_negative():
    p = np.array([1, 2, 4, 8], dtype=float)
    measured = np.array([1.0, 1.9, 1.8, 1.1])  # turns over: a USL fit with large coherency cost
    fit = scaling.fit(p, measured, "usl")
    residual = measured - fit.predict(p)
    assert fit.relative_rmse == pytest.approx(np.sqrt(np.mean((residual / measured) ** 2)))
    low, high = fit.band(np.array([1.0, 64.0]))
    assert np.all(low >= 0)
    assert low[0] <= 1.0 <= high[0]


USL_DATA = Path(__file__).parent / "data" / "usl"  # the R package usl's data sets; sources in README.md there


def test_usl_fit_reproduces_the_usl_package_on_specsdm91():
    # usl 3.0.3 tests/summary.Rout.save and tests/predict.Rout.save
    data = pd.read_csv(USL_DATA / "specsdm91.csv")
    fit = scaling.fit(data["load"], data["throughput"], "usl")
    published = {"sigma": (2.773e-02, 9.122e-03), "kappa": (1.044e-04, 1.988e-05), "gamma": (9.000e+01, 1.421e+01)}
    for name, (estimate, stderr) in published.items():
        assert fit.params[name] == pytest.approx(estimate, rel=0.01)
        assert fit.stderr[name] == pytest.approx(stderr, rel=0.01)
    assert fit.predict(data["load"]) == pytest.approx([90, 1078, 1541, 1850, 1879, 1822, 1646], abs=0.6)
    residual_se = np.sqrt(np.sum((data["throughput"] - fit.predict(data["load"])) ** 2) / (7 - 3))
    assert residual_se == pytest.approx(82.85, rel=0.01)
    assert fit.multiplier(1.0) == pytest.approx(1.0)
    assert fit.multiplier(216.0) == pytest.approx(fit.predict(216.0) / fit.params["gamma"])


def test_usl_fit_reproduces_the_usl_package_on_raytracer():
    # usl 3.0.3 tests/confint.Rout.save: usl(throughput ~ processors, raytracer[1:6, ]);
    # its confint is estimate ± qt(0.95, n - 1) · stderr, which gives the standard errors back
    data = pd.read_csv(USL_DATA / "raytracer.csv").iloc[:6]
    fit = scaling.fit(data["processors"], data["throughput"], "usl")
    published = {"sigma": (0.02444, 0.00754, 0.04135), "kappa": (0.00163, 0.00110, 0.00215),
                 "gamma": (20.85605, 19.26717, 22.44492)}
    t = stats.t.ppf(0.95, len(data) - 1)
    for name, (estimate, low, high) in published.items():
        assert fit.params[name] == pytest.approx(estimate, rel=0.01)
        assert fit.stderr[name] == pytest.approx((high - low) / 2 / t, rel=0.01)
        lo, hi = fit.intervals[name]
        assert lo <= low and high <= hi  # ours: t(0.975, n - 3), wider than the package's print
    table = fit.table()
    assert list(table["parameter"]) == ["sigma", "kappa", "gamma"]


def test_gamma_is_fitted_not_taken_from_the_first_measurement():
    # a slow single-device run (20 % low) does not drag the whole curve down with it
    p = np.array([1, 2, 4, 8, 16, 32], dtype=float)
    throughput = 1000 * scaling.usl(p, 0.05, 0.001)
    throughput[0] *= 0.8
    fit = scaling.fit(p, throughput, "usl")
    assert fit.params["gamma"] == pytest.approx(1000, rel=0.05)


def test_a_baseline_of_several_devices_fits_the_same_law():
    # measured from 8 devices only: gamma is the extrapolated single-device throughput
    n = np.array([8, 16, 32, 64, 128], dtype=float)
    fit = scaling.fit(n, 50 * scaling.usl(n, 0.02, 0.0002), "usl")
    assert fit.params["sigma"] == pytest.approx(0.02, rel=1e-3)
    assert fit.params["kappa"] == pytest.approx(0.0002, rel=1e-3)
    assert fit.params["gamma"] == pytest.approx(50, rel=1e-3)
    assert fit.predict(256.0) == pytest.approx(50 * scaling.usl(256.0, 0.02, 0.0002), rel=1e-3)


# --- studies from what stays constant ---------------------------------------------------------

def _derived(*rows: dict) -> pd.DataFrame:
    """Derived runs of experiment ``e`` (accumulation 1 where a row gives none)."""
    return derive(check_runs(pd.DataFrame([{"experiment": "e", "grad_accum_steps": 1, **r} for r in rows])))


BOTH = ({"run_id": "s1", "gpus": 1, "micro_batch_size": 8, "samples_per_s": 1000.0},
        {"run_id": "s2", "gpus": 2, "micro_batch_size": 4, "samples_per_s": 1800.0},
        {"run_id": "s4", "gpus": 4, "micro_batch_size": 2, "samples_per_s": 3000.0},
        {"run_id": "w2", "gpus": 2, "micro_batch_size": 8, "samples_per_s": 1900.0},
        {"run_id": "w4", "gpus": 4, "micro_batch_size": 8, "samples_per_s": 3600.0})
"""1 x 8, 2 x 4, 4 x 2 hold the global batch at 8 (strong); 1 x 8, 2 x 8, 4 x 8 hold 8 per device (weak)."""


def test_an_experiment_holding_the_global_batch_and_the_work_per_device_is_a_strong_and_a_weak_study():
    d = _derived(*BOTH).set_index("run_id")
    assert d["scaling_study"].to_dict() == {"s1": "e (global batch 8)", "s2": "e (global batch 8)",
                                            "s4": "e (global batch 8)", "w2": "e (8 per device)",
                                            "w4": "e (8 per device)"}
    # the 1-device run is in both: its row gives the strong study, and names the weak one
    assert d.at["s1", "second_scaling_study"] == "e (8 per device)"
    assert d["second_scaling_study"].drop("s1").isna().all()
    assert d["scaling_type"].to_dict() == {"s1": "strong", "s2": "strong", "s4": "strong", "w2": "weak", "w4": "weak"}
    assert (d["baseline_run_id"] == "s1").all()
    # by hand: strong 1800 / 1000 = 1.8 on 2 (0.9), 3000 / 1000 = 3.0 on 4 (0.75); weak 1.9 (0.95) and 3.6 (0.9)
    assert d["scaling_multiplier"].to_dict() == pytest.approx({"s1": 1.0, "s2": 1.8, "s4": 3.0, "w2": 1.9, "w4": 3.6})
    assert d["scaling_efficiency"].to_dict() == pytest.approx({"s1": 1.0, "s2": 0.9, "s4": 0.75, "w2": 0.95,
                                                               "w4": 0.9})
    # Karp-Flatt, strong only: (1/1.8 - 1/2) / (1 - 1/2) = 1/9, (1/3 - 1/4) / (1 - 1/4) = 1/9
    assert d.loc[["s2", "s4"], "serial_fraction"].tolist() == pytest.approx([1 / 9, 1 / 9])
    assert d.loc[["w2", "w4"], "serial_fraction"].isna().all()
    # the shared run once more as a row of its weak study, measured against that study's baseline (itself)
    extra = scaling.second_study_rows(d.reset_index())
    assert extra["run_id"].tolist() == ["s1"] and extra["scaling_study"].tolist() == ["e (8 per device)"]
    assert extra["scaling_type"].tolist() == ["weak"] and extra["scaling_multiplier"].tolist() == [1.0]


def test_a_run_shared_by_two_studies_is_measured_against_each_studys_baseline():
    # a: 1 device x 16, b: 2 devices x 8, c: 1 device x 8. b holds the global batch 16 of a (strong, its row's
    # study: 1700 / 1100) and the 8 per device of c (weak: 1700 / 1000 = 1.7, efficiency 1.7 / 2 = 0.85)
    d = _derived({"run_id": "a", "gpus": 1, "micro_batch_size": 16, "samples_per_s": 1100.0},
                 {"run_id": "b", "gpus": 2, "micro_batch_size": 8, "samples_per_s": 1700.0},
                 {"run_id": "c", "gpus": 1, "micro_batch_size": 8, "samples_per_s": 1000.0})
    assert d["scaling_study"].tolist() == ["e (global batch 16)", "e (global batch 16)", "e (8 per device)"]
    assert d["scaling_multiplier"].tolist() == pytest.approx([1.0, 1700 / 1100, 1.0])
    extra = scaling.second_study_rows(d)
    assert extra["run_id"].tolist() == ["b"] and extra["scaling_study"].tolist() == ["e (8 per device)"]
    assert extra["baseline_run_id"].tolist() == ["c"] and extra["scaling_type"].tolist() == ["weak"]
    assert extra["scaling_multiplier"].tolist() == pytest.approx([1.7])
    assert extra["scaling_efficiency"].tolist() == pytest.approx([0.85]) and extra["serial_fraction"].isna().all()


def test_an_experiment_holding_only_the_global_batch_is_one_strong_study():
    # repeats at each count; 2 devices as 4 x 1 and as 2 x 2 accumulation: 8 samples per step everywhere
    d = _derived({"run_id": "p1", "gpus": 1, "micro_batch_size": 8, "samples_per_s": 1000.0},
                 {"run_id": "p2a", "gpus": 2, "micro_batch_size": 4, "samples_per_s": 1700.0},
                 {"run_id": "p2b", "gpus": 2, "micro_batch_size": 2, "grad_accum_steps": 2, "samples_per_s": 1500.0},
                 {"run_id": "p4", "gpus": 4, "micro_batch_size": 2, "samples_per_s": 2800.0})
    assert d["scaling_study"].tolist() == ["e"] * 4 and d["second_scaling_study"].isna().all()
    assert d["scaling_type"].tolist() == ["strong"] * 4 and (d["baseline_run_id"] == "p1").all()
    assert d["scaling_multiplier"].tolist() == pytest.approx([1.0, 1.7, 1.5, 2.8])
    assert len(scaling.second_study_rows(d)) == 0


def test_the_seeds_studies_keep_their_figures():
    # data/reference/README.md: seed 002's throughput table holds 32 images per GPU (weak; 14.1x at 16 GPUs,
    # 160.3x at 256: 16,240 / 1,150 and 184,320 / 1,150); seed 004 holds the global batch at 64 and 128 (strong)
    root = Path(__file__).resolve().parents[1] / "data" / "reference"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        two = derive(load_runs(root / "seed_002_scaling.csv")).set_index("run_id")
        four = derive(load_runs(root / "seed_004_scaling.csv"))
    throughput = two[two["experiment"] == "seed002-throughput"]
    assert (throughput["scaling_study"] == "seed002-throughput").all() and (throughput["scaling_type"] == "weak").all()
    assert throughput.loc[["seed002-throughput-g16", "seed002-throughput-g256"], "scaling_multiplier"].tolist() == \
        pytest.approx([16240 / 1150, 184320 / 1150])
    assert four["scaling_study"].tolist() == four["experiment"].tolist() and (four["scaling_type"] == "strong").all()
    assert four["second_scaling_study"].isna().all()


def test_an_impossible_figure_of_a_runs_second_study_is_emptied_there_and_said():
    # b (2 x 8) against c (1 x 8) in its weak study: 2,300 / 1,000 = 2.3x on 2 devices, efficiency 1.15, more
    # than 10 % above 1 outside strong scaling; against a (1 x 16) in its strong study 2,300 / 2,200 = 1.045x
    d = _derived({"run_id": "a", "gpus": 1, "micro_batch_size": 16, "samples_per_s": 2200.0},
                 {"run_id": "b", "gpus": 2, "micro_batch_size": 8, "samples_per_s": 2300.0},
                 {"run_id": "c", "gpus": 1, "micro_batch_size": 8, "samples_per_s": 1000.0})
    assert d.loc[1, "scaling_multiplier"] == pytest.approx(2300 / 2200)
    (extra,) = scaling.second_study_rows(d).to_dict("records")
    assert extra["scaling_study"] == "e (8 per device)" and math.isnan(extra["scaling_multiplier"])
    assert "scaling efficiency more than 10% above 1 outside strong scaling" in extra["notes"]


def test_a_weak_study_whose_every_run_is_in_a_strong_one_is_still_shown_with_its_own_baseline():
    # 1 x 8 and 2 x 4 hold global batch 8, 1 x 16 and 2 x 8 hold 16 (strong, the runs table's studies); 1 x 8 and
    # 2 x 8 hold 8 per device, a weak study with no run of its own: 1,900 / 1,000 = 1.9x on 2 devices, 95 %
    d = _derived({"run_id": "a", "gpus": 1, "micro_batch_size": 8, "samples_per_s": 1000.0},
                 {"run_id": "b", "gpus": 2, "micro_batch_size": 4, "samples_per_s": 1700.0},
                 {"run_id": "c", "gpus": 1, "micro_batch_size": 16, "samples_per_s": 1100.0},
                 {"run_id": "d", "gpus": 2, "micro_batch_size": 8, "samples_per_s": 1900.0})
    assert d["scaling_study"].tolist() == ["e (global batch 8)"] * 2 + ["e (global batch 16)"] * 2
    assert d["baseline_run_id"].tolist() == ["a", "a", "c", "c"]
    extra = scaling.second_study_rows(d)
    assert extra["run_id"].tolist() == ["a", "d"] and (extra["scaling_study"] == "e (8 per device)").all()
    assert (extra["scaling_type"] == "weak").all() and (extra["baseline_run_id"] == "a").all()
    assert extra["scaling_multiplier"].tolist() == pytest.approx([1.0, 1.9])
    assert extra["scaling_efficiency"].tolist() == pytest.approx([1.0, 0.95])
