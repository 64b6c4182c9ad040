"""Peak FLOP/s of accelerators, per precision: TFLOP/s per device (10¹² FLOP/s, a multiply-add counted as 2).

The table holds each device's **dense** peak at each precision, as MFU needs it (sparse figures kept for reference,
never returned), and its memory capacity; how names are matched, the variants a bare name stands for and the memory
figures: docs/hardware.md, "Peak FLOP/s". A CPU's is measured (``trainperf.profiler.peak_flops.measure_peak_flops``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from trainperf.errors import DataError
from trainperf.schema import PRECISIONS


@dataclass(frozen=True)
class Figure:
    """One precision's peak on one device (TFLOP/s): ``dense`` (used for MFU), ``printed`` (as the datasheet prints
    it) and ``sparse`` (2:4 structured sparsity, where printed; reference only)."""

    dense: float
    printed: str
    sparse: float | None = None


@dataclass(frozen=True)
class Device:
    """An accelerator and its peaks: ``family``, ``form`` (``sxm``, ``pcie``, ... or ``""``) and ``memory_gb`` (only
    where it tells variants apart) are what names are matched against; ``default``: the variant a name leaving them
    open means; ``figures`` by precision; ``capacity_gb``: the datasheet's memory (GB) where it prints one size."""

    name: str
    family: str
    form: str
    datasheet: str
    figures: dict[str, Figure]
    memory_gb: int | None = None
    default: bool = False
    note: str = ""
    capacity_gb: float | None = None


@dataclass(frozen=True)
class Peak:
    """The dense peak of one device at one precision: ``tflops`` (TFLOP/s per device), the canonical ``device``
    name, the canonical ``precision`` and ``source`` (datasheet and the figure as printed)."""

    tflops: float
    device: str
    precision: str
    source: str


def _sparse(sparse_tflops: float, label: str, as_printed: str | None = None) -> Figure:
    """A figure printed only with 2:4 sparsity: dense is half of it (``as_printed``: where not in TFLOPS)."""
    number = as_printed or f"{sparse_tflops:,g} TFLOPS"
    return Figure(dense=sparse_tflops / 2, sparse=sparse_tflops,
                  printed=f"{label} {number} with sparsity (dense: half)")


def _dense(tflops: float, label: str, sparse: float | None = None, printed: str | None = None) -> Figure:
    text = printed or (f"{label} {tflops:,g} TFLOPS" + (f" | {sparse:,g} TFLOPS with sparsity" if sparse else ""))
    return Figure(dense=tflops, sparse=sparse, printed=text)


def _nvidia_sparse_sheet(fp32: float, tf32_sparse: float, fp16_sparse: float, fp8_sparse: float) -> dict[str, Figure]:
    """An NVIDIA sheet that prints FP32 dense and the tensor-core figures with sparsity only (Hopper, Ada)."""
    return {
        "fp32": _dense(fp32, "FP32"),
        "tf32": _sparse(tf32_sparse, "TF32 Tensor Core"),
        "bf16": _sparse(fp16_sparse, "BFLOAT16 Tensor Core"),
        "fp16": _sparse(fp16_sparse, "FP16 Tensor Core"),
        "fp8": _sparse(fp8_sparse, "FP8 Tensor Core"),
    }


_AMD_CDNA3 = {
    "fp32": _dense(163.4, "Peak FP32 Vector and Matrix"),
    "tf32": _dense(653.7, "Peak TF32", sparse=1307.4),
    "bf16": _dense(1307.4, "Peak BF16", sparse=2614.9),
    "fp16": _dense(1307.4, "Peak FP16", sparse=2614.9),
    "fp8": _dense(2614.9, "Peak FP8", sparse=5229.8),
}
"""MI300X and MI325X (same compute die and clocks): dense peaks, with structured sparsity twice."""


_V100 = "NVIDIA Tesla V100 GPU Accelerator datasheet"


def _volta(fp32: float, fp16: float) -> dict[str, Figure]:
    return {"fp32": _dense(fp32, "Single-Precision"),
            "fp16": _dense(fp16, "Tensor Performance (FP16 in, FP32 accumulate)")}


