"""Goodput: where a run's wall clock went, from the profiler's start to its close."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainperf.goodput import goodput
from trainperf.runfolder.rankfile import RankFile
from trainperf.runfolder.reader import outside_seconds


def ranks(**columns):
    """Per-rank summaries with the columns goodput reads (``trainperf.aggregate.RANK_COLUMNS``)."""
    base = {"rank": [0, 1], "intervals": [12, 12], "measured_intervals": [10, 10], "measured_steps": [10.0, 10.0],
            "warmup_steps": [2.0, 2.0]}
    return pd.DataFrame({**base, **columns})


def test_two_ranks_by_hand():
    """Rank 0: wall 100 s; steps from 10 s to 90 s, 60 s of them: 2 warm-up steps of 12 s in all and 10 measured of
    48 s (4.8 s each), so 12 - 2 x 4.8 = 2.4 s of warm-up excess; a 5 s checkpoint between the steps and a 4 s one
    after them, 3 s of loading before them. Rank 1: wall 110 s; steps from 12 s to 92 s, 70 s of them, warm-up
    10 s, measured 60 s (6 s each): no excess; 10 s of checkpoints between the steps. Productive: 60 - 2.4 and 70."""
    per_rank = ranks(all_first_start_s=[10.0, 12.0], all_last_end_s=[90.0, 92.0], all_step_s_sum=[60.0, 70.0],
                     warmup_step_s_sum=[12.0, 10.0], step_s_sum=[48.0, 60.0])
    outside = [[0, "checkpoint", 0.0, 5.0, 4.0], [0, "load", 3.0, 0.0, 0.0], [1, "checkpoint", 0.0, 10.0, 0.0]]
    found = goodput(per_rank, {0: 100.0, 1: 110.0}, outside)
    assert found == pytest.approx({
        "wall_s": 105.0, "goodput": (57.6 + 70.0) / 210.0,
        "productive_s": (57.6 + 70.0) / 2, "warmup_excess_s": 1.2,
        "startup_s": ((10 - 3) + 12) / 2,  # the loading before the first step is a phase of its own
        "unaccounted_s": ((80 - 60 - 5) + (80 - 70 - 10)) / 2,
        "after_steps_s": ((100 - 90 - 4) + (110 - 92)) / 2,
        "outside_checkpoint_s": (9.0 + 10.0) / 2, "outside_load_s": 3.0 / 2})
    # the parts add up to the wall clock
    assert sum(v for k, v in found.items() if k not in ("wall_s", "goodput")) == pytest.approx(found["wall_s"])


def test_only_ranks_with_a_wall_clock_count():
    per_rank = ranks(all_first_start_s=[10.0, 12.0], all_last_end_s=[90.0, 92.0], all_step_s_sum=[80.0, 80.0],
                     warmup_step_s_sum=[8.0, 8.0], step_s_sum=[72.0, 72.0])
    assert goodput(per_rank, {}) == {}  # files written before the wall clock was recorded: nothing to say
    found = goodput(per_rank, {1: 100.0})
    assert (found["wall_s"], found["goodput"], found["startup_s"]) == pytest.approx((100.0, 0.8, 12.0))


def test_a_phase_that_begins_as_the_last_step_ends_is_after_the_steps(tmp_path):
    """A Trainer run recorded its last step at start_s 0.048521 for 0.006365 s and an evaluation from 0.054886 s,
    the instant the step ended (each time written to 1 µs). In floating point 0.048521 + 0.006365 is a hair past
    0.054886: the evaluation was taken for one between the steps, and counted again in after_steps_s (its parts
    then added up to 1.29 s of a 1.008 s wall clock). Checkpoints before the first step likewise."""
    events = tmp_path / "events-rank0.jsonl"
    events.write_text('{"format": "trainperf-events", "version": 1, "rank": 0}\n'
                      '{"phase": "checkpoint", "start_s": 0.000100, "seconds": 0.002306}\n'
                      '{"phase": "validation", "start_s": 0.054886, "seconds": 0.012052}\n')
    steps = RankFile(path=tmp_path / "steps-rank0.jsonl", rank=0, node=None, closed=True, columns={
        "start_s": np.array([0.002406, 0.040774, 0.048521]), "step_s": np.array([0.010296, 0.007747, 0.006365])})
    found, bad = outside_seconds(tmp_path, [steps])
    assert not bad
    assert sorted(found) == [[0, "checkpoint", 0.002306, 0.0, 0.0], [0, "validation", 0.0, 0.0, 0.012052]]
