"""One run per folder: a profiler never writes into a folder that holds another run.

Rank 0 looks for another run's files (``manifest.json``, ``steps-rank*.jsonl``,
``events-rank*.jsonl``, ``trace-rank*.jsonl``) before anything is written, removes them when asked to
(``overwrite=True``), and tells every rank its decision through the process
group, so ranks of one job that start together never mistake each other's
files for another run's. Without a process group only rank 0 looks, and in a
job of several ranks it looks only at the manifest and its own files (the
other ranks may already be writing theirs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.runfolder.eventfile import EVENTS_FILE
from trainperf.runfolder.manifest import MANIFEST_FILE, TRACE_FILE
from trainperf.runfolder.rankfile import STEPS_FILE

RUN_FILES = (MANIFEST_FILE, STEPS_FILE.format(rank="*"), EVENTS_FILE.format(rank="*"), TRACE_FILE.format(rank="*"))
"""Glob patterns of the files a run writes into its folder."""


class RunFolderInUse(FileExistsError):
    """The run folder already holds another run's files."""


def run_files(run_dir: Path) -> list[Path]:
    """The files of a run in ``run_dir`` (none when it does not exist)."""
    if not run_dir.is_dir():
        return []
    return sorted({p for pattern in RUN_FILES for p in run_dir.glob(pattern)})


def claim(run_dir: Path, overwrite: bool, dist: Any, rank: int, world_size: int) -> None:
    """Make ``run_dir`` this run's: on rank 0, refuse a folder holding another
    run's files (:class:`RunFolderInUse`, naming the folder and the files) or,
    with ``overwrite``, remove them. Every rank of an initialized process group
    must call it (a broadcast); each then raises the same error."""
    collective = world_size > 1 and dist is not None and dist.is_available() and dist.is_initialized()
    problem = None
    if rank == 0:
        found = run_files(run_dir)
        if world_size > 1 and not collective:
            ours = {MANIFEST_FILE, STEPS_FILE.format(rank=0), EVENTS_FILE.format(rank=0), TRACE_FILE.format(rank=0)}
            found = [p for p in found if p.name in ours]
        if found and overwrite:
            for path in found:
                path.unlink()
        elif found:
            names = ", ".join(p.name for p in found[:4]) + (", ..." if len(found) > 4 else "")
            problem = (f"{run_dir} already holds a run ({names}): write this run to a new folder, "
                       f"or pass overwrite=True to StepProfiler to replace it")
    if collective:
        decision = [problem]
        dist.broadcast_object_list(decision, src=0)
        problem = decision[0]
    if problem:
        raise RunFolderInUse(problem)