_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
_A100_FIGURES = {
    "fp32": _dense(19.5, "FP32"),
    "tf32": _dense(156, "Tensor Float 32 (TF32)", sparse=312),
    "bf16": _dense(312, "BFLOAT16 Tensor Core", sparse=624),
    "fp16": _dense(312, "FP16 Tensor Core", sparse=624),
}
_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet"
_MI250X = "AMD Instinct MI250X accelerator datasheet"
_MI250X_MODULE = {"fp32": _dense(95.7, "Peak FP32 Matrix"), "bf16": _dense(383, "Peak bfloat16"),
                  "fp16": _dense(383, "Peak FP16")}
_VOLTA = "no BF16, TF32 or FP8"
_MI355X_CLOCK = "2,516.6 = 2,400 MHz x 256 CUs x 4,096 FLOP/clock"

DEVICES: tuple[Device, ...] = (
    Device("NVIDIA V100 SXM2", "v100", "sxm", f"{_V100} (V100 SXM2)", default=True, figures=_volta(15.7, 125),
           note=_VOLTA),
    Device("NVIDIA V100 PCIe", "v100", "pcie", f"{_V100} (V100 PCIe)", figures=_volta(14, 112), note=_VOLTA),
    Device("NVIDIA V100S PCIe", "v100s", "pcie", f"{_V100} (V100S PCIe)", capacity_gb=32, figures=_volta(16.4, 130),
           note=_VOLTA),
    Device("NVIDIA A100 SXM 40GB", "a100", "sxm", f"{_A100} (A100 40GB SXM)", memory_gb=40, capacity_gb=40,
           figures=_A100_FIGURES, note="no FP8"),
    Device("NVIDIA A100 SXM 80GB", "a100", "sxm", f"{_A100} (A100 80GB SXM)", memory_gb=80, default=True,
           capacity_gb=80, figures=_A100_FIGURES, note="no FP8"),
    Device("NVIDIA A100 PCIe", "a100", "pcie", f"{_A100} (A100 40GB and 80GB PCIe)",
           figures=_A100_FIGURES, note="no FP8; same peaks as SXM"),
    Device("NVIDIA H100 SXM", "h100", "sxm", f"{_H100} (H100 SXM)", default=True, capacity_gb=80,
           figures=_nvidia_sparse_sheet(67, 989, 1979, 3958)),
    Device("NVIDIA H100 PCIe", "h100", "pcie", f"{_H100} (H100 PCIe)", capacity_gb=80,
           figures=_nvidia_sparse_sheet(51, 756, 1513, 3026)),
    Device("NVIDIA H100 NVL", "h100", "nvl", f"{_H100} (H100 NVL, per GPU)", capacity_gb=94,
           figures=_nvidia_sparse_sheet(60, 835, 1671, 3341)),
    Device("NVIDIA H200 SXM", "h200", "sxm", f"{_H200} (H200 SXM)", default=True, capacity_gb=141,
           figures=_nvidia_sparse_sheet(67, 989, 1979, 3958)),
    Device("NVIDIA H200 NVL", "h200", "nvl", f"{_H200} (H200 NVL)", capacity_gb=141,
           figures=_nvidia_sparse_sheet(60, 835, 1671, 3341)),
    Device("NVIDIA B200", "b200", "", "NVIDIA HGX B200 datasheet (individual Blackwell GPU, 1,000 W)",
           capacity_gb=180, figures={
        "fp32": _dense(75, "FP32"),
        "tf32": _sparse(2200, "TF32 Tensor Core", "2.2 PFLOPS"),
        "bf16": _sparse(4500, "FP16/BF16 Tensor Core", "4.5 PFLOPS"),
        "fp16": _sparse(4500, "FP16/BF16 Tensor Core", "4.5 PFLOPS"),
        "fp8": _sparse(9000, "FP8/FP6 Tensor Core", "9 PFLOPS"),
    }),
    Device("NVIDIA L4", "l4", "", "NVIDIA L4 Tensor Core GPU datasheet", capacity_gb=24,
           figures=_nvidia_sparse_sheet(30.3, 120, 242, 485)),
    Device("NVIDIA L40S", "l40s", "", "NVIDIA L40S GPU datasheet", capacity_gb=48, figures={
        "fp32": _dense(91.6, "FP32"),
        "tf32": _dense(183, "TF32 Tensor Core", sparse=366),
        "bf16": _dense(362.05, "BF16 Tensor Core", sparse=733),
        "fp16": _dense(362.05, "FP16 Tensor Core", sparse=733),
        "fp8": _dense(733, "FP8 Tensor Core", sparse=1466),
    }, note="the sheet's sparse BF16/FP16 figure (733) is not exactly twice its dense one (362.05)"),
    Device("AMD MI250X", "mi250x", "oam", f"{_MI250X} (OAM module: 2 GCDs)", default=True, capacity_gb=128,
           figures=_MI250X_MODULE, note="one module is two GCDs, and PyTorch sees each GCD as a device: a run "
           "that counts GCDs as gpus should name 'AMD MI250X GCD'; no TF32, FP8 or sparsity"),
    Device("AMD MI250X GCD", "mi250x", "gcd", f"{_MI250X} (per module; one GCD is half)", capacity_gb=64,
           figures={k: Figure(f.dense / 2, f"{f.printed} per module of 2 GCDs (one GCD: half)")
                    for k, f in _MI250X_MODULE.items()}, note="half an MI250X module, one PyTorch device"),
    Device("AMD MI300X", "mi300x", "", "AMD Instinct MI300X accelerator datasheet", capacity_gb=192,
           figures=_AMD_CDNA3),
    Device("AMD MI325X", "mi325x", "", "AMD Instinct MI325X accelerator datasheet", capacity_gb=256,
           figures=_AMD_CDNA3),
    Device("AMD MI355X", "mi355x", "", "AMD Instinct MI355X accelerator datasheet", capacity_gb=288,
           figures={
        "fp32": _dense(157.3, "Peak FP32 Vector"),
        "bf16": _dense(2516.6, "", sparse=5033.2, printed=f"Peak BF16 2.5 PFLOPS (5.0 with sparsity); {_MI355X_CLOCK}"),
        "fp16": _dense(2516.6, "", sparse=5033.2, printed=f"Peak FP16 2.5 PFLOPS (5.0 with sparsity); {_MI355X_CLOCK}"),
        "fp8": _dense(5033.2, "", sparse=10066.3,
                      printed="Peak FP8 5.0 PFLOPS (10.1 with sparsity); twice the BF16 rate per clock"),
    }, note="CDNA 4 has no TF32 matrix instructions"),
)

