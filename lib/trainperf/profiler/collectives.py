"""Communication of strategies that issue their own collectives (FSDP, any collective), from short
sampled ``torch.profiler`` windows: gloo's ranges on CPU, NCCL's kernels on GPU (docs/profiler.md,
"Communication under FSDP (and any collective)"). ``step_profiler.py`` ties the windows to the steps.
"""

from __future__ import annotations

from contextlib import suppress
from time import perf_counter, thread_time
from typing import Any

from trainperf.profiler.comm import merged, overlap, union_length

DEFAULT_EVERY = 100
"""Fewest steps between the starts of two sampled windows."""
DEFAULT_STEPS = 2
"""Steps per sampled window."""
BUDGET = 0.0025
"""Largest share of the run's time a window may cost (its steps' slowdown under ``torch.profiler``
and the reading of its records): a quarter of the profiler's 1 % target, which the rest of its work
per step shares (about 120 µs a step in a real loop on a 2-core CPU machine: the target holds from
steps of about 16 ms; docs/profiler.md, "Overhead")."""


def clocks() -> tuple[float, float]:
    """Wall clock and the calling (training) thread's CPU time (s)."""
    return perf_counter(), thread_time()


def is_collective(name: str, on_device: bool) -> bool:
    """Whether a profiler record is a gloo worker's ``gloo:...`` range (host) or an NCCL kernel (device)."""
    return ("nccl" in name.lower()) if on_device else name.startswith("gloo:")


