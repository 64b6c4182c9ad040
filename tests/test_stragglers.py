"""find_straggler on steps tables built by hand (the torchrun run with a rank
slowed on purpose is in test_profiler_distributed.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from trainperf import find_straggler


def steps_table(waits: dict[int, list[float]], step_s: float = 1.0, run_id: str = "r") -> pd.DataFrame:
    rows = []
    for rank, rank_waits in waits.items():
        for step, wait in enumerate(rank_waits):
            rows.append({"run_id": run_id, "rank": rank, "node": "host", "step": step, "warmup": step == 0,
                         "step_s": step_s, "comm_exposed_s": wait})
    return pd.DataFrame(rows)


def test_the_rank_that_waits_least_is_named():
    """Four ranks; rank 2 waits 0.01 s, the others 0.30, 0.32, 0.31 s (median
    0.31): the others wait 0.30 s per 1 s step for it. The warm-up step
    (first value) is left out."""
    table = steps_table({0: [9, 0.30, 0.30], 1: [9, 0.32, 0.32], 2: [9, 0.01, 0.01], 3: [9, 0.31, 0.31]})
    per_rank, sentence = find_straggler(table)
    assert per_rank["straggler"].tolist() == [False, False, True, False]
    assert per_rank["comm_exposed_s"].tolist() == pytest.approx([0.30, 0.32, 0.01, 0.31])
    assert per_rank["busy_s"].tolist() == pytest.approx([0.70, 0.68, 0.99, 0.69])
    assert per_rank.loc[2, "wait_gap_s"] == pytest.approx(0.30)
    assert per_rank["steps"].tolist() == [2, 2, 2, 2]
    assert sentence == ("Run r: rank 2 is the straggler. It waits 10.0 ms per step for communication, the other "
                        "ranks 310.0 ms (median): they wait 300.0 ms per step for it, 30 % of a 1,000.0 ms step.")


def test_no_straggler_within_the_minimum_gap():
    per_rank, sentence = find_straggler(steps_table({0: [0, 0.10, 0.10], 1: [0, 0.08, 0.08]}))
    assert not per_rank["straggler"].any()
    assert sentence.startswith("Run r: no straggler. The ranks wait 80.0 ms to 100.0 ms")


def test_nothing_to_name():
    per_rank, sentence = find_straggler(steps_table({0: [0, float("nan")], 1: [0, float("nan")]}))
    assert not per_rank["straggler"].any() and "comm_exposed_s is empty" in sentence
    _, sentence = find_straggler(steps_table({0: [0, 0.1]}))
    assert sentence == "Run r: one rank, no straggler to find."
    both = pd.concat([steps_table({0: [0, 0.1]}, run_id="a"), steps_table({0: [0, 0.1]}, run_id="b")])
    with pytest.raises(ValueError, match="2 runs"):
        find_straggler(both)
    assert find_straggler(both, run_id="b")[0]["run_id"].tolist() == ["b"]
    with pytest.raises(ValueError, match="no measured"):
        find_straggler(steps_table({0: [0.1]}))


def test_every_run_named_from_one_pass_over_the_steps():
    from trainperf.aggregate import summarize
    from trainperf.reading.tables import as_intervals
    from trainperf.stragglers import name_straggler, rank_waits

    both = pd.concat([steps_table({0: [9, 0.30, 0.30], 1: [9, 0.01, 0.01]}, run_id="a"),
                      steps_table({0: [0, 0.10, 0.10], 1: [0, 0.08, 0.08]}, run_id="b")], ignore_index=True)
    waits = rank_waits(summarize(as_intervals(both)))
    assert waits[["run_id", "rank"]].values.tolist() == [["a", 0], ["a", 1], ["b", 0], ["b", 1]]
    for run_id in ("a", "b"):
        per_rank, sentence = name_straggler(waits[waits["run_id"] == run_id], run_id)
        alone, expected = find_straggler(both, run_id)
        pd.testing.assert_frame_equal(per_rank, alone)
        assert sentence == expected
    assert name_straggler(waits[waits["run_id"] == "a"], "a")[0]["straggler"].tolist() == [False, True]
