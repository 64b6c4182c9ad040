"""A build's inputs read once, by the kernel server, for every kernel it forks: the frames read from the
caches are kept in the server's memory and served again only while their cache entry records the same file."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from trainperf.reading import cache
from trainperf.reading.loading import load_runs, load_summaries, pin_inputs
from trainperf.report.build.kernels import KERNEL, IPCKernelManager, forked_kernels, read_ahead
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


CODE = ("from trainperf.reading import cache, loading\n"
        "cache.read_frame = lambda path, *a, **k: print('read', path)\n"
        "print(len(loading.load_summaries({run!r}).per_rank), len(loading.load_runs({run!r}, cache=True)))")


@pytest.mark.slow
def test_kernels_forked_after_the_server_read_ahead_find_the_inputs_in_its_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    run = shutil.copytree(RUN, tmp_path / RUN.name)
    load_runs(run, cache=True)  # its entries written: what is read ahead is read from them
    with forked_kernels(KernelSpecManager().get_kernel_spec(KERNEL).argv, tmp_path) as forked:
        assert forked
        pins = read_ahead([str(run)])
        assert pins == {f"run:{run}": {**pin_inputs(run)[f"run:{run}"], "read_at": pins[f"run:{run}"]["read_at"]}}
        printed = asyncio.run(_run(tmp_path, CODE.format(run=str(run))))
    assert printed == "1 1"  # one rank, one run, and no Parquet file read
    assert read_ahead([str(run)]) is None  # no server now


async def _run(cwd: Path, code: str) -> str:
    """What ``code`` prints in a kernel started in ``cwd``."""
    km = IPCKernelManager(kernel_name=KERNEL)
    await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=CRITICAL"], cwd=str(cwd))
    try:
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=120)
        out: list[str] = []
        await client.execute_interactive(code, timeout=120, output_hook=lambda msg: out.append(
            msg["content"].get("text") or msg["content"].get("evalue") or ""))
        client.stop_channels()
        return "".join(out).strip()
    finally:
        await km.shutdown_kernel(now=True)
