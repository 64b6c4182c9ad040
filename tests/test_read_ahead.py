"""A build's inputs read once, by the kernel server, for every kernel it forks: the frames read from the
caches are kept in the server's memory and served again only while their cache entry records the same file
(the kernels that find them there: tests/test_kernel_fork.py)."""

from __future__ import annotations

import shutil
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
