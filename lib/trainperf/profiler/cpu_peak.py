"""The CPU's measured matmul peak for a CPU run's MFU, measured on a quiet machine and kept per
machine in ``peak-flops.json`` in the cache folder (docs/profiler.md, "CPU peak" under "Usage").
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from collections.abc import Callable
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
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def quiet(loads: tuple[float, float], cores: int, threads: int) -> bool:
    """Whether a measurement on ``threads`` threads had the cores to itself: the larger 1-minute load average
    of before and after it (``loads``), plus ``threads``, is at most ``cores``."""
    return max(loads) + threads <= cores


def _torch_measure(dtype: str, threads: int) -> float:
    import torch

    from trainperf.profiler.peak_flops import measure_peak_flops
    return measure_peak_flops(getattr(torch, dtype), seconds=1.0, threads=threads) / 1e12


def cpu_peak(precision: str | None, *, threads: int | None = None, measure: Measure | None = None,
             load: Callable[[], float] | None = None, cores: int | None = None) -> dict[str, Any]:
    """This machine's CPU peak for a run at ``precision`` with ``threads`` (default: torch's):
    ``{"tflops", "dtype", "threads", "cpu", "cores", "torch", "cached", "quiet", "loads", "source"}``
    (TFLOP/s per process; ``loads``: the 1-minute load averages before and after; ``source``: how it
    was got, in words). ``measure``, ``load`` and ``cores`` stand in for the matmul timing, the load
    average and ``os.cpu_count()``."""
    import torch

    measure = measure or _torch_measure
    load = load or (lambda: os.getloadavg()[0])
    dtype = DTYPES.get(str(precision or "fp32").lower(), "float32")
    facts = {"dtype": dtype, "threads": threads or torch.get_num_threads(), "cpu": cpu_model(),
             "cores": cores or os.cpu_count() or 1, "torch": torch.__version__}
    path = cache_dir() / CACHE_FILE
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    cache = cache if isinstance(cache, dict) else {}
    n = facts["threads"]
    one = _peak(cache, {**facts, "threads": 1}, measure, load)
    used = one if n == 1 else _peak(cache, {**facts, "threads": n}, measure, load)
    if used["cached"] and not peaks_consistent({1: one["tflops"], n: used["tflops"]}):
        used = _peak({}, {**facts, "threads": n}, measure, load)  # an impossible cached peak: measured again
    fresh = [p for p in (one, used) if not p["cached"] and p["quiet"]]
    if not peaks_consistent({1: one["tflops"], n: used["tflops"]}):
        fresh = [p for p in fresh if p is one]  # the n-thread one is not kept
        used = {**one, "cached": False, "source": f"the 1-thread peak ({one['source']}): the {n}-thread one "
                                                  f"measured {used['tflops']:.4g} TFLOP/s, below it, which cannot be"}
    kept = {p["_key"]: p["entry"] for p in fresh}
    if kept:
        try:
            private_dir(path.parent)
            write_json(path, {**cache, **kept})
        except OSError:
            pass  # an unwritable cache costs a measurement per run, nothing else
    return {k: v for k, v in {**facts, **used, "threads": n}.items() if not k.startswith("_") and k != "entry"}


def _peak(cache: dict[str, Any], facts: dict[str, Any], measure: Measure, load: Callable[[], float]) -> dict[str, Any]:
    """The peak of one key: the cached quiet measurement, else a new one (with ``_key`` and the cache
    ``entry`` it would make)."""
    key = "|".join(str(facts[k]) for k in ("cpu", "cores", "torch", "threads", "dtype"))
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("quiet") is True and isinstance(entry.get("tflops"), (int, float)) \
            and entry["tflops"] > 0:
        return {"tflops": float(entry["tflops"]), "cached": True, "quiet": True, "loads": entry.get("loads"),
                "source": f"measured on this machine on a quiet machine {_words(entry)}, read from the cache"}
    before = load()
    tflops = measure(facts["dtype"], facts["threads"])
    loads = (before, load())
    calm = quiet(loads, facts["cores"], facts["threads"])
    entry = {"tflops": tflops, "quiet": calm, "loads": list(loads), "threads": facts["threads"],
             "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    how = "on a quiet machine" if calm else "under load"
    return {"tflops": tflops, "cached": False, "quiet": calm, "loads": list(loads), "_key": key, "entry": entry,
            "source": f"measured on this machine {how} {_words(entry)}" + ("" if calm else ": not cached; the peak "
                                                                                      "may be too low and MFU too high")}


def _words(entry: dict[str, Any]) -> str:
    """``(1-minute load 0.4 → 0.6, 4 threads)``: the conditions of a measurement."""
    loads = entry.get("loads") or [float("nan")] * 2
    return f"(1-minute load {loads[0]:.2f} → {loads[1]:.2f}, {entry.get('threads')} thread(s))"