_PRECISION_ALIASES: dict[str, str] = {
    **{name: "fp32" for name in ("fp32", "float32", "float", "f32", "32", "single")},
    **{name: "tf32" for name in ("tf32", "tensorfloat32", "tensorfloat-32")},
    **{name: "bf16" for name in ("bf16", "bfloat16")},
    **{name: "fp16" for name in ("fp16", "float16", "half", "f16", "16")},
    **{name: "fp8" for name in ("fp8", "float8", "f8", "e4m3", "e5m2", "float8_e4m3fn",
                                "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")},
}


def normalize_precision(name: object) -> str:
    """The canonical precision (:data:`PRECISIONS`) of a spelling, case and spaces ignored (``amp_bf16``, a torch
    dtype ``torch.bfloat16``, Lightning's ``bf16-mixed``, ``half``, ``float8_e4m3fn`` ...); DataError for others."""
    key = str(name).strip().lower().removeprefix("torch.")
    for prefix in ("amp_", "amp-", "amp "):
        key = key.removeprefix(prefix)
    for suffix in ("-mixed", "_mixed", "-true", "_true"):
        key = key.removesuffix(suffix)
    if key in _PRECISION_ALIASES:
        return _PRECISION_ALIASES[key]
    raise DataError(f"unknown precision {name!r}: expected one of {', '.join(PRECISIONS)} "
                    "(or a spelling such as amp_bf16, bfloat16, float16, float32, amp_fp8)")


_NOISE = {"nvidia", "amd", "tesla", "instinct", "tensor", "core", "gpu", "accelerator",
          "hbm2", "hbm2e", "hbm3", "hbm3e"}
_FORMS = {"sxm": "sxm", "sxm2": "sxm", "sxm3": "sxm", "sxm4": "sxm", "sxm5": "sxm",
          "pcie": "pcie", "pci": "pcie", "nvl": "nvl", "oam": "oam", "gcd": "gcd"}
_MODEL = re.compile(r"[a-z]+\d+[a-z]*")
_MEMORY = re.compile(r"(\d+)gb")


