"""``trainperf watch``: following a run folder while it is written, from
what each rank appended, and a frame's figures against hand computation."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from trainperf import StepProfiler, cli
from trainperf.profiler.watch import RunWatch
from trainperf.runfolder import rankfile
from trainperf.runfolder.tail import FIRST_READ_BYTES, StepsTail

from test_profiler import fake_time  # noqa: F401  (the fixture: a perf_counter that moves only when told to)


def known_run(run_dir, fake):
    """Four steps of 200 tokens (step 0 warm-up): data 0.5 s, forward 1 s,
    backward 2 s, optimizer 0.5 s, and 0.25 s that no phase timed; a 4.25 s step."""
    def loader():
        for i in range(4):
            fake.now += 0.5
            yield i

    prof = StepProfiler(run_dir, config={"model": "toy"}, warmup_steps=1)
    for _ in prof.batches(loader()):
        with prof.step(tokens=200, samples=2):
            for name, seconds in (("forward", 1.0), ("backward", 2.0), ("optimizer", 0.5)):
                with prof.phase(name):
                    fake.now += seconds
            fake.now += 0.25
    prof.close()


def test_a_frame_of_a_closed_run_by_hand(tmp_path, fake_time):
    known_run(tmp_path / "run", fake_time)
    watch = RunWatch(tmp_path / "run")
    watch.update()
    frame = watch.frame()
    assert frame["closed"] and frame["world_size"] == 1 and frame["last_step"] == 3
    (rank,) = frame["ranks"]
    # measured steps 1-3: 4.25 s each, 200 tokens: 47.06 tokens/s
    assert rank["step_s"] == pytest.approx(4.25) and rank["tokens_per_s"] == pytest.approx(200 / 4.25)
    shares = rank["shares"]
    assert shares["data"] == pytest.approx(0.5 / 4.25) and shares["backward"] == pytest.approx(2 / 4.25)
    assert shares["other"] == pytest.approx(0.25 / 4.25, abs=1e-6)
    assert frame["tokens_per_s"] == pytest.approx(200 / 4.25)


def test_watch_once_prints_one_frame_and_a_missing_run_is_an_error(tmp_path, fake_time, capsys):
    known_run(tmp_path / "runs" / "toy-run", fake_time)
    assert cli.main(["watch", str(tmp_path / "runs"), "--once"]) == 0  # a folder of runs
    out = capsys.readouterr().out
    assert "toy-run" in out and "closed" in out and "ranks 1/1" in out and "47" in out  # 47 tokens/s
    assert "24%" in out and "47%" in out  # forward 1 / 4.25 s, backward 2 / 4.25 s
    assert cli.main(["watch", str(tmp_path / "empty-does-not-exist"), "--once"]) == 2
    (tmp_path / "empty").mkdir()
    assert cli.main(["watch", str(tmp_path / "empty"), "--once"]) == 2
    assert "no run folder" in capsys.readouterr().err


def test_a_tail_reads_what_was_appended_and_waits_for_a_whole_line(tmp_path):
    path = tmp_path / "steps-rank0.jsonl"
    line = rankfile.step_line([0, False, 0.0, 1.0] + [None] * (len(rankfile.LINE_COLUMNS) - 5) + [False])
    path.write_bytes(rankfile.header_line(0, "h", 0, "h") + line * 2 + line[:10])
    tail = StepsTail(path)
    assert len(tail.read()) == 2 and tail.read() == []
    with path.open("ab") as file:
        file.write(line[10:] + rankfile.end_line(3, {}))
    (row,) = tail.read()
    assert row[3] == 1.0 and tail.closed and tail.bad_lines == 0


def test_a_tail_starts_near_the_end_of_a_long_file(tmp_path):
    path = tmp_path / "steps-rank0.jsonl"
    lines = [rankfile.step_line([i, False, float(i), 1.0] + [None] * (len(rankfile.LINE_COLUMNS) - 5) + [False])
             for i in range(5000)]
    path.write_bytes(rankfile.header_line(0, "h", 0, "h") + b"".join(lines))
    rows = StepsTail(path).read()
    # the whole lines among the last FIRST_READ_BYTES bytes, the last step last
    assert rows[-1][0] == 4999 and len(rows) == FIRST_READ_BYTES // len(lines[-1])  # the last lines are all this long


SLOW_RANK = """
import os, sys, time
from trainperf import StepProfiler
prof = StepProfiler(sys.argv[1], config={"model": "toy"}, warmup_steps=1)
for i in range(int(sys.argv[2])):
    with prof.step(tokens=100):
        with prof.phase("forward"):
            time.sleep(0.05)
prof.close()
"""


@pytest.mark.slow
def test_watch_follows_two_ranks_while_they_write_and_ends_when_they_close(tmp_path):
    """Two processes (ranks 0 and 1 of one run, no process group) write 60
    steps of 50 ms; a frame taken while they run shows both ranks, not
    closed; ``trainperf watch`` started before the run ends by itself once
    both ranks closed, its last frame saying so."""
    run_dir, steps = tmp_path / "runs" / "live", 60
    (tmp_path / "runs").mkdir()
    watcher = subprocess.Popen([sys.executable, "-m", "trainperf", "watch", str(tmp_path / "runs")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ranks = [subprocess.Popen([sys.executable, "-c", SLOW_RANK, str(run_dir), str(steps)],
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"})
             for r in (0, 1)]
    try:
        seen = None
        deadline = time.monotonic() + 240
        while seen is None and time.monotonic() < deadline and any(p.poll() is None for p in ranks):
            if (run_dir / "manifest.json").exists():
                watch = RunWatch(run_dir)
                watch.update()
                frame = watch.frame()
                if len(frame["ranks"]) == 2 and not frame["closed"]:
                    seen = frame
            time.sleep(0.2)
        assert [p.wait(timeout=240) for p in ranks] == [0, 0]
        out, _ = watcher.communicate(timeout=60)
    finally:
        for process in (*ranks, watcher):
            if process.poll() is None:
                process.kill()
    assert seen is not None, "no frame showed both ranks while they wrote"
    assert all(r["step"] < steps - 1 and r["tokens_per_s"] > 0 for r in seen["ranks"])
    assert watcher.returncode == 0 and "closed" in out and "ranks 2/2 (2 closed)" in out
