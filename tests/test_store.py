"""The step-intervals store and the engine: one aggregation, the same figures
on every path (a frame in memory, the store's first pass, a Dask DataFrame over
the store, a cluster of worker processes), and what happens to bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import trainperf
from trainperf import DataWarning
from trainperf.reading import store
from trainperf.aggregate import Summaries, summarize
from trainperf.reading.cache import open_entry, seal
from trainperf.runfolder import rankfile, reader

SUMMARY_FRAMES = ("per_rank", "per_step", "values", "step_times", "warmup")


def write_run(folder: Path, ranks: int = 5, steps: int = 40, *, stop: dict[int, int] | None = None,
              seed: int = 0) -> Path:
    """A run folder as the profiler writes it: every phase timed on most steps
    (a few left empty), rank 2 slower, two warm-up steps, 8 samples of 4
    micro-steps; ``stop`` maps a rank to the step it died at (no end line)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    manifest = {"config": {"model": "m", "seq_len": 16}, "warmup_steps": 2,
                "environment": {"world_size": ranks, "device": "cpu", "strategy": "ddp",
                                "ranks": [{"rank": r, "node": f"n{r % 2}"} for r in range(ranks)]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for rank in range(ranks):
        last = (stop or {}).get(rank, steps)
        lines = [rankfile.header_line(rank, f"n{rank % 2}", rank % 2, f"n{rank % 2}")]
        start = 0.0
        for step in range(last):
            phases = rng.uniform(0.01, 0.02, 9) * (1.3 if rank == 2 else 1.0)  # data ... validation
            phases[rng.random(9) < 0.05] = np.nan
            step_s = float(np.nansum(phases) + 0.001)
            values = [step, step < 2, start, step_s, *[None if np.isnan(p) else float(p) for p in phases],
                      128 * (step % 3 + 1), 8, 4, float(rng.normal(3.0, 0.1)), 1.5 + rank / 10,
                      None, None, None, None, None, False]  # reserved and host memory ... out_of_memory
            lines.append(rankfile.step_line(values))
            start += step_s + 0.0005
        if last == steps:
            lines.append(rankfile.end_line(steps, {}))
        (folder / f"steps-rank{rank}.jsonl").write_bytes(b"".join(lines))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of this test: the store starts empty."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(folder))
    monkeypatch.delenv("TRAINPERF_INPUT_CACHE", raising=False)
    return folder


@pytest.fixture
def small_parts(monkeypatch):
    """Parts of a rank or two, so that a small run has several partitions to combine."""
    monkeypatch.setattr(reader, "PART_BYTES", 10_000)


def entries(cache: Path) -> list[Path]:
    """The store's entries (folders; each has a lock file beside it)."""
    return [p for p in (cache / "store").iterdir() if p.is_dir()]


def assert_same(a: Summaries, b: Summaries) -> None:
    for name in SUMMARY_FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_dtype=False, obj=name)


def test_the_store_holds_the_intervals_and_the_summaries_a_frame_gives(tmp_path, cache, small_parts):
    run = write_run(tmp_path / "run")
    first = trainperf.load_summaries(run)
    (entry,) = entries(cache)
    assert len(list((entry / "intervals").glob("part-*.parquet"))) > 2
    intervals = trainperf.load_steps(run)
    assert len(intervals) == 5 * 40
    assert_same(first, summarize(intervals))  # in memory: one partition
    assert_same(first, summarize(trainperf.load_steps(run, lazy=True)))  # Dask over the store's parts
    assert_same(first, trainperf.load_summaries(run))  # read back


def test_a_run_read_part_by_part_measures_what_it_measures_whole(tmp_path, cache, small_parts):
    run = write_run(tmp_path / "run", stop={3: 25})
    with pytest.warns(DataWarning, match=r"rank\(s\) 3 stopped early \(rank 3: 25 of 40 steps, profiler not closed\)"):
        parts = trainperf.load_runs(run, cache=False)
    with pytest.warns(DataWarning, match="stopped early"):
        whole = trainperf.aggregate_steps(trainperf.load_steps(run), {"run": json.loads((run / "manifest.json").read_text())})
    shared = [c for c in whole.columns if c in parts.columns]
    pd.testing.assert_frame_equal(parts[shared], whole[shared], check_dtype=False)
    row = parts.iloc[0]
    # by hand: the slowest rank is the slowed one; 38 measured steps of 4 micro-steps, 8 samples each
    assert row["slowest_rank"] == 2 and row["steps"] == 38 and row["warmup_steps"] == 2
    assert (row["grad_accum_steps"], row["micro_batch_size"], row["global_batch_size"]) == (4, 2.0, 40.0)
    assert not row["complete"] and row["nodes"] == 2 and row["gpus"] == 5


@pytest.mark.slow
def test_a_local_cluster_of_two_worker_processes_gives_the_same_frames(tmp_path, monkeypatch, small_parts):
    """The store built and aggregated by two worker processes (a dask.distributed
    LocalCluster, what a user's cluster is) holds what the local threads make,
    whether the cluster is named by a client, its address or ``TRAINPERF_SCHEDULER``;
    ``trainperf report --scheduler ADDRESS`` has the report's kernel read through it."""
    distributed = pytest.importorskip("distributed")
    run = write_run(tmp_path / "run", ranks=6, steps=30, stop={5: 12})
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "local"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        local = trainperf.load_summaries(run, scheduler="threads")
        local_runs = trainperf.load_runs(run, cache=False, scheduler="threads")
        monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cluster"))
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                      memory_limit="1GiB") as cluster, distributed.Client(cluster) as client:
            remote = trainperf.load_summaries(run, scheduler=client)
            over_store = summarize(trainperf.load_steps(run, lazy=True), scheduler=client)
            remote_runs = trainperf.load_runs(run, cache=False, scheduler=client)
            by_address = trainperf.load_runs(run, cache=False, scheduler=cluster.scheduler_address)
            monkeypatch.setenv("TRAINPERF_SCHEDULER", cluster.scheduler_address)
            by_environment = trainperf.load_runs(run, cache=False)
            monkeypatch.delenv("TRAINPERF_SCHEDULER")
            monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "report"))
            tasks = cluster.scheduler.transition_counter
            built = subprocess.run([sys.executable, "-m", "trainperf", "report", "--only", "throughput", "--data",
                                    str(run), "--out", str(tmp_path / "out"), "--scheduler", cluster.scheduler_address],
                                   capture_output=True, text=True, timeout=600)
            assert built.returncode == 0, built.stdout + built.stderr
            assert cluster.scheduler.transition_counter > tasks  # the kernel's reads ran on the cluster
    assert_same(local, remote)
    assert_same(local, over_store)
    for runs in (remote_runs, by_address, by_environment):
        pd.testing.assert_frame_equal(local_runs, runs)
    assert (tmp_path / "out" / "throughput.html").is_file()