def exposed_length(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Length of the union of ``comm`` not covered by the union of ``compute``."""
    return union_length(comm) - overlap(merged(comm), merged(compute))


def window_seconds(events: list[tuple[str, bool, int, float, float]], span: tuple[float, float] | None,
                   thread: int | None) -> tuple[float, float]:
    """``(comm_s, comm_exposed_s)`` of a window from records ``(name, on_device, thread, start_us, end_us)``.
    ``span``: the sampled steps' host time (µs), to which host records are clipped (None: no clipping).
    Compute: on the host, ``thread``'s ``aten::`` ops; on the device every other record."""
    on_device = any(d and is_collective(n, True) for n, d, _, _, _ in events)
    comm, compute = [], []
    for name, device, tid, start, end in events:
        if device != on_device:
            continue
        if span is not None and not device:
            start, end = max(start, span[0]), min(end, span[1])
            if end <= start:
                continue
        if is_collective(name, device):
            comm.append((start, end))
        elif device or (tid == thread and name.startswith("aten::")):
            compute.append((start, end))
    return union_length(comm) / 1e6, exposed_length(comm, compute) / 1e6


STEP_RANGE = "trainperf/step"
DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
"""Kineto activity types of the device records that are work (NCCL's collectives are kernels too);
the others (``record_function`` ranges, ``cuda_sync`` waits, events) are not."""


def is_device_work(event: Any) -> bool:
    """Whether a Kineto device record is work (:data:`DEVICE_WORK`; without an activity type, anything but
    a ``record_function`` range)."""
    if hasattr(event, "activity_type"):
        return event.activity_type() in DEVICE_WORK
    return not getattr(event, "is_user_annotation", lambda: False)()


def kineto_records(profile: Any) -> list[tuple[str, bool, int, float, float]]:
    """``(name, on_device, thread, start_us, end_us)`` of every host record and device work of a stopped
    ``torch.profiler.profile``, from Kineto's raw results (``profile.events()`` takes a second to build)."""
    results = getattr(getattr(profile, "profiler", None), "kineto_results", None)
    if results is not None and hasattr(results, "events"):
        records = []
        for e in results.events():
            on_device = str(e.device_type()).endswith("CUDA")
            if on_device and not is_device_work(e):
                continue
            records.append((e.name(), on_device, e.start_thread_id(), e.start_ns() / 1e3,
                            (e.start_ns() + e.duration_ns()) / 1e3))
        return records
    return [(e.name, str(e.device_type).endswith("CUDA"), e.thread, e.time_range.start, e.time_range.end)
            for e in profile.events() if not (str(e.device_type).endswith("CUDA") and e.is_user_annotation)]


class CollectiveSampler:
    """Runs ``torch.profiler`` over ``steps`` steps every ``every`` steps or more from step ``first``, each
    window giving a per-step estimate of ``(comm_s, comm_exposed_s)``."""

    def __init__(self, torch: Any, cuda: bool, warmup_steps: int, every: int = DEFAULT_EVERY,
                 steps: int = DEFAULT_STEPS) -> None:
        if every < 1 or not 1 <= steps <= every:
            raise ValueError(f"sampling {steps} steps every {every}: need 1 <= steps <= every")
        self._torch = torch
        self._cuda = cuda
        self.every, self.steps = every, steps
        self.first = warmup_steps - steps if warmup_steps > steps else warmup_steps
        self._profile: Any = None
        self.estimate: tuple[float, float] | None = None
        self._start_index: int | None = None
        self._started_at = (0.0, 0.0)
        self.window_s = (0.0, 0.0)
        """The last window's host time, reading its records included (wall s, training thread's CPU s)."""
        self._ended_at = (0.0, 0.0)

    def describe(self) -> str:
        """The sampling, in words (for the manifest)."""
        return (f"torch.profiler windows of {self.steps} step(s) every {self.every} steps or more from step "
                f"{self.first} (a window costs at most {BUDGET:.2%} of the time between windows); "
                "each step carries the latest window's mean, none where that is longer than the step")

    def due(self, index: int) -> bool:
        """Whether a window starts with step ``index``."""
        if self._start_index is None:
            return index >= self.first
        since_end = index - (self._start_index + self.steps)
        if index - self._start_index < self.every or since_end < 1:
            return False
        # the wall clock first: the CPU clock, a system call that costs several µs after a step's work has
        # cooled the caches, is read only on the steps where the wall clock already allows a window
        for clock, ended, window in zip((perf_counter, thread_time), self._ended_at, self.window_s):
            elapsed = clock() - ended
            if window - self.steps * elapsed / since_end > BUDGET * elapsed:
                return False
        return True

    def last_of_window(self, index: int) -> bool:
        """Whether step ``index`` ends the open window."""
        return self.active and index == self._start_index + self.steps - 1

    @property
    def active(self) -> bool:
        return self._profile is not None

    def start(self, index: int) -> bool:
        """Start a window with step ``index``; False where the user's own torch.profiler runs."""
        torch = self._torch
        if torch.autograd.profiler._is_profiler_enabled:
            return False
        self._start_index, self._started_at = index, clocks()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self._cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profile = torch.profiler.profile(activities=activities)
        self._profile.start()
        return True

    def stop(self) -> tuple[float, float]:
        """End the window; return and remember its per-step estimate."""
        profile = self._profile
        if self._cuda:
            self._torch.cuda.synchronize()
        profile.stop()
        self._profile = None
        records = kineto_records(profile)
        if self._cuda and not any(on_device for _, on_device, _, _, _ in records):
            raise RuntimeError("torch.profiler recorded no work on the GPU (is CUPTI available to this process?)")
        steps = [r for r in records if r[0] == STEP_RANGE and not r[1]]
        span = (min(s[3] for s in steps), max(s[4] for s in steps)) if steps else None
        comm, exposed = window_seconds(records, span, steps[0][2] if steps else None)  # the training thread
        count = max(len(steps), 1)
        self.estimate = (comm / count, exposed / count)
        del profile, records, steps  # freeing thousands of records is part of the window's cost
        self._ended_at = clocks()
        self.window_s = (self._ended_at[0] - self._started_at[0], self._ended_at[1] - self._started_at[1])
        return self.estimate

    def cancel(self) -> None:
        """Stop a window without reading it (sampling or profiling stopped); never raises."""
        profile, self._profile = self._profile, None
        with suppress(Exception):
            if profile is not None:
                profile.stop()
