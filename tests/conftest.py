"""Shared test setup: what the profiler measures about this machine (the CPU
peak) is cached in a folder of this test session, never in the user's cache:
a peak measured while the tests load the machine would understate it."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def machine_cache(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trainperf-cache"
    folder.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("TRAINPERF_CACHE_DIR")
    os.environ["TRAINPERF_CACHE_DIR"] = str(folder)
    yield folder
    if saved is None:
        os.environ.pop("TRAINPERF_CACHE_DIR", None)
    else:
        os.environ["TRAINPERF_CACHE_DIR"] = saved
