"""What a rank writes into its run folder, and when: one run per folder, the steps written in batches,
and the last batch at exit or on SIGTERM and SIGINT (docs/profiler.md, "The run folder").
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from trainperf.profiler.environment import grouped
from trainperf.profiler.record import StepRecord, resolve
from trainperf.profiler.trace import trace_line
from trainperf.runfolder import eventfile, rankfile
from trainperf.runfolder.eventfile import EVENTS_FILE
from trainperf.runfolder.linefile import LineFile
from trainperf.runfolder.manifest import MANIFEST_FILE, TRACE_FILE
from trainperf.runfolder.rankfile import STEPS_FILE

WRITE_EVERY_STEPS = 100
"""Steps kept in memory at most before they are written (one write per file)."""
WRITE_EVERY_S = 1.0
"""Seconds after which the steps kept in memory are written, checked when a step ends."""
MAX_PENDING_STEPS = 256
"""On GPU, steps wait for their CUDA events; past this many the device is synchronized once and they
are all written, which bounds memory if the host runs far ahead of the device."""
RUN_FILES = (MANIFEST_FILE, STEPS_FILE.format(rank="*"), EVENTS_FILE.format(rank="*"), TRACE_FILE.format(rank="*"))
"""Glob patterns of the files a run writes into its folder."""
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunFolderInUse(FileExistsError):
    """The run folder already holds another run's files."""


def claim(run_dir: Path, overwrite: bool, dist: Any, rank: int, world_size: int) -> None:
    """Make ``run_dir`` this run's: rank 0 refuses a folder holding another run's files
    (:class:`RunFolderInUse`) or, with ``overwrite``, removes them. A collective in a process group (every
    rank raises the same error); without one, rank 0 of several looks only at the manifest and its own
    files (the other ranks may already be writing theirs)."""
    collective = world_size > 1 and grouped(dist)
    problem = None
    if rank == 0:
        found = sorted({p for pattern in RUN_FILES for p in run_dir.glob(pattern)}) if run_dir.is_dir() else []
        if world_size > 1 and not collective:
            ours = {pattern.replace("*", "0") for pattern in RUN_FILES}
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


class RankFiles:
    """One rank's steps file, trace file (with ``trace``) and events file (opened with the first phase
    outside the steps). ``data_clock``: the clock of the waits for data, for ``trace.trace_line``."""

    def __init__(self, run_dir: Path, rank: int, trace: bool, data_clock: str) -> None:
        self._run_dir, self._rank, self._data_clock = run_dir, rank, data_clock
        self.steps = LineFile(run_dir / STEPS_FILE.format(rank=rank))
        self._trace = LineFile(run_dir / TRACE_FILE.format(rank=rank)) if trace else None
        self._events: LineFile | None = None

    def write_ready(self, pending: deque[StepRecord], outside: deque[tuple[str, Any, Any]], clock: Any,
                    origin: Any, host_origin: float, wait: bool) -> None:
        """Write the phases outside the steps and the ``pending`` steps whose marks are ready (all of them
        when ``wait``: one synchronize), one write per file. Phases first: a step may give back the mark a
        phase ends at."""
        if wait and (pending or outside):
            clock.synchronize()
        while outside and clock.ready(outside[0][2]):
            name, start, end = outside.popleft()
            if self._events is None:
                self._events = LineFile(self._run_dir / EVENTS_FILE.format(rank=self._rank))
                self._events.write(eventfile.header_line(self._rank))
            self._events.write(eventfile.phase_line(name, clock.seconds(origin, start), clock.seconds(start, end)))
        steps, traces, trace_file, data_clock = [], [], self._trace, self._data_clock
        while pending and pending[0].ready(clock):
            record = pending.popleft()
            values, trace = resolve(record, clock, origin, host_origin)
            steps.append(rankfile.step_line(values))
            if trace_file is not None:
                traces.append(trace_line(*trace, data_clock=data_clock))
            clock.release(record.marks())
        if steps:
            self.steps.write(b"".join(steps))
        if traces:
            assert trace_file is not None
            trace_file.write(b"".join(traces))

    def close(self) -> None:
        """Close every file, ignoring errors (profiling has stopped)."""
        for file in (self.steps, self._trace, self._events):
            if file is not None:
                with suppress(OSError):
                    file.close()


class ExitFlush:
    """Call ``flush`` at exit and on the signals of :data:`SIGNALS`, in this process only (not in a
    forked data-loader worker), until :meth:`remove`; the handlers already installed are chained
    (docs/profiler.md, "The run folder"), and signals outside the main thread left alone."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}
        atexit.register(self._at_exit)
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous is not None:  # None: a handler set from C, which could not be chained
                    self._previous[signum] = previous
                    signal.signal(signum, self._on_signal)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:
            self._flush()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._at_exit()
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def remove(self) -> None:
        """Remove the exit hook and restore each signal's previous handler, unless another handler replaced
        this one since (it then chains to this one, which only passes the signal on)."""
        atexit.unregister(self._at_exit)
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous)
        self._flush = lambda: None
