"""Reports with repeats: one row per configuration (the mean of its repeats, its
95 % interval, how many runs), and no sentence that calls a difference within
the intervals a fact. Figures by hand next to each check."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from trainperf.report import scaling
from trainperf.report.page import open_runs

# tokens/s of two repeats at 1, 2 and 4 processes (strong scaling, global batch 16)
RATES = {1: (1000.0, 1040.0), 2: (1900.0, 1980.0), 4: (3000.0, 3400.0)}


def _runs(tmp_path: Path, rates: dict[int, tuple[float, ...]], name: str = "strong") -> pd.DataFrame:
    rows = [{"run_id": f"p{n}-r{i + 1}", "experiment": name, "gpus": n, "strategy": "ddp",
             "micro_batch_size": 16 // n, "grad_accum_steps": 1, "global_batch_size": 16, "tokens": rate * 10,
             "elapsed_s": 10.0, "baseline_run_id": "p1-r1"}
            for n, repeats in rates.items() for i, rate in enumerate(repeats)]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return scaling.studies(open_runs([str(path)]))


def _ratio_interval(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float]:
    """mean(b) / mean(a) with its 95 % interval: t interval on the log scale, se = sd / (√n · mean), Welch ν."""
    se = [np.std(x, ddof=1) / (math.sqrt(len(x)) * np.mean(x)) for x in (a, b)]
    dof = (se[0] ** 2 + se[1] ** 2) ** 2 / (se[0] ** 4 / (len(a) - 1) + se[1] ** 4 / (len(b) - 1))
    half = scipy_stats.t.ppf(0.975, dof) * math.hypot(*se)
    ratio = np.mean(b) / np.mean(a)
    return ratio * math.exp(-half), ratio * math.exp(half)


def test_scaling_table_has_one_row_per_configuration_with_the_mean_and_interval(tmp_path):
    frame = scaling.analyse(_runs(tmp_path, RATES)).table
    assert frame["gpus"].tolist() == [1, 2, 4] and frame["runs"].tolist() == [2, 2, 2]
    assert frame["tokens_per_s"].tolist() == pytest.approx([1020.0, 1940.0, 3200.0])
    four = frame.iloc[2]
    assert four["scaling_multiplier"] == pytest.approx(3200 / 1020)
    assert four["scaling_efficiency"] == pytest.approx(3200 / 1020 / 4)
    low, high = _ratio_interval(RATES[1], RATES[4])
    assert (four["multiplier_low"], four["multiplier_high"]) == pytest.approx((low, high), rel=1e-9)
    assert (four["efficiency_low"], four["efficiency_high"]) == pytest.approx((low / 4, high / 4), rel=1e-9)
    assert four["efficiency_interval"].endswith("(repeats)")
    assert four["serial_fraction"] == pytest.approx((1020 / 3200 - 1 / 4) / (1 - 1 / 4))
    # e falls as the multiplier rises; (1/high - 1/4) / (3/4) = -0.093 here: held at 0 (no serial share is negative)
    assert (1 / high - 1 / 4) / (1 - 1 / 4) < 0 and four["serial_low"] == 0.0
    assert frame.iloc[0]["multiplier_interval"] == "baseline"


def test_efficiency_and_serial_fraction_within_the_noise_are_not_called_a_trend(tmp_path):
    # 2 processes 1940 / 1020 = 1.902x, 4 processes 3200 / 1020 = 3.137x: e = (1/S - 1/p) / (1 - 1/p) =
    # 0.0515 then 0.0917 (x1.8, a "growing" serial fraction to a rule without intervals), but two
    # repeats spread by 4-13 % leave both intervals wide
    runs = _runs(tmp_path, RATES)
    notes = scaling.analyse(runs).serial_notes
    assert len(notes) == 1 and notes[0].startswith("strong (strong scaling): e is within the noise (0.0515 (95 % interval")
    assert "→ 0.0917 (95 % interval" in notes[0] and "grows" not in notes[0]
    assert scaling.projection.serial_trend(np.array([0.0515, 0.0917])) == "grows"  # the same values, untested
    assert "does not change beyond the noise from 2 to 4 devices" in " ".join(scaling.analyse(runs).efficiency_notes)


def test_headline_does_not_call_a_speed_up_within_the_noise_faster(tmp_path):
    # 1 process 1000 / 1400 tokens/s, 2 processes 1250 / 1300: 1.06x with an interval that spans 1
    runs = _runs(tmp_path, {1: (1000.0, 1400.0), 2: (1250.0, 1300.0)})
    text = scaling.analyse(runs).headline.text
    low, high = _ratio_interval((1000.0, 1400.0), (1250.0, 1300.0))
    assert low < 1 < high
    assert text.startswith(f"strong (strong scaling): indistinguishable in speed on 2 devices and on 1 (1.06×, 95 % interval "
                           f"{low:.2f}×–{high:.2f}×)")
    assert "faster" not in text
    clear = scaling.analyse(_runs(tmp_path, RATES)).headline.text
    assert clear.startswith("strong (strong scaling): 3.1× faster on 4 devices than on 1")


def test_platform_peaks_are_configuration_means_with_their_interval(tmp_path):
    from trainperf.report import platforms

    rows = [{"run_id": f"{platform}-{i}", "experiment": "contest", "platform": platform, "model": "m", "gpus": 8,
             "precision": "bf16", "tokens": rate * 100, "elapsed_s": 100.0}
            for platform, repeats in {"NVIDIA H100 SXM": (9_500.0, 11_500.0), "AMD MI300X": (9_950.0, 10_050.0)}.items()
            for i, rate in enumerate(repeats)]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs = platforms.comparable(open_runs([str(path)]))
    result = platforms.analyse(runs, project_nodes=[1], gpus_per_node=8)
    peaks = result.peaks.set_index("platform_key")
    h100 = peaks.loc["NVIDIA H100 SXM"]
    # the mean of the two repeats, not the faster one; one configuration measured twice
    assert (h100["tokens_per_s"], h100["configs"], h100["runs"]) == (10_500.0, 1, 2)
    se = np.std([9_500, 11_500], ddof=1) / (math.sqrt(2) * 10_500)
    half = scipy_stats.t.ppf(0.975, 1) * se
    assert (h100["tokens_per_s_low"], h100["tokens_per_s_high"]) == pytest.approx(
        (10_500 * math.exp(-half), 10_500 * math.exp(half)), rel=1e-9)
    assert h100["relative"] == pytest.approx(1.0)  # 10,500 vs MI300X's 10,000 per 8 devices
    assert h100["relative_low"] == pytest.approx(10_500 * math.exp(-half) / 8 / (10_500 / 8))
    assert peaks.loc["AMD MI300X", "relative"] == pytest.approx(10_000 / 10_500)
    notes = result.capacity_notes
    # the mean's capacity: 10,500 tokens/s x 86,400 s
    assert notes[0].startswith("The measured job with the most throughput (NVIDIA H100 SXM, m, 8 devices) trains "
                               "907.20 million tokens per day")


def test_a_baseline_that_is_not_the_first_repeat_still_anchors_its_configuration(tmp_path):
    runs = _runs(tmp_path, RATES)
    runs["baseline_run_id"] = "p1-r2"
    frame = scaling.analyse(runs).table
    assert frame["multiplier_interval"].iloc[0] == "baseline"
    assert frame["scaling_multiplier"].tolist() == pytest.approx([1.0, 1940 / 1020, 3200 / 1020])


def test_batch_sweep_notes_and_headline_read_configuration_means_not_repeats(tmp_path):
    from trainperf.report.batch_size import analyse, sweeps

    # micro-batch 1, 2, 4, 8 with 8 // m accumulation, two repeats each (tokens/s)
    sweep = {1: (1000.0, 1100.0), 2: (1400.0, 1500.0), 4: (1500.0, 1520.0), 8: (1490.0, 1470.0)}
    rows = [{"run_id": f"mb{m}-r{i + 1}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m,
             "grad_accum_steps": 8 // m, "tokens": rate * 10, "elapsed_s": 10.0}
            for m, repeats in sweep.items() for i, rate in enumerate(repeats)]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs = sweeps(open_runs([str(path)]))
    # means 1,050, 1,450, 1,510, 1,480: gains +38.1 %, +4.1 %, -2.0 %; after 2 × 4 no step gains 10 %
    assert analyse(runs).table["gain"].tolist() == pytest.approx([np.nan, 1450 / 1050 - 1, 1510 / 1450 - 1, 1480 / 1510 - 1],
                                                        nan_ok=True)
    (note,) = analyse(runs).plateau_notes
    gains = note.partition("(gains: ")[2].partition(");")[0]
    # the two later steps of the sweep, not the differences between one repeat and the next
    assert [g.partition(" %")[0] for g in gains.split(", ")] == ["4.1", "-2.0"]
    assert note.startswith("sweep: after micro-batch 2 × 4 accumulation no step")
    headline_ = analyse(runs).headline
    assert "1,510 tokens/s" in headline_.text  # the mean of 4 × 2's repeats, not its faster run's 1,520


def test_repeats_without_a_named_baseline_and_a_micro_batch_sweep_at_two_device_counts_scale(tmp_path):
    """Repeats on the fewest devices with no baseline_run_id (the table raised "Cannot mask with
    non-boolean array containing NA"), and two micro-batch sizes each at 1 and 2 processes in one
    experiment: a weak-scaling study per micro-batch size, and a strong one where 1 x 16 and 2 x 8 hold 16."""
    _runs(tmp_path, RATES)  # writes runs.csv
    pd.read_csv(tmp_path / "runs.csv").drop(columns="baseline_run_id").to_csv(tmp_path / "repeats.csv", index=False)
    runs = scaling.studies(open_runs([str(tmp_path / "repeats.csv")]))
    assert scaling.analyse(runs).table["scaling_multiplier"].tolist() == pytest.approx([1.0, 1940 / 1020, 3200 / 1020])
    rates = {(8, 1): 4096.0, (8, 2): 7447.0, (16, 1): 4551.0, (16, 2): 8402.0}
    rows = [{"run_id": f"mb{b}-p{g}", "experiment": "my-sweep", "gpus": g, "micro_batch_size": b,
             "tokens": rate * 10, "elapsed_s": 10.0} for (b, g), rate in rates.items()]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep.csv", index=False)
    frame = scaling.analyse(scaling.studies(open_runs([str(tmp_path / "sweep.csv")]))).table
    # accumulation 1 where unknown: 8 per device at 1 and 2 (weak), 1 x 16 and 2 x 8 (global batch 16: strong),
    # 16 per device at 1 and 2 (weak); each against its own 1-device run
    assert frame["experiment"].tolist() == ["my-sweep (8 per device; weak scaling)"] * 2 + [
        "my-sweep (global batch 16; strong scaling)"] * 2 + ["my-sweep (16 per device; weak scaling)"] * 2
    assert frame["scaling_multiplier"].tolist() == pytest.approx([1.0, 7447 / 4096, 1.0, 7447 / 4551, 1.0,
                                                                  8402 / 4551])
    assert frame["only_devices_change"].all()


def test_weak_scaling_is_judged_by_scaled_speedup_and_per_device_throughput_not_amdahl(tmp_path):
    """16 samples per device at 1, 2, 4 and 8 processes (the global batch grows): a weak-scaling study. Its
    page names the laws that apply; it has no Karp–Flatt fraction and is projected by USL alone."""
    rates = {1: 1000.0, 2: 1900.0, 4: 3500.0, 8: 6000.0}
    rows = [{"run_id": f"p{n}", "experiment": "weak", "gpus": n, "global_batch_size": 16 * n, "tokens": rate * 10,
             "elapsed_s": 10.0} for n, rate in rates.items()]
    pd.DataFrame(rows).to_csv(tmp_path / "weak.csv", index=False)
    runs = scaling.studies(open_runs([str(tmp_path / "weak.csv")]))
    frame = scaling.analyse(runs).table
    assert frame["scaling_kind"].unique().tolist() == ["weak scaling"] and frame["serial_fraction"].isna().all()
    assert frame["scaling_efficiency"].tolist() == pytest.approx([1.0, 0.95, 0.875, 0.75])  # per-device rate
    (law,) = scaling.analyse(runs).laws
    assert law.startswith("weak (weak scaling): the same work per device") and "Gustafson's scaled speedup" in law
    assert "Karp–Flatt serial fraction assume the same total work" in law
    assert scaling.analyse(runs).serial_notes == []
    (projection,) = scaling.analyse(runs).projections
    assert list(projection.fits) == ["usl"]


def test_runs_that_differ_in_any_recorded_setting_are_never_repeats(tmp_path):
    """Four runs a user named alike (extra_configuration "mb8", as trainperf bench names repeats) at micro-batch
    8 on one device: two alike, one with activation checkpointing, one compiled. Only the two alike are
    repeats: their mean 1,050 tokens/s; the others are configurations of their own, each labelled by what
    sets it apart; so are their runs on two devices."""
    from trainperf.estimates import configuration_intervals, configuration_keys

    settings = {"r1": (False, False, 1000.0), "r2": (False, False, 1100.0), "ckpt": (True, False, 700.0),
                "comp": (False, True, 1400.0)}
    rows = [{"run_id": f"{name}-g{g}", "experiment": "sweep", "gpus": g, "micro_batch_size": 8, "grad_accum_steps": 1,
             "activation_checkpointing": ckpt, "compiled": comp, "extra_configuration": f"mb8-g{g}",
             "tokens": rate * g * 0.9 ** (g - 1) * 10, "elapsed_s": 10.0}
            for name, (ckpt, comp, rate) in settings.items() for g in (1, 2)]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    runs = open_runs([str(tmp_path / "runs.csv")])
    one = runs[runs["gpus"] == 1]
    assert configuration_keys(one).nunique() == 3
    found = configuration_intervals(one).set_index("run_ids")
    assert found.loc["r1-g1, r2-g1", "throughput"] == pytest.approx(1050.0)
    assert found.loc["ckpt-g1", "runs"] == found.loc["comp-g1", "runs"] == 1
    # the scaling page: a study per setting, each with its own multiplier (0.9 × 2 = 1.8x at 2 devices)
    frame = scaling.analyse(scaling.studies(runs)).table
    assert frame["runs"].tolist() == [2, 2, 1, 1, 1, 1]
    assert frame["scaling_multiplier"].tolist() == pytest.approx([1.0, 1.8] * 3)
    assert frame["experiment"].unique().tolist() == [
        "sweep (activation checkpointing False, compiled False; weak scaling)",
        "sweep (activation checkpointing True, compiled False; weak scaling)",
        "sweep (activation checkpointing False, compiled True; weak scaling)"]
    # a chart's labels: the repeats share one, each setting names itself
    from trainperf.report.run_labels import labels

    assert labels(one, compact=True) == ["no checkpointing\nnot compiled"] * 2 + [
        "activation checkpointing\nnot compiled", "no checkpointing\ncompiled"]
