"""Throughput intervals per configuration and the 'indistinguishable' helper."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

import trainperf
from trainperf import estimates, stats

RUNS = Path(__file__).parent / "data" / "measured_runs"  # real runs, kept as measured (see its README)


def repeats_table(rates: dict[str, list[float]], extra: bool = False) -> pd.DataFrame:
    rows = []
    for config, values in rates.items():
        for i, rate in enumerate(values):
            row = {"run_id": f"{config}-r{i + 1}", "experiment": "sweep", "gpus": 8,
                   "micro_batch_size": int(config.removeprefix("mb")), "tokens": 1e6, "elapsed_s": 1e6 / rate}
            if extra:
                row |= {"extra_configuration": config, "extra_repeat": i + 1}
            rows.append(row)
    return trainperf.derive(pd.DataFrame(rows))


def test_repeats_group_by_configuration_with_a_t_interval():
    table = estimates.configuration_intervals(repeats_table({"mb4": [1000, 1040, 980], "mb8": [1500, 1490, 1530]}))
    assert list(table["runs"]) == [3, 3] and set(table["basis"]) == {"repeats, no steps"}
    row = table.iloc[0]
    x = np.array([1000, 1040, 980.0])
    half = scipy_stats.t.ppf(0.975, 2) * x.std(ddof=1) / (math.sqrt(3) * x.mean())
    assert row["throughput"] == pytest.approx(x.mean())
    assert (row["low"], row["high"]) == pytest.approx((x.mean() * math.exp(-half), x.mean() * math.exp(half)))


def test_extra_configuration_names_the_repeats():
    table = estimates.configuration_intervals(repeats_table({"mb4": [1000, 1010]}, extra=True))
    assert list(table["configuration"]) == ["mb4"] and table["run_ids"].iloc[0] == "mb4-r1, mb4-r2"


def test_within_the_noise_is_indistinguishable_and_beyond_it_is_not():
    table = estimates.configuration_intervals(repeats_table(
        {"mb4": [1000, 1100, 950], "mb8": [1030, 980, 1090], "mb16": [1500, 1490, 1530]}))
    close = estimates.distinguish(table, "mb4-r1", "mb8-r1")
    assert not close.distinguishable and "indistinguishable" in close.sentence
    far = estimates.distinguish(table, "mb4-r1", "mb16-r1")
    assert far.verdict == "faster" and far.sentence.startswith("mb16-r1 is faster than mb4-r1: +")
    assert list(estimates.ties_with_fastest(table)) == [False, False, True]


def test_a_single_run_without_steps_has_no_interval_and_is_never_called_faster():
    table = estimates.configuration_intervals(repeats_table({"mb4": [1000], "mb8": [1300]}))
    assert table["low"].isna().all() and set(table["basis"]) == {"one run, no steps: no interval"}
    result = estimates.distinguish(table, "mb4-r1", "mb8-r1")
    assert not result.distinguishable and "no interval" in result.sentence


def test_real_runs_with_steps_get_block_bootstrap_intervals():
    runs = trainperf.derive(trainperf.load_runs(RUNS / "bench-cpu-small-fp32-batch-size"))
    steps = trainperf.load_summaries(RUNS / "bench-cpu-small-fp32-batch-size")
    table = estimates.configuration_intervals(runs, steps, run_cv=0)
    assert len(table) == 5 and set(table["basis"]) == {"steps of one run"}
    assert (table["low"] < table["throughput"]).all() and (table["throughput"] < table["high"]).all()
    # the measured sweep: mb4x4 (3,183 tokens/s) and mb8x2 (3,156) differ by less than their noise
    result = estimates.distinguish(table, "bench-cpu-small-fp32-batch-size-mb4x4",
                                   "bench-cpu-small-fp32-batch-size-mb8x2")
    assert not result.distinguishable
    # ... while mb1x16 (2,784) is clearly slower than mb4x4 by the steps alone
    assert estimates.distinguish(table, "bench-cpu-small-fp32-batch-size-mb4x4",
                                 "bench-cpu-small-fp32-batch-size-mb1x16").verdict == "slower"


def test_a_single_run_with_steps_allows_for_run_to_run_variation_as_compare_does():
    runs = trainperf.derive(trainperf.load_runs(RUNS / "bench-cpu-small-fp32-batch-size"))
    steps = trainperf.load_summaries(RUNS / "bench-cpu-small-fp32-batch-size")
    alone = estimates.configuration_intervals(runs, steps, run_cv=0).set_index("configuration")
    table = estimates.configuration_intervals(runs, steps).set_index("configuration")
    assert set(table["basis"]) == {f"steps of one run, run-to-run CV {stats.RUN_CV:.0%} assumed"}
    # the run's log standard error and the assumed coefficient of variation add in quadrature
    assert np.allclose(table["se_log"], np.hypot(alone["se_log"], stats.RUN_CV))
    assert ((table["low"] < alone["low"]) & (alone["high"] < table["high"])).all()
    # one run a side: a 12.5 % gap (mb1x16 2,784 vs mb4x4 3,183 tokens/s) is within run-to-run noise of 8 %
    assert not estimates.distinguish(table.reset_index(), "bench-cpu-small-fp32-batch-size-mb4x4",
                                     "bench-cpu-small-fp32-batch-size-mb1x16").distinguishable


def test_a_run_with_too_few_steps_counts_as_a_run_without_steps():
    """A per-rank totals table (one row per rank, as seed 004's) gives no job steps: the
    configuration falls back to its runs-table figure and says it has no interval."""
    from trainperf.aggregate import job_steps, summarize
    from trainperf.reading.tables import as_intervals

    runs = repeats_table({"mb4": [1000], "mb8": [1300]})
    steps = summarize(as_intervals(pd.DataFrame({"run_id": ["mb4-r1", "mb4-r1", "mb4-r1", "mb8-r1"], "rank": 0,
                                                 "step": [1, 2, 3, 1], "warmup": False,
                                                 "step_s": [1.0, 1.1, 0.9, 60.0], "tokens": 1000.0})))
    with pytest.raises(trainperf.DataError, match="run mb8-r1.*1 measured step"):
        job_steps(steps)
    assert list(job_steps(steps, usable_only=True)[0]) == ["mb4-r1"]
    table = estimates.configuration_intervals(runs, steps).set_index("configuration")
    assert table.loc["mb8-r1", "basis"] == "one run, no steps: no interval" and table.loc["mb8-r1", "throughput"] == 1300
    assert table.loc["mb4-r1", "basis"].startswith("steps of one run")
    assert table.loc["mb4-r1", "throughput"] == pytest.approx(3000 / 3.0)
