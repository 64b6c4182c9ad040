"""Clocks that time the phases of a step (docs/profiler.md, "Clocks"): a *mark* is a point in time,
on CPU a ``perf_counter`` reading, on GPU a CUDA event readable once the device reached it (``ready``).
The profiler resolves a step's marks once the last one is ready, several steps at a time: it never
synchronizes per phase.
"""

from __future__ import annotations

import time
from time import perf_counter
from typing import Any


class HostClock:
    """Wall clock of the host process (``time.perf_counter``)."""

    def mark(self) -> float:
        return perf_counter()

    def ready(self, mark: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def synchronize(self) -> None:
        return None

    def release(self, marks: list[float]) -> None:
        return None


class CudaClock:
    """Device time from CUDA events on the current stream of ``device`` (in a DDP hook's completion
    callback, the stream that waits for the all-reduce), pooled and reused once read (``release``)."""

    def __init__(self, cuda: Any, device: Any) -> None:
        self._cuda = cuda
        self._device = device
        self._pool: list[Any] = []

    def mark(self) -> Any:
        try:
            event = self._pool.pop()
        except IndexError:
            event = self._cuda.Event(enable_timing=True)
        event.record(self._cuda.current_stream(self._device))
        return event

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds

    def synchronize(self) -> None:
        self._cuda.synchronize(self._device)

    def release(self, marks: list[Any]) -> None:
        self._pool.extend(marks)


Clock = HostClock | CudaClock


def unix_ns_at(mark: float) -> int:
    """The Unix time (ns) at ``mark``, a ``perf_counter`` reading: the closest of three back-to-back pairs
    of readings of both clocks (within a few µs)."""
    pairs = []
    for _ in range(3):
        before = perf_counter()
        wall = time.time_ns()
        pairs.append((perf_counter() - before, wall, before))
    _, wall, at = min(pairs)
    return wall - round((at - mark) * 1e9)
