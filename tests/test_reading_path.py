"""``load_runs`` goes down the layers: from the dispatcher to one reader to the store, never calling back into a
file of trainperf it came through. (Inside the importers, a stack's parser is a subclass whose hooks the shared
parser calls: those calls stay in the importers package and are not counted.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import trainperf
from trainperf.reading.loading import load_runs

ROOT = Path(trainperf.__file__).parent
DATA = Path(__file__).parent / "data"
INPUTS = [DATA / "clients" / "nanogpt_ddp" / "mb8-p2",  # a run folder, read through the store
          DATA / "zoo" / "readers" / "megatron_lm_bigscience_gpt2_2021.log",  # a log
          ROOT.parents[1] / "data" / "reference" / "seed_000_throughput.csv"]  # a runs table


def _calls_back_up(paths: list[Path]) -> set[tuple[str, str, str]]:
    """``(caller's file, called file, function)`` of each call into a trainperf file already on the stack below the
    caller's, other than from one importer module into another."""
    found = set()

    def watch(frame, event, _):
        called = frame.f_code.co_filename
        if event != "call" or not called.startswith(str(ROOT)):
            return
        below, back = [], frame.f_back
        while back is not None:
            if back.f_code.co_filename.startswith(str(ROOT)):
                below.append(back.f_code.co_filename)
            back = back.f_back
        within_importers = below and all("importers" in Path(f).parts for f in (below[0], called))
        if below and below[0] != called and called in below[1:] and not within_importers:
            found.add((Path(below[0]).name, Path(called).name, frame.f_code.co_name))

    sys.setprofile(watch)
    try:
        load_runs(*paths)
    finally:
        sys.setprofile(None)
    return found


@pytest.mark.parametrize("cache", ["on", "off"])
def test_load_runs_never_calls_back_into_a_file_it_came_through(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRAINPERF_INPUT_CACHE", cache)
    assert _calls_back_up(INPUTS) == set()
