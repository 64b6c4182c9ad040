"""A history of accepted baselines: ``trainperf compare --history DIR CANDIDATE``.

``DIR`` holds one entry per accepted baseline — a run folder, a folder of run
folders (repeats), a runs table or a log — ordered by name; entries whose
name starts with ``.`` are left out. ``--accept`` adds a candidate that passed
as ``<UTC time>-<its name>`` (``20261125T212400Z-run``), so that name order is
the order of acceptance; entries of your own sort by their names
(``001-v1.0``, ``002-v1.1``).

The last ``N`` entries (default :data:`LAST`) are the baseline side: their
runs are taken as repeats of one configuration, so their spread, measured
across accepted baselines, is the run-to-run variation the candidate is
judged against (it replaces the assumed
:data:`trainperf.stats.RUN_CV`). Each of their runs is named
``<entry>/<run_id>``: the same run id in two entries (a CI job that names its
run alike each time) stays two runs.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from trainperf.compare.analysis import Side, check_repeats, read_side
from trainperf.errors import DataError

LAST = 5
"""Accepted baselines a candidate is compared with, the latest ones."""


def entries(folder: str | Path) -> list[Path]:
    """The accepted baselines of a history folder, oldest first (by name); none where it does not exist yet."""
    folder = Path(folder)
    if not folder.exists():
        return []
    if not folder.is_dir():
        raise DataError("a history is a folder of accepted baselines, not a file", path=folder)
    return sorted((p for p in folder.iterdir() if not p.name.startswith(".")), key=lambda p: p.name)


def has_baselines(folder: str | Path) -> bool:
    """Whether ``folder`` holds an accepted baseline (False where it does not exist)."""
    return bool(entries(folder))


def read_baselines(folder: str | Path, last: int = LAST, warmup: int = 0) -> tuple[Side, str]:
    """The baseline side made of the last ``last`` accepted baselines of
    ``folder``, and a sentence saying which. DataError when there is none."""
    found = entries(folder)
    chosen = found[-last:]
    if not chosen:
        raise DataError("no accepted baseline yet: give --accept to accept the candidate as the first",
                        path=folder)
    label = f"{folder} (last {len(chosen)} accepted)"
    side = joined([read_side(entry, label=entry.name, warmup=warmup) for entry in chosen], label)
    names = ", ".join(e.name for e in chosen)
    spread = ("their spread measures the run-to-run variation" if len(side.runs) > 1 else
              "a single run: its run-to-run variation is assumed, not measured")
    return side, (f"Baseline: the last {len(chosen)} of {len(found)} accepted baseline(s) in {folder} ({names}), "
                  f"{len(side.runs)} run(s): {spread}.")


def joined(sides: list[Side], label: str) -> Side:
    """One side of the runs of ``sides`` (each an accepted baseline, named by
    its label), each run named ``<label>/<run_id>``; DataError when they are not
    repeats of one configuration."""
    renamed = []
    for side in sides:
        name = {str(r): f"{side.label}/{r}" for r in side.runs["run_id"]}
        renamed.append(replace(side, runs=side.runs.assign(run_id=side.runs["run_id"].astype(str).map(name)),
                               steps={name[r]: f for r, f in side.steps.items()}))
    runs = pd.concat([s.runs for s in renamed], ignore_index=True)
    check_repeats(runs, label)
    with_steps = [s for s in renamed if s.steps]
    steps = {r: f for s in with_steps for r, f in s.steps.items()} if len(with_steps) == len(renamed) else {}
    return Side(label, runs, steps, sum(s.dropped_steps for s in renamed))


def accept(candidate: str | Path, folder: str | Path, when: datetime | None = None) -> Path:
    """Copy ``candidate`` (a file or folder) into the history ``folder`` as
    ``<UTC time>-<its name>`` and return the new entry."""
    candidate, folder = Path(candidate), Path(folder)
    stamp = (when or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = folder / f"{stamp}-{candidate.resolve().name}"
    if target.exists():
        raise DataError("an accepted baseline of this name exists already", path=target)
    folder.mkdir(parents=True, exist_ok=True)
    if candidate.is_dir():
        shutil.copytree(candidate, target)
    else:
        shutil.copy2(candidate, target)
    return target
