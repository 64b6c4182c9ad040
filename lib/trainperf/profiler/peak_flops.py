"""A device's dense matmul rate, measured: the peak of a CPU, which has no datasheet figure in
``trainperf.hardware``, and a check of an accelerator's.
"""

from __future__ import annotations

import math
import time
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def measure_peak_flops(dtype: torch.dtype | None = None, n: int | None = None, seconds: float = 1.0,
                       device: str | torch.device = "cpu", threads: int | None = None) -> float:
    """Measured dense matmul rate in FLOP/s (not TFLOP/s; a multiply-add counts 2): the best of at least
    three timed ``n × n`` products of ``dtype`` (default ``torch.float32``) over about ``seconds``
    (docs/hardware.md). ``n`` defaults to 1024 on CPU and 8192 on CUDA (large enough to approach the
    tensor-core peak); ``threads``: torch's intra-op threads while measuring. Other load on the machine
    lowers the result; the best-of-samples rule limits that.
    """
    import torch

    dtype = dtype or torch.float32
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("measure_peak_flops: a CUDA device was requested but CUDA is not available")
    size = n or (8192 if target.type == "cuda" else 1024)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        generator = torch.Generator(device=target).manual_seed(0)
        a = torch.randn(size, size, dtype=dtype, device=target, generator=generator)
        b = torch.randn(size, size, dtype=dtype, device=target, generator=generator)
        out = torch.empty(size, size, dtype=dtype, device=target)
        first = min(_mm_seconds(torch, target, a, b, out, 1) for _ in range(2))
        reps = max(1, int(seconds / 10 / first)) if target.type == "cuda" else 1
        best, spent, samples = math.inf, 0.0, 0
        while samples < 3 or spent < seconds:
            elapsed = _mm_seconds(torch, target, a, b, out, reps)
            best, spent, samples = min(best, elapsed / reps), spent + elapsed, samples + 1
    finally:
        if threads is not None:
            torch.set_num_threads(saved_threads)
    return 2.0 * size**3 / best


def _mm_seconds(torch: ModuleType, target: torch.device, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                reps: int) -> float:
    """Seconds ``reps`` products ``a @ b`` take on ``target`` (on CUDA, between events after a synchronize)."""
    if target.type != "cuda":
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        return time.perf_counter() - start
    with torch.cuda.device(target):
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1000.0
