"""The profiler-cost benchmark's own arithmetic (``benchmarks/profiler_overhead.py``): the sampler's
clock that stands still while the plain loop runs, and the cost of each window before, during and
after it, worked by hand on made-up step times."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import profiler_overhead as bench  # noqa: E402


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_sampler_clock_stands_still_through_every_plain_block():
    """Sampled block (1 s), plain block (2 s), paused again, plain block (3 s), sampled (4 s): the
    sampler's clock has run 5 s. Pausing a paused clock used to restart the pause, counting the 2 s
    plain block as the sampler's time (7 s), which made windows look due too often."""
    raw = FakeClock()
    clock = bench.VariantClock(raw)
    start = clock()
    raw.now += 1.0
    clock.pause()
    raw.now += 2.0
    clock.pause()  # the benchmark pauses after every block, plain ones included
    raw.now += 3.0
    clock.resume()
    raw.now += 4.0
    assert clock() - start == pytest.approx(5.0)


def test_a_window_cost_before_during_and_after_it():
    """Steps of 10 ms CPU; a window at step 100 (steps 100 and 101: 40 and 25 ms, so +45 ms during),
    step 98 took 13 ms (+3 ms before), steps 102 and 103 took 12 ms each (+4 ms after). The sampler
    budgeted 64 ms of host time for the window: 64 - 2 x 10 = 44 ms. The first window (steps 0 and 1,
    with torch.profiler's start-up) is left out."""
    cpu = [0.010] * 400
    cpu[0], cpu[1] = 0.200, 0.100
    cpu[98], cpu[100], cpu[101], cpu[102], cpu[103] = 0.013, 0.040, 0.025, 0.012, 0.012
    times = [(c, c) for c in cpu]
    rows, typical = bench.window_table(times, [0, 1, 100, 101], [(0.3, 0.3), (0.064, 0.064)])
    assert typical == pytest.approx(0.010)
    (row,) = rows
    assert row["step"] == 100
    assert row["before"] == pytest.approx(0.003)
    assert row["during"] == pytest.approx(0.045)
    assert row["after"] == pytest.approx(0.004)
    assert row["budgeted"] == pytest.approx(0.044)
