"""The CPU's measured matmul peak for a CPU run's MFU, measured once per machine.

A CPU has no datasheet peak in trainperf's table, so a CPU run's MFU needs
the rate this machine reaches (:func:`trainperf.profiler.peak_flops.measure_peak_flops`,
about a second). It is measured once for each CPU model, core count, torch
version, thread count and dtype, and kept in ``peak-flops.json`` in the cache
folder (``$TRAINPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainperf``, else
``~/.cache/trainperf``); later runs read it from there.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from trainperf.cache import cache_dir, private_dir
from trainperf.runfolder.manifest import write_json

CACHE_FILE = "peak-flops.json"
DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""torch dtype measured for each precision (fp32 when the run names none)."""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_peak(precision: str | None) -> dict[str, Any]:
    """This machine's measured CPU peak for a run at ``precision`` with
    torch's current thread count: ``{"tflops", "dtype", "threads", "cpu",
    "cores", "torch", "cached"}`` (TFLOP/s per process). Measured on the first
    call for its key, read from the cache afterwards."""
    import torch

    from trainperf.profiler.peak_flops import measure_peak_flops

    dtype = DTYPES.get(str(precision or "fp32").lower(), "float32")
    facts = {"dtype": dtype, "threads": torch.get_num_threads(), "cpu": cpu_model(),
             "cores": os.cpu_count(), "torch": torch.__version__}
    key = "|".join(str(facts[k]) for k in ("cpu", "cores", "torch", "threads", "dtype"))
    path = cache_dir() / CACHE_FILE
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if isinstance(cache.get(key), (int, float)):
        return {"tflops": float(cache[key]), **facts, "cached": True}
    tflops = measure_peak_flops(getattr(torch, dtype), seconds=1.0) / 1e12
    try:
        private_dir(path.parent)
        write_json(path, {**cache, key: tflops})
    except OSError:
        pass  # an unwritable cache costs a second per run, nothing else
    return {"tflops": tflops, **facts, "cached": False}
