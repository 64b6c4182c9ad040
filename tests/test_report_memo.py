"""The report cells ask for the same intervals again (headline, table, notes):
each page computes them once (its ``analyse``), and gives what computing
them afresh gives."""

from pathlib import Path

import pandas as pd
import pytest

from trainperf import estimates, load_steps
from trainperf.aggregate import Summaries, summarize
from trainperf.estimates import configuration_intervals
from trainperf.report import throughput
from trainperf.report.page import open_runs, open_steps
from trainperf.report.scaling import studies

STRONG = Path(__file__).resolve().parent / "data" / "measured_runs" / "bench-cpu-small-fp32-strong-scaling"
SEED_001 = Path(__file__).resolve().parents[1] / "data" / "reference" / "seed_001_platforms.csv"


@pytest.fixture(scope="module")
def measured():
    runs = studies(open_runs([str(STRONG)]))
    return runs, open_steps([str(STRONG)], runs)


@pytest.fixture
def computed(monkeypatch):
    """How often the intervals are computed."""
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return configuration_intervals(*args, **kwargs)

    monkeypatch.setattr(estimates, "configuration_intervals", counting)
    return calls


def test_the_same_runs_and_steps_are_computed_once(measured, computed):
    runs, steps = measured
    page = throughput.analyse(runs, steps)  # its table, headline and step times share one computation
    first = page.table
    assert len(computed) == 1
    first.loc[0, "tokens_per_s_low"] = -1.0  # a caller changing its page changes no other page
    copied = Summaries(steps.per_rank.copy(), steps.per_step.copy(), steps.values.copy())
    again = throughput.analyse(runs.copy().set_axis(range(10, 10 + len(runs))), copied).table
    assert again.loc[0, "tokens_per_s_low"] > 0
    pd.testing.assert_frame_equal(again, throughput.table(runs, steps))


def test_changed_steps_are_computed_again(measured, computed):
    runs, steps = measured
    before = estimates.run_intervals(runs, steps)
    intervals = load_steps(STRONG)
    slower = summarize(intervals.assign(step_s=intervals["step_s"] * 2)).select(runs["run_id"])
    after = estimates.run_intervals(runs, slower)
    assert len(computed) == 2
    assert after["throughput"].iloc[0] == pytest.approx(before["throughput"].iloc[0] / 2, rel=0.01)


def test_the_steps_of_other_runs_change_no_interval(measured):
    runs, steps = measured
    group = runs.iloc[:2]
    pd.testing.assert_frame_equal(configuration_intervals(group, steps),
                                  configuration_intervals(group, steps.select(group["run_id"])))


def test_platform_configurations_are_computed_once_per_content(monkeypatch):
    """The platforms cells (headline, peaks, winners, capacity) all start from the configurations."""
    from trainperf.report import platforms

    calls = []
    table = platforms.configuration_table
    monkeypatch.setattr(platforms, "configuration_table", lambda *args: calls.append(1) or table(*args))
    runs = platforms.comparable(open_runs([str(SEED_001)]))
    page = platforms.analyse(runs, project_nodes=[1, 2], gpus_per_node=8)
    first = page.configurations
    page.headline, page.winners, page.capacity
    assert len(calls) == 1
    first.loc[0, "tokens_per_s"] = -1.0  # a caller changing its page changes no other page
    doubled = platforms.analyse(runs.assign(tokens_per_s=runs["tokens_per_s"] * 2)).configurations
    assert len(calls) == 2  # the changed runs are computed afresh
    pd.testing.assert_frame_equal(platforms.analyse(runs).configurations, table(runs, platforms.MEANS))
    assert doubled["tokens_per_s"].sum() == pytest.approx(2 * table(runs, platforms.MEANS)["tokens_per_s"].sum())


def test_the_scaling_cells_share_one_study_and_one_set_of_fits(measured, monkeypatch):
    """The headline, the table and the notes ask for the same configurations; the headline
    and the fit cell for the same projections: the page computes each once."""
    from trainperf.report import scaling
    from trainperf.report.scaling import multipliers, projection

    studied, fitted = [], []
    experiment, fit = multipliers.experiment_rows, projection.fit
    monkeypatch.setattr(multipliers, "experiment_rows", lambda *a: studied.append(1) or experiment(*a))
    monkeypatch.setattr(projection, "fit", lambda *a: fitted.append(1) or fit(*a))
    runs, steps = measured
    runs = runs.assign(oversubscribed=False)  # 4 processes on 2 cores are; taken as not, to have fits to share
    page = scaling.analyse(runs, steps)
    page.headline, page.efficiency_notes, page.serial_notes
    frame, found = page.table, page.projections
    assert len(studied) == runs["experiment"].nunique() and len(fitted) == 2  # Amdahl and USL, once
    found[0].target = 1.0  # a caller changing what it was given changes nothing remembered
    assert scaling.analyse(runs).projections[0].target == 8 * found[0].p.max()
    frame.loc[0, "scaling_multiplier"] = -1.0
    assert (scaling.analyse(runs, steps).table["scaling_multiplier"] > 0).all()
