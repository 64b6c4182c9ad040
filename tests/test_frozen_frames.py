"""Every dataset of the project reads into the frames frozen in
``tests/frozen/data`` (``tests/frozen/freeze.py`` wrote them with the data
layer before step intervals, the Parquet store and Dask): the same runs,
derived metrics, steps, notes and warnings, to 1e-9 relative."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).with_name("frozen")))
from frames import FROZEN, as_text_columns, frames, inputs, name  # noqa: E402

KINDS = ("runs", "derived", "steps", "log_steps")


@pytest.mark.parametrize("path", inputs(), ids=str)
def test_an_input_reads_into_its_frozen_frames(path):
    frozen = json.loads((FROZEN / f"{name(path)}.json").read_text())
    found = frames(path)
    for key in ("runs_error", "steps_error"):
        assert found.get(key) == frozen.get(key), key
    assert found["warnings"] == frozen["warnings"]
    for kind in KINDS:
        stored = FROZEN / f"{name(path)}.{kind}.parquet"
        assert (kind in found) == stored.exists(), kind
        if kind in found:
            pd.testing.assert_frame_equal(as_text_columns(found[kind]).reset_index(drop=True),
                                          pd.read_parquet(stored), check_dtype=False, check_like=True, rtol=1e-9,
                                          obj=f"{path}: {kind}")


def test_every_input_is_frozen():
    assert sorted(f"{name(p)}.json" for p in inputs()) == sorted(p.name for p in FROZEN.glob("*.json"))
