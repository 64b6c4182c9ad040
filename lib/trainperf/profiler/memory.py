"""Memory of a step, read on the host after the step's end mark, without a synchronisation (the
columns: docs/profiler.md, "What is measured" and "Memory"). Sizes in GiB (2**30 bytes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any, NamedTuple

GIB = float(2**30)
PEAKS, RETRIES, OOMS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak"), "num_alloc_retries", "num_ooms"
"""The keys of ``torch.cuda.memory_stats`` read each step: peaks (bytes), then counts."""


class MemoryReading(NamedTuple):
    """One step's peak device memory and reserved peak (GiB), and the allocator's retries and
    out-of-memory errors in the step (counts); None where the device does not say."""

    peak_gb: float | None
    reserved_gb: float | None
    retries: int | None
    ooms: int | None


class CudaMemory:
    """The CUDA caching allocator's statistics of ``device`` (host-side, no synchronisation); counts since
    the previous reading."""

    def __init__(self, cuda: Any, device: Any, reset_peak: bool = False) -> None:
        self._cuda = cuda
        self._device = device
        self._reset = reset_peak
        stats = cuda.memory_stats(device)
        self._retries = int(stats.get(RETRIES, 0))
        self._ooms = int(stats.get(OOMS, 0))

    def read(self) -> MemoryReading:
        stats = self._cuda.memory_stats(self._device)
        if self._reset:
            self._cuda.reset_peak_memory_stats(self._device)
        peak, reserved = (stats.get(k) for k in PEAKS)
        retries, ooms = int(stats.get(RETRIES, self._retries)), int(stats.get(OOMS, self._ooms))
        reading = MemoryReading(None if peak is None else peak / GIB, None if reserved is None else reserved / GIB,
                                retries - self._retries, ooms - self._ooms)
        self._retries, self._ooms = retries, ooms
        return reading


class HostPeak:
    """On CPU, the device is the host: the peak resident set of this process so far (GiB; not on
    POSIX, the resident set now), and no allocator counts."""

    def __init__(self) -> None:
        try:
            import resource
        except ImportError:  # not on POSIX
            self._peak = host_memory_reader()
            return
        unit = (1.0 if sys.platform == "darwin" else 1024.0) / GIB  # ru_maxrss: KiB on Linux, bytes on macOS
        self._peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit

    def read(self) -> MemoryReading:
        return MemoryReading(self._peak(), None, None, None)


def host_memory_reader() -> Callable[[], float]:
    """Resident set of this process now (GiB): ``/proc/self/statm`` read through a file kept open
    (about 5 µs), else psutil's."""
    try:
        statm = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        import psutil

        process = psutil.Process()
        return lambda: process.memory_info().rss / GIB
    page = os.sysconf("SC_PAGE_SIZE") / GIB
    return lambda: int(os.pread(statm, 128, 0).split()[1]) * page


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out: torch's ``OutOfMemoryError``, or a ``RuntimeError``
    saying so (older releases, the CPU allocator)."""
    import torch

    if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def device_memory_gb(torch: Any, device: Any) -> float | None:
    """The memory of ``device`` (GiB): what a GPU's driver lets PyTorch use, the host's on CPU; None where
    unknown."""
    with suppress(Exception):
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory / GIB
        if device.type == "cpu":
            import psutil

            return psutil.virtual_memory().total / GIB
    return None
