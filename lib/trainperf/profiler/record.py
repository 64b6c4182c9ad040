"""One optimizer step as the profiler records it, and its resolution into a line of the steps file.
A step's *window*, and how the phases and the exposed communication fit in it: docs/profiler.md,
"What is measured".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainperf.profiler.clocks import Clock
from trainperf.profiler.comm import CommInterval, comm_seconds, exposed_intervals, overlap
from trainperf.profiler.memory import MemoryReading
from trainperf.schema import PHASES

PHASE_INDEX: dict[str, int] = {name: i for i, name in enumerate(PHASES)}
DATA = PHASE_INDEX["data"]
COMM = PHASE_INDEX["comm"]
CARRIED = ("data", "h2d")
"""Phases that, timed outside any step, count in the next one: its input, fetched and copied ahead."""


@dataclass(slots=True, eq=False)
class StepRecord:
    """Marks and counters of one step until it is resolved: ``phases``, ``(phase index, start, end)`` on the
    step clock; ``data``, ``(start, end)`` of the waits for a batch on the host clock; ``estimate``, a
    sampled window's ``(comm_s, comm_exposed_s)``; ``waiting``, for its window's end; the rest as in the
    steps file's columns."""

    index: int
    warmup: bool
    start: Any
    phases: list[tuple[int, Any, Any]]
    data: list[tuple[float, float]]
    tokens: Any
    samples: Any
    loss: Any
    end: Any = None
    comm: list[CommInterval] = field(default_factory=list)
    micro_steps: int = 0
    memory: MemoryReading = MemoryReading(None, None, None, None)
    host_memory_gb: float | None = None
    energy_j: float | None = None
    out_of_memory: bool = False
    estimate: tuple[float, float] | None = None
    waiting: bool = False

    def marks(self) -> list[Any]:
        """Marks to give back to the clock once resolved (not the end mark: the next step's start)."""
        marks = [self.start]
        for _, start, end in self.phases:
            marks += (start, end)
        for interval in self.comm:
            marks += (interval.start, interval.end) if interval.end is not None else (interval.start,)
        return marks

    def ready(self, clock: Clock) -> bool:
        """Whether every mark of the step can be read without waiting."""
        return not self.waiting and clock.ready(self.end) and all(i.end is None or clock.ready(i.end) for i in self.comm)


def resolve(record: StepRecord, clock: Clock, origin: Any, host_origin: float) -> tuple[list[Any], tuple[Any, ...]]:
    """The step's values in ``rankfile.LINE_COLUMNS`` order, and the arguments of its ``trace.trace_line``
    (intervals as ``(start_s, duration_s)`` since the profiler started)."""
    seconds = clock.seconds
    totals: list[float | None] = [None] * len(PHASES)
    trace_phases = []
    spans: dict[int, list[tuple[float, float]]] = {}
    for index, start, end in record.phases:
        duration = seconds(start, end)
        totals[index] = (totals[index] or 0.0) + duration
        trace_phases.append((PHASES[index], seconds(origin, start), duration))
        spans.setdefault(index, []).append((seconds(origin, start), seconds(origin, end)))
    trace_data = []
    for start, end in record.data:
        totals[DATA] = (totals[DATA] or 0.0) + (end - start)
        trace_data.append((start - host_origin, end - start))
    start_s = seconds(origin, record.start)
    step_s = seconds(record.start, record.end)
    # a broadcast of the buffers before the step began (a forward in a phase outside the steps) is in none
    comm = [(began, seconds(origin, i.end), i.last) for i in record.comm
            if i.end is not None and (began := seconds(origin, i.start)) >= start_s]
    exposed = None
    if comm:
        comm_total, exposed = comm_seconds(comm)
        totals[COMM] = (totals[COMM] or 0.0) + comm_total
        waits = exposed_intervals(comm)
        for index, within in spans.items():  # the phase waited for the communication: its time is not the phase's
            totals[index] -= overlap(within, waits)
    if not comm and record.estimate is not None and record.estimate[0] <= step_s:  # longer than the step: empty
        totals[COMM], exposed = record.estimate
    memory = record.memory
    values = [record.index, record.warmup, start_s, step_s, *totals[:COMM + 1], exposed, *totals[COMM + 1:],
              number(record.tokens), number(record.samples), max(record.micro_steps, 1),
              number(record.loss), memory.peak_gb, memory.reserved_gb, record.host_memory_gb, memory.retries,
              memory.ooms, record.energy_j, record.out_of_memory]
    trace = (record.index, record.warmup, (start_s, step_s), trace_phases,
             [(s, e - s) for s, e, _ in comm], trace_data)
    return values, trace


def on_host(value: Any) -> Any:
    """A CUDA tensor starts its copy to the host now (complete by the step's end mark); a host tensor is
    read now, so that the step kept for its batch holds no tensor and no autograd graph."""
    if value is None or type(value) in (int, float):  # the usual counts: no failed attribute lookups
        return value
    if getattr(value, "is_cuda", False):
        return value.detach().to("cpu", non_blocking=True)
    return number(value) if hasattr(value, "item") else value


def unattributed(phases: list[tuple[int, Any, Any]], data: list[tuple[float, float]],
                 clock: Clock) -> dict[str, float]:
    """Seconds per phase column (``data_s``, ...) of the phases timed after the last step
    (``unattributed_s`` of the steps file's end line)."""
    seconds: dict[str, float] = {}
    for index, start, end in phases:
        name = f"{PHASES[index]}_s"
        seconds[name] = seconds.get(name, 0.0) + clock.seconds(start, end)
    if data:
        seconds["data_s"] = seconds.get("data_s", 0.0) + sum(e - s for s, e in data)
    return seconds


def number(value: Any) -> int | float | None:
    """A counter or loss as a plain number (tensors read on the host)."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value
