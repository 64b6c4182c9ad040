"""The report cells ask for the same intervals again (headline, table, notes):
each is computed once per kernel for the same runs and steps, by content,
and gives what computing it afresh gives."""

from pathlib import Path

import pandas as pd
import pytest

from trainperf.intervals import configuration_intervals
from trainperf.report import noise
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
    """How often configuration_intervals runs, with nothing remembered from other tests."""
    monkeypatch.setattr(noise, "_MEMO", {})
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return configuration_intervals(*args, **kwargs)

    monkeypatch.setattr(noise, "configuration_intervals", counting)
    return calls


def test_the_same_runs_and_steps_are_computed_once(measured, computed):
    runs, steps = measured
    first = noise.run_intervals(runs, steps)
    first.loc[0, "low"] = -1.0  # a caller changing its copy changes nothing remembered
    again = noise.run_intervals(runs.copy().set_axis(range(10, 10 + len(runs))), steps.copy())
    assert len(computed) == 1
    assert again.loc[0, "low"] > 0
    pd.testing.assert_frame_equal(again, noise._run_intervals(runs, steps))


def test_changed_steps_are_computed_again(measured, computed):
    runs, steps = measured
    before = noise.run_intervals(runs, steps)
    slower = steps.assign(step_s=steps["step_s"] * 2)
    after = noise.run_intervals(runs, slower)
    assert len(computed) == 2
    assert after["throughput"].iloc[0] == pytest.approx(before["throughput"].iloc[0] / 2, rel=0.01)


def test_the_steps_of_other_runs_change_no_interval(measured):
    runs, steps = measured
    group = runs.iloc[:2]
    pd.testing.assert_frame_equal(configuration_intervals(group, noise.usable_steps(steps)),
                                  configuration_intervals(group, steps[steps["run_id"].isin(group["run_id"])]))


def test_platform_configurations_are_computed_once_per_content(monkeypatch):
    """The platforms cells (headline, peaks, winners, capacity) all start from the configurations."""
    from trainperf.report import platforms

    monkeypatch.setattr(noise, "_MEMO", {})
    calls = []
    means = platforms.configuration_means
    monkeypatch.setattr(platforms, "configuration_means", lambda *args: calls.append(1) or means(*args))
    runs = platforms.comparable(open_runs([str(SEED_001)]))
    first = platforms.configurations(runs)
    platforms.headline(runs), platforms.winners(runs), platforms.capacity(runs, [1, 2], 8)
    assert len(calls) == 1
    first.loc[0, "tokens_per_s"] = -1.0  # a caller changing its copy changes nothing remembered
    pd.testing.assert_frame_equal(platforms.configurations(runs), platforms._configurations(runs))
    doubled = platforms.configurations(runs.assign(tokens_per_s=runs["tokens_per_s"] * 2))
    assert len(calls) == 3  # the check above computed afresh once; the changed runs once more
    assert doubled["tokens_per_s"].sum() == pytest.approx(2 * platforms._configurations(runs)["tokens_per_s"].sum())