def test_two_builds_of_one_entry_at_once_leave_one_whole_entry(tmp_path, cache):
    run = write_run(tmp_path / "run", ranks=3, steps=20)
    code = f"import trainperf; print(trainperf.load_summaries({str(run)!r}).rows)"
    env = {**os.environ, "TRAINPERF_CACHE_DIR": str(cache)}
    builds = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
              for _ in range(3)]
    assert [b.communicate()[0].strip() for b in builds] == ["60"] * 3
    assert [p.name.startswith(".") for p in entries(cache)] == [False]  # one entry, no half-built leftover


def test_a_store_of_another_version_is_built_again_never_read(tmp_path, cache):
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    expected = trainperf.load_summaries(run)
    (entry,) = entries(cache)
    content = {k: v for k, v in open_entry(entry).items() if k != "files"}
    seal(entry, {**content, "version": 0})  # as an older version would have sealed it
    (entry / "summaries.pkl").write_bytes(b"")  # what an older layout left would not be read anyway
    with pytest.warns(DataWarning, match=r"is not readable \(Damaged: written as trainperf-store version 0\): "
                                         "it is built again"):
        again = trainperf.load_summaries(run)
    assert_same(expected, again)
    assert open_entry(entry)["version"] == store.VERSION


def test_an_empty_part_file_is_a_damaged_entry_built_again(tmp_path, cache):
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    expected = trainperf.load_steps(run)
    (entry,) = entries(cache)
    (part,) = (entry / "intervals").glob("part-*.parquet")
    part.write_bytes(b"")
    with pytest.warns(DataWarning, match="is not readable"):
        pd.testing.assert_frame_equal(trainperf.load_steps(run), expected)


def test_a_cache_folder_that_cannot_be_written_reads_from_the_source_with_one_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(blocker / "cache"))
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    with pytest.warns(DataWarning, match=r"cannot be written .*: inputs are read from their source into memory") as caught:
        first = trainperf.load_summaries(run)
        trainperf.load_summaries(run)
    assert len([w for w in caught if "cannot be written" in str(w.message)]) == 1
    assert first.rows == 20 and not (blocker / "cache").exists()


def test_store_off_reads_in_memory_and_keeps_nothing(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("TRAINPERF_INPUT_CACHE", "off")
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    assert trainperf.load_summaries(run).rows == 20
    assert not cache.exists()


def test_a_steps_table_is_stored_a_run_a_part_and_whole_ranks(tmp_path, cache, monkeypatch):
    """Two runs in one table, rows of their ranks interleaved: each part holds one run's whole ranks."""
    from trainperf.reading import loading

    monkeypatch.setattr(loading, "STEPS_PART_ROWS", 4)
    rows = [{"run_id": run, "rank": rank, "step": step, "step_s": 1.0 + rank}
            for step in range(3) for run in ("a", "b") for rank in range(3)]
    table = tmp_path / "steps.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    trainperf.load_summaries(table)
    (entry,) = entries(cache)
    parts = [pd.read_parquet(p) for p in sorted((entry / "intervals").glob("part-*.parquet"))]
    # 3 rows a rank, at most 4 rows a part: a rank a part, a new part at each run
    assert [(p["run_id"].unique().tolist(), p["rank"].unique().tolist()) for p in parts] == [
        (["a"], [0]), (["a"], [1]), (["a"], [2]), (["b"], [0]), (["b"], [1]), (["b"], [2])]


def test_reading_a_run_imports_neither_the_profiler_nor_torch(tmp_path):
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    code = (f"import sys, trainperf; trainperf.load_runs({str(run)!r}); trainperf.load_summaries({str(run)!r}); "
            "trainperf.load_steps({!r}, lazy=True).compute(); "
            "print(sorted(m for m in sys.modules if m.startswith(('trainperf.profiler', 'torch'))))").format(str(run))
    env = {**os.environ, "TRAINPERF_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
