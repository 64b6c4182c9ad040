"""A history of accepted baselines, one entry each in a folder, oldest first by name: ``trainperf compare --history
DIR CANDIDATE`` (docs/statistics.md, "A baseline history")."""

from __future__ import annotations

import shutil
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


def read_baselines(folder: str | Path, last: int = LAST, warmup: int = 0) -> tuple[Side, str]:
    """The baseline side made of the runs of the last ``last`` accepted baselines of ``folder``, each run named
    ``<entry>/<run_id>`` (the same run id in two entries stays two runs), and a sentence saying which. DataError
    when there is none, or when their runs are not repeats of one configuration."""
    found = entries(folder)
    chosen = found[-last:]
    if not chosen:
        raise DataError("no accepted baseline yet: give --accept to accept the candidate as the first", path=folder)
    label = f"{folder} (last {len(chosen)} accepted)"
    sides = [read_side(entry, label=entry.name, warmup=warmup) for entry in chosen]
    names = [{str(r): f"{s.label}/{r}" for r in s.runs["run_id"]} for s in sides]
    runs = pd.concat([s.runs.assign(run_id=s.runs["run_id"].astype(str).map(name)) for s, name in zip(sides, names)],
                     ignore_index=True)
    check_repeats(runs, label)
    steps = ({name[r]: f for s, name in zip(sides, names) for r, f in s.steps.items()}
             if all(s.steps for s in sides) else {})
    side = Side(label, runs, steps, sum(s.dropped_steps for s in sides))
    spread = ("their spread measures the run-to-run variation" if len(runs) > 1 else
              "a single run: its run-to-run variation is assumed, not measured")
    return side, (f"Baseline: the last {len(chosen)} of {len(found)} accepted baseline(s) in {folder} "
                  f"({', '.join(e.name for e in chosen)}), {len(runs)} run(s): {spread}.")


def accept(candidate: str | Path, folder: str | Path) -> Path:
    """Copy ``candidate`` (a file or folder) into the history ``folder`` as ``<UTC time>-<its name>``
    (``20261125T212400Z-run``: name order is the order of acceptance) and return the new entry."""
    candidate, folder = Path(candidate), Path(folder)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = folder / f"{stamp}-{candidate.resolve().name}"
    if target.exists():
        raise DataError("an accepted baseline of this name exists already", path=target)
    folder.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if candidate.is_dir() else shutil.copy2)(candidate, target)
    return target
