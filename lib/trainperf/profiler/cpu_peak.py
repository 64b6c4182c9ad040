"""The CPU's measured matmul peak for a CPU run's MFU, measured on a quiet machine and kept per
machine in ``peak-flops.json`` in the cache folder (docs/profiler.md, "CPU peak" under "Usage").
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

from trainperf.reading.cache import cache_dir, private_dir
from trainperf.invariants import peaks_consistent
from trainperf.runfolder.manifest import write_json

CACHE_FILE = "peak-flops.json"
DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""torch dtype measured for each precision (fp32 when the run names none)."""
Measure = Callable[[str, int], float]
"""Measures the peak (TFLOP/s) of a dtype name at a thread count."""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's)."""
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def quiet(loads: tuple[float, float], cores: int, threads: int) -> bool:
    """Whether a measurement on ``threads`` threads had the cores to itself (``loads``: the 1-minute load
    averages before and after)."""
    return max(loads) + threads <= cores


def _torch_measure(dtype: str, threads: int) -> float:
    import torch

    from trainperf.profiler.peak_flops import measure_peak_flops
    return measure_peak_flops(getattr(torch, dtype), seconds=1.0, threads=threads) / 1e12


def cpu_peak(precision: str | None, *, threads: int | None = None, measure: Measure | None = None,
             load: Callable[[], float] | None = None, cores: int | None = None) -> dict[str, Any]:
    """This machine's CPU peak for a run at ``precision`` with ``threads`` (default: torch's):
    ``{"tflops", "dtype", "threads", "cpu", "cores", "torch", "cached", "quiet", "loads", "source"}``
    (TFLOP/s per process; ``source``: how it was got, in words). ``measure``, ``load`` and ``cores``
    stand in for the matmul timing, the load average and ``os.cpu_count()``."""
    import torch

    dtype = DTYPES.get(str(precision or "fp32").lower(), "float32")
    facts = {"dtype": dtype, "threads": threads or torch.get_num_threads(), "cpu": cpu_model(),
             "cores": cores or os.cpu_count() or 1, "torch": torch.__version__}
    path = cache_dir() / CACHE_FILE
    cache = {}
    with suppress(OSError, ValueError):
        cache = json.loads(path.read_text())
    cache = cache if isinstance(cache, dict) else {}
    n, kept = facts["threads"], {}
    peak = partial(_peak, facts=facts, measure=measure or _torch_measure,
                   load=load or (lambda: os.getloadavg()[0]), kept=kept)
    one = peak(cache, 1)
    used = one if n == 1 else peak(cache, n)
    if used["cached"] and not peaks_consistent({1: one["tflops"], n: used["tflops"]}):
        used = peak({}, n)  # an impossible cached peak: measured again
    if not peaks_consistent({1: one["tflops"], n: used["tflops"]}):
        kept = {key: entry for key, entry in kept.items() if entry["threads"] == 1}  # not the n-thread one
        used = {**one, "cached": False, "source": f"the 1-thread peak ({one['source']}): the {n}-thread one "
                                                  f"measured {used['tflops']:.4g} TFLOP/s, below it, which cannot be"}
    if kept:
        with suppress(OSError):  # an unwritable cache costs a measurement per run, nothing else
            private_dir(path.parent)
            write_json(path, {**cache, **kept})
    return {**facts, **used, "threads": n}


def _peak(cache: dict[str, Any], threads: int, *, facts: dict[str, Any], measure: Measure,
          load: Callable[[], float], kept: dict[str, Any]) -> dict[str, Any]:
    """The peak at ``threads``: the cached quiet measurement, else a new one (its cache entry put in
    ``kept`` where it was measured on a quiet machine)."""
    key = "|".join(map(str, (facts["cpu"], facts["cores"], facts["torch"], threads, facts["dtype"])))
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("quiet") is True and isinstance(entry.get("tflops"), (int, float)) \
            and entry["tflops"] > 0:
        return {"tflops": float(entry["tflops"]), "cached": True, "quiet": True, "loads": entry.get("loads"),
                "source": f"measured on this machine on a quiet machine {_words(entry)}, read from the cache"}
    before = load()
    tflops = measure(facts["dtype"], threads)
    loads = (before, load())
    calm = quiet(loads, facts["cores"], threads)
    entry = {"tflops": tflops, "quiet": calm, "loads": list(loads), "threads": threads,
             "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if calm:
        kept[key] = entry
    how = "on a quiet machine" if calm else "under load"
    return {"tflops": tflops, "cached": False, "quiet": calm, "loads": list(loads),
            "source": f"measured on this machine {how} {_words(entry)}" + ("" if calm else ": not cached; the peak "
                                                                                      "may be too low and MFU too high")}


def _words(entry: dict[str, Any]) -> str:
    """``(1-minute load 0.4 → 0.6, 4 threads)``: the conditions of a measurement."""
    loads = entry.get("loads") or [float("nan")] * 2
    return f"(1-minute load {loads[0]:.2f} → {loads[1]:.2f}, {entry.get('threads')} thread(s))"
