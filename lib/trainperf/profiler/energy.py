"""Energy of a step window (J) from the hardware's counters, read on the host without a synchronisation:
NVML's on a GPU, RAPL's package counters on a CPU host, read by its first rank (docs/profiler.md, "Energy").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

RAPL_ROOT = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")


class NvmlEnergy:
    """One GPU's NVML total-energy counter (``nvml``: the ``pynvml`` module)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._counter = nvml.nvmlDeviceGetTotalEnergyConsumption
        self._handle = handle
        self._last = self._counter(handle)

    def read(self) -> float:
        now = self._counter(self._handle)
        joules = (now - self._last) / 1000.0
        self._last = now
        return joules


class RaplEnergy:
    """The summed RAPL counters of the package ``zones`` (``/sys/class/powercap/intel-rapl:0``, ...), each
    wrapping at its ``max_energy_range_uj``, read through files kept open (a few µs)."""

    def __init__(self, zones: list[Path]) -> None:
        self._files = [os.open(zone / "energy_uj", os.O_RDONLY) for zone in zones]
        self._ranges = [int((zone / "max_energy_range_uj").read_text()) for zone in zones]
        self._last = [int(os.pread(f, 32, 0)) for f in self._files]

    def read(self) -> float:
        total = 0
        for i, file in enumerate(self._files):
            now = int(os.pread(file, 32, 0))
            delta = now - self._last[i]
            total += delta + self._ranges[i] if delta < 0 else delta  # the counter wrapped past its range
            self._last[i] = now
        return total / 1e6


EnergyMeter = NvmlEnergy | RaplEnergy
"""An energy counter: ``read()`` gives the joules used since the previous call (the first: since the meter was
created)."""


def rapl_zones(root: Path | None = None) -> list[Path]:
    """The readable RAPL package zones under ``root`` (default :data:`RAPL_ROOT`): ``intel-rapl:<N>`` named
    ``package-<N>``, not their sub-zones nor the ``psys`` zone, which contains the packages."""
    zones = []
    for zone in sorted((root or RAPL_ROOT).glob("intel-rapl:*")):
        if not _PACKAGE_ZONE.match(zone.name):
            continue
        try:
            if not (zone / "name").read_text().strip().startswith("package"):
                continue
            int((zone / "energy_uj").read_text())
            int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        zones.append(zone)
    return zones


def energy_meter(torch: Any, device: Any, first_on_host: bool) -> tuple[EnergyMeter | None, str]:
    """This rank's meter (RAPL's only on the host's first rank) and the manifest's sentence
    (``nvml: ...``, ``rapl: ...`` or ``none: <why>``)."""
    if device.type == "cuda":
        try:
            import pynvml
        except ImportError:
            return None, "none: the nvidia-ml-py package (pynvml) is not installed"
        try:
            pynvml.nvmlInit()
            index = getattr(torch.cuda, "_get_nvml_device_index", lambda d: d.index or 0)(device)
            return (NvmlEnergy(pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)),
                    "nvml: each GPU's total-energy counter")
        except Exception as exc:  # no NVML (ROCm), or a GPU without the counter (before Volta)
            return None, f"none: NVML has no energy counter here ({type(exc).__name__}: {exc})"
    if device.type != "cpu":
        return None, f"none: no energy counter for {device.type} devices"
    zones = rapl_zones()
    if not zones:
        return None, f"none: no readable RAPL package counter in {RAPL_ROOT} (reading may need root)"
    return (RaplEnergy(zones) if first_on_host else None,
            f"rapl: CPU package counters ({', '.join(z.name for z in zones)}) of each host, read by its first rank")