def _parse(platform: str) -> tuple[str, str, int | None] | None:
    """``(family, form, memory_gb)`` of a platform name; ``None`` for a CPU and unless it names exactly one model
    (``"MI250X / MI250"`` names two)."""
    if is_cpu(platform):
        return None
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", platform.lower())
    tokens = [t for t in re.split(r"[\s\-_/(),:;]+", text) if t and t not in _NOISE]
    forms = {_FORMS[t] for t in tokens if t in _FORMS}
    memories = {int(m.group(1)) for t in tokens if (m := _MEMORY.fullmatch(t))}
    models = {t for t in tokens if t not in _FORMS and not _MEMORY.fullmatch(t) and _MODEL.fullmatch(t)}
    if len(models) != 1 or len(forms) > 1 or len(memories) > 1:
        return None
    return models.pop(), forms.pop() if forms else "", memories.pop() if memories else None


def is_cpu(platform: str) -> bool:
    """Whether ``platform`` names a CPU (a name starting with ``cpu``, e.g. ``"cpu (AMD EPYC 7763)"``)."""
    return platform.strip().lower().startswith("cpu")


def cpu_rows(platforms: Iterable[object]) -> np.ndarray:
    """Per platform name, whether it names a CPU (:func:`is_cpu`; a missing name does not)."""
    return np.array([isinstance(p, str) and is_cpu(p) for p in platforms], dtype=bool)


def find_device(platform: str) -> Device | None:
    """The table entry ``platform`` names, or ``None`` (unknown, ambiguous, or a CPU): case, separators, vendor words
    and memory type ignored; form and memory size pick the variant, else the family's default (docs/hardware.md)."""
    parsed = _parse(platform)
    if parsed is None:
        return None
    family, form, memory = parsed
    candidates = [d for d in DEVICES if d.family == family]
    if form:
        candidates = [d for d in candidates if d.form == form] or [d for d in candidates if not d.form]
    if memory is not None:
        candidates = ([d for d in candidates if d.memory_gb == memory]
                      or [d for d in candidates if d.memory_gb is None])
    if len(candidates) > 1:
        candidates = [d for d in candidates if d.default]
    return candidates[0] if len(candidates) == 1 else None


def platform_name(platform: str) -> str:
    """One name per device whatever its spelling: the table's name of the device ``platform`` names (``"H100"`` is
    ``"NVIDIA H100 SXM"``: :func:`find_device`), else ``platform`` stripped."""
    device = find_device(platform)
    return device.name if device is not None else platform.strip()


def device_memory(platform: str) -> tuple[float, str] | None:
    """The memory of one ``platform`` device (GB as printed, compared with GiB: docs/hardware.md, "Memory
    capacity") and where it comes from: the size the name gives, else the datasheet's for the device
    :func:`find_device` finds; ``None`` where neither says (a CPU, an unknown device, a V100 without its size)."""
    parsed = _parse(platform)
    if parsed is not None and parsed[2] is not None:
        return float(parsed[2]), f"the platform's name ({platform})"
    device = find_device(platform)
    if device is None or device.capacity_gb is None:
        return None
    return float(device.capacity_gb), f"{device.datasheet}: {device.capacity_gb:g} GB"


def dense_peak_tflops(platform: str, precision: str) -> Peak | None:
    """Dense peak TFLOP/s of one ``platform`` device at ``precision`` (:func:`normalize_precision`). ``None`` where
    the platform is not in the table (CPUs included) or lacks the precision. A chip the table has in another
    memory size or form factor (``"A100 SXM4 64GB"``) gets its family default's peak, with a note in ``source``
    (that the table's variants differ at ``precision`` where they do)."""
    canonical = normalize_precision(precision)
    device, by_chip = find_device(platform), ""
    parsed = _parse(platform)
    if device is None and parsed is not None:
        family = [d for d in DEVICES if d.family == parsed[0]]
        device = next((d for d in family if d.default), family[0] if len(family) == 1 else None)
        if device is not None and canonical in device.figures:
            peaks = {d.figures[canonical].dense for d in family if canonical in d.figures}
            chip = device.family.upper()
            same = (f"every {chip} in the table has this peak" if len(peaks) == 1
                    else f"the {device.name}'s; the table's {chip} variants differ, so this may be off")
            by_chip = f" ({platform!r} is not in the table as such: found by its chip, {chip}; {same})"
    if device is None or canonical not in device.figures:
        return None
    figure = device.figures[canonical]
    return Peak(tflops=float(figure.dense), device=device.name, precision=canonical,
                source=f"{device.datasheet}: {figure.printed}{by_chip}")

