"""Peak memory of a step, in GiB (2**30 bytes).

On GPU: the CUDA caching allocator's peak of allocated bytes since the
previous step (the peak is reset after each reading). On CPU: the peak
resident set size of the process so far (``getrusage``'s ``ru_maxrss``), which
only grows; where ``getrusage`` is missing, the current resident set
(psutil).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

GIB = float(2**30)


def cuda_peak_reader(cuda: Any, device: Any) -> Callable[[], float]:
    """Peak allocated device memory since the last call (GiB). Reads host-side
    allocator statistics: no synchronization."""

    def read() -> float:
        peak = cuda.max_memory_allocated(device)
        cuda.reset_peak_memory_stats(device)
        return peak / GIB

    return read


def host_peak_reader() -> Callable[[], float]:
    """Peak resident set of this process so far (GiB)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        import psutil

        process = psutil.Process()
        return lambda: process.memory_info().rss / GIB
    # ru_maxrss is in KiB on Linux and in bytes on macOS
    unit = 1.0 if sys.platform == "darwin" else 1024.0
    return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / GIB
