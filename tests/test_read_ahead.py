"""A build's inputs read once, by the kernel server, for every kernel it forks: the frames read from the
caches are kept in the server's memory and served again only while their cache entry records the same file
(the kernels that find them there: tests/test_kernel_fork.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from trainperf.reading import cache
from trainperf.reading.loading import load_runs, load_summaries, pin_inputs
from trainperf.report.page import read_ahead as read_here

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "data" / "runs" / "bench-cpu-small-fp32-batch-size" / "bench-cpu-small-fp32-batch-size-mb16x1-r1"
"""A one-rank run folder."""


def _unreadable(path, *args, **kwargs):
    raise AssertionError(f"{path} read from disk")


def test_a_kept_frame_is_served_while_its_entry_records_the_same_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_kept", {})
    run = shutil.copytree(RUN, tmp_path / RUN.name)
    load_runs(run, cache=True)  # the entries are written; nothing is kept outside keeping()
    assert cache._kept == {}
    pins = read_here(str(run))
    assert pins.keys() == pin_inputs(run).keys()
    first, steps = load_runs(run, cache=True), load_summaries(run)
    monkeypatch.setattr(cache, "read_frame", _unreadable)
    again = load_runs(run, cache=True)  # served from memory: no Parquet file is opened
    pd.testing.assert_frame_equal(again, first)
    pd.testing.assert_frame_equal(load_summaries(run).per_rank, steps.per_rank)
    again["tokens"] = 0  # a copy of its own: what is kept does not change
    assert (load_runs(run, cache=True)["tokens"] == first["tokens"]).all()
    entry = next((tmp_path / "cache" / "inputs").iterdir())
    changed = first.assign(tokens=first["tokens"] + 1)
    cache.write_frame(entry / "frame.parquet", changed)  # another file than recorded: sealed again
    cache.seal(entry, {"warnings": []})
    monkeypatch.undo()  # read_frame again, the same cache folder and kept frames
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert load_runs(run, cache=True)["tokens"].item() == changed["tokens"].item()


FORK_AFTER_READING = """
import os, sys
import dask
from trainperf.reading import scheduler
def double(x):
    return 2 * x
chosen = scheduler()
print("parent", dask.compute(*[dask.delayed(double)(i) for i in range(4)], scheduler=chosen), flush=True)
pid = os.fork()
if pid == 0:  # a report kernel forked from the server that read the inputs
    print("child", dask.compute(*[dask.delayed(double)(i) for i in range(4)], scheduler=chosen), flush=True)
    os._exit(0)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_process_forked_after_reading_computes_on_threads_of_its_own():
    """Dask's thread pool, made by the first computation on its local threads, is inherited by a forked process
    without its threads: the forked process (a report kernel forked from the kernel server, which read the
    inputs) waited for them forever on its first computation. Both compute 2 · (0, 1, 2, 3), in 60 s at most."""
    done = subprocess.run([sys.executable, "-c", FORK_AFTER_READING], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TRAINPERF_SCHEDULER": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["parent (0, 2, 4, 6)", "child (0, 2, 4, 6)"]
