"""The frames every dataset of the project reads into, frozen so that a change
of the data layer is checked against what the previous one gave.

For each input the tests and reports read (``data/``, ``tests/data/``), this
module computes what trainperf makes of it: the runs table (``load_runs``),
its derived metrics (``derive``), the steps table where the input has one
(``load_steps``), the steps rows of a log (``import_path(...).steps``) and the warnings raised while reading. ``freeze.py`` writes
them under ``tests/frozen/`` once; ``test_frozen_frames.py`` reads every
input again and compares (1e-9 relative, same notes and warnings).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

import trainperf
from trainperf.importers import import_path

ROOT = Path(__file__).resolve().parents[2]
FROZEN = Path(__file__).resolve().parent / "data"
SIDE_FILES = (".trainperf.yaml", ".md")


def inputs() -> list[Path]:
    """Every input read by the tests and reports, relative to the project root:
    each runs table, steps table and log of ``data/`` and ``tests/data/``,
    and the folders that hold its run folders."""
    found = sorted(p for p in (ROOT / "data/reference").glob("*.csv") if p.name != "claims.csv")  # not runs
    for folder in ("data/runs", "tests/data/measured_runs"):
        found.append(ROOT / folder)
    for folder in ("tests/data/importers", "tests/data/seeds", "tests/data/report_tiny"):
        found += sorted(p for p in (ROOT / folder).iterdir()
                        if p.is_file() and not p.name.endswith(SIDE_FILES) or p.name == "batch_sweep.md")
    return [p.relative_to(ROOT) for p in found]


def name(path: Path) -> str:
    """The frozen files' name for an input."""
    return str(path).replace("/", "__")


def frames(path: Path) -> dict[str, object]:
    """What trainperf makes of input ``path`` (relative to the root): frames
    ``runs``, ``derived``, ``steps`` (where readable) and ``warnings`` (a list of
    ``category: message``), with paths shown relative to the root."""
    out: dict[str, object] = {}
    caught_all: list[str] = []
    runs = _read(trainperf.load_runs, path, "runs", out, caught_all)
    if runs is not None:
        with _recording(caught_all):
            out["derived"] = trainperf.derive(runs)
    _read(trainperf.load_steps, path, "steps", out, caught_all)
    if (ROOT / path).is_file() and "runs" in out and (out["runs"].get("extra_log_format") is not None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            log_steps = import_path(ROOT / path).steps
        if log_steps is not None:
            out["log_steps"] = log_steps
    out["warnings"] = caught_all
    return out


def _read(load, path: Path, key: str, out: dict[str, object], caught_all: list[str]) -> pd.DataFrame | None:
    """``load(path)`` into ``out[key]`` (attrs dropped), or its DataError's message into
    ``out[key + "_error"]``; the warnings it raised appended to ``caught_all``."""
    frame = None
    with _recording(caught_all):
        try:
            frame = load(ROOT / path)
        except trainperf.DataError as exc:
            out[f"{key}_error"] = relative(str(exc))
        else:
            frame.attrs = {}
            out[key] = frame
    return frame


@contextmanager
def _recording(caught_all: list[str]) -> Iterator[None]:
    """Append every warning raised inside to ``caught_all`` as ``category: message``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    caught_all += [f"{w.category.__name__}: {relative(str(w.message))}" for w in caught]


def relative(text: str) -> str:
    """``text`` with the project root's path taken out (frozen on one machine, read on another)."""
    return text.replace(f"{ROOT}/", "")


def as_text_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the paths in ``source`` relative to the root."""
    if "source" in frame:
        frame = frame.assign(source=frame["source"].astype("string").str.replace(f"{ROOT}/", "", regex=False))
    return frame


def write(path: Path) -> None:
    """Freeze the frames of input ``path`` under :data:`FROZEN`."""
    FROZEN.mkdir(parents=True, exist_ok=True)
    found = frames(path)
    meta = {"input": str(path), "warnings": found["warnings"],
            **{k: found[k] for k in ("runs_error", "steps_error") if k in found}}
    for key in ("runs", "derived", "steps", "log_steps"):
        if key in found:
            as_text_columns(found[key]).to_parquet(FROZEN / f"{name(path)}.{key}.parquet")
    (FROZEN / f"{name(path)}.json").write_text(json.dumps(meta, indent=1) + "\n")
