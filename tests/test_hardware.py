"""Accelerator peak table, name matching, precision names, measured CPU peak.

Expected peaks are the vendors' published figures (datasheets), typed here by
hand, not read from the table under test.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from trainperf.errors import DataError
from trainperf.hardware import (DEVICES, dense_peak_tflops, device_memory, find_device, is_cpu, normalize_precision,
                                platform_name)
from trainperf.profiler.peak_flops import measure_peak_flops
from trainperf.schema import PRECISIONS

# What torch.cuda.get_device_name returns, and common hand-written spellings.
SPELLINGS = {
    "H100": "NVIDIA H100 SXM",
    "h100_80gb": "NVIDIA H100 SXM",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM",
    "NVIDIA H100 SXM": "NVIDIA H100 SXM",
    "NVIDIA H100 SXM 80GB": "NVIDIA H100 SXM",
    "H100-SXM5-80GB": "NVIDIA H100 SXM",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL": "NVIDIA H100 NVL",
    "NVIDIA H200": "NVIDIA H200 SXM",
    "NVIDIA B200": "NVIDIA B200",
    "NVIDIA L4": "NVIDIA L4",
    "NVIDIA L40S": "NVIDIA L40S",
    "AMD Instinct MI300X": "AMD MI300X",
    "mi300x": "AMD MI300X",
    "AMD Instinct MI325X": "AMD MI325X",
    "AMD Instinct MI355X": "AMD MI355X",
    "AMD Instinct MI250X": "AMD MI250X",
    "MI250X GCD": "AMD MI250X GCD",
    "A100-SXM4-40GB": "NVIDIA A100 SXM 40GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM 80GB",
    "NVIDIA A100 80GB": "NVIDIA A100 SXM 80GB",
    "A100 80GB": "NVIDIA A100 SXM 80GB",
    "A100 40GB": "NVIDIA A100 SXM 40GB",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 PCIe",
    "NVIDIA A100 SXM 40GB": "NVIDIA A100 SXM 40GB",
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-PCIE-16GB": "NVIDIA V100 PCIe",
    "NVIDIA V100": "NVIDIA V100 SXM2",
}


@pytest.mark.parametrize("spelling,expected", SPELLINGS.items())
def test_spellings_find_the_device(spelling: str, expected: str) -> None:
    device = find_device(spelling)
    assert device is not None and device.name == expected


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA L40", "NVIDIA GB200", "Tesla T4",
                                  "AMD Instinct MI250X / MI250", "", "TPU v5p", "cpu", "cpu (Xeon 8480)"])
def test_unknown_or_ambiguous_platform_is_none(name: str) -> None:
    assert find_device(name) is None
    assert dense_peak_tflops(name, "bf16") is None


# (platform, precision, dense TFLOP/s as published)
PUBLISHED_DENSE = [
    ("NVIDIA H100 SXM", "bf16", 989.5),
    ("NVIDIA H100 SXM", "fp8", 1979.0),
    ("NVIDIA H100 SXM", "fp32", 67.0),
    ("NVIDIA A100 SXM 80GB", "bf16", 312.0),
    ("NVIDIA A100 SXM 40GB", "tf32", 156.0),
    ("AMD MI300X", "bf16", 1307.4),
    ("AMD MI300X", "fp8", 2614.9),
    ("NVIDIA V100 SXM2", "fp16", 125.0),
    ("NVIDIA V100 PCIe", "fp16", 112.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40S", "bf16", 362.05),
    ("AMD MI250X", "bf16", 383.0),
    ("AMD MI355X", "bf16", 2516.6),
    ("AMD MI355X", "fp8", 5033.2),
    ("NVIDIA B200", "bf16", 2250.0),
    ("NVIDIA B200", "fp8", 4500.0),
]


@pytest.mark.parametrize("platform,precision,tflops", PUBLISHED_DENSE)
def test_dense_peaks_match_published_figures(platform: str, precision: str, tflops: float) -> None:
    peak = dense_peak_tflops(platform, precision)
    assert peak is not None
    assert peak.tflops == pytest.approx(tflops, abs=0.05)
    assert peak.device == platform and peak.precision == precision
    assert peak.source


def test_h100_bf16_dense_is_half_the_sparse_figure() -> None:
    figure = find_device("H100").figures["bf16"]
    assert figure.sparse == 1979
    assert figure.dense * 2 == figure.sparse
    assert dense_peak_tflops("H100", "bf16").tflops == 989.5  # never the sparse 1979
    assert "1,979" in dense_peak_tflops("H100", "bf16").source


def test_mi300x_sparse_is_kept_apart() -> None:
    assert find_device("MI300X").figures["bf16"].sparse == 2614.9
    assert dense_peak_tflops("MI300X", "amp_bf16").tflops == 1307.4


def test_gcd_is_half_a_mi250x_module() -> None:
    assert dense_peak_tflops("MI250X GCD", "bf16").tflops == 383 / 2


@pytest.mark.parametrize("platform,precision", [("V100", "bf16"), ("V100", "tf32"), ("MI250X", "tf32"),
                                                ("A100", "fp8"), ("MI355X", "tf32")])
def test_missing_precision_is_none_not_invented(platform: str, precision: str) -> None:
    assert find_device(platform) is not None
    assert dense_peak_tflops(platform, precision) is None


def test_every_device_has_only_canonical_precisions_and_sane_sparsity() -> None:
    for device in DEVICES:
        assert set(device.figures) <= set(PRECISIONS), device.name
        for figure in device.figures.values():
            assert figure.dense > 0 and figure.printed
            if figure.sparse is not None:
                # The L40S sheet prints BF16 "362.05 | 733": its own figures differ by 1.2 %.
                assert figure.sparse == pytest.approx(2 * figure.dense, rel=0.015), device.name


@pytest.mark.parametrize("spelling,canonical", [
    ("amp_bf16", "bf16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("bf16-mixed", "bf16"),
    ("BF16", "bf16"), ("float16", "fp16"), ("half", "fp16"), ("16-mixed", "fp16"), ("fp32", "fp32"),
    ("float32", "fp32"), ("32-true", "fp32"), ("tf32", "tf32"), ("amp_fp8", "fp8"), ("float8_e4m3fn", "fp8"),
])
def test_normalize_precision(spelling: str, canonical: str) -> None:
    assert normalize_precision(spelling) == canonical


@pytest.mark.parametrize("spelling", ["fp64", "int8", "mixed", "", "bf 16"])
def test_unknown_precision_raises(spelling: str) -> None:
    with pytest.raises(DataError, match="unknown precision"):
        normalize_precision(spelling)
    with pytest.raises(DataError):
        dense_peak_tflops("H100", spelling)


def test_is_cpu() -> None:
    assert is_cpu("cpu") and is_cpu("CPU (AMD EPYC 7763)")
    assert not is_cpu("NVIDIA H100 SXM")


def test_measure_peak_flops_is_plausible() -> None:
    torch = pytest.importorskip("torch")
    n = 512
    threads = torch.get_num_threads()
    # One thread: on a shared machine a multi-threaded matmul stalls whenever a core is busy.
    peak = measure_peak_flops(n=n, seconds=0.3, threads=1)
    assert torch.get_num_threads() == threads
    assert 1e8 < peak < 1e13
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.set_num_threads(1)
    try:
        torch.mm(a, b)
        fastest = math.inf
        for _ in range(20):  # plain timed matmuls; the fastest is the least disturbed by other load
            start = time.perf_counter()
            torch.mm(a, b)
            fastest = min(fastest, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    plain = 2 * n**3 / fastest  # FLOP/s
    assert plain / 5 < peak < plain * 5


def test_docs_table_matches_the_peak_table() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    rows = {line.split("|")[1].strip().removesuffix(" (default)"): line.split("|")[2:7]
            for line in docs.splitlines() if line.startswith(("| NVIDIA", "| AMD"))}
    assert set(rows) == {device.name for device in DEVICES}
    for device in DEVICES:
        for precision, cell in zip(PRECISIONS, rows[device.name]):
            figure = device.figures.get(precision)
            expected = "—" if figure is None else f"{figure.dense:g}"
            assert cell.strip().split(" ")[0] == expected, (device.name, precision)


def test_measure_peak_flops_refuses_cuda_without_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="CUDA"):
        measure_peak_flops(device="cuda")


@pytest.mark.parametrize("platform, capacity", [
    # the datasheets' memory: H100 SXM and PCIe 80 GB, H100 NVL 94 GB, H200 141 GB, A100 40 or 80 GB,
    # MI250X 128 GB per module (64 per GCD), MI300X 192 GB, MI325X 256 GB, MI355X 288 GB, L4 24 GB, L40S 48 GB
    ("H100", 80), ("NVIDIA H100 PCIe", 80), ("NVIDIA H100 NVL", 94), ("NVIDIA H200", 141),
    ("A100", 80), ("NVIDIA A100 SXM 40GB", 40), ("AMD Instinct MI250X", 128), ("AMD MI250X GCD", 64),
    ("AMD Instinct MI300X", 192), ("AMD Instinct MI325X", 256), ("AMD Instinct MI355X", 288), ("NVIDIA L4", 24),
    ("NVIDIA L40S", 48), ("NVIDIA B200", 180),
    # the size a name gives wins: torch.cuda.get_device_name's own words
    ("Tesla V100-SXM2-32GB", 32), ("NVIDIA A100-SXM4-40GB", 40), ("NVIDIA H100 80GB HBM3", 80),
])
def test_device_memory_is_the_datasheets_or_the_names(platform: str, capacity: float) -> None:
    found = device_memory(platform)
    assert found is not None and found[0] == capacity


@pytest.mark.parametrize("platform", ["V100", "NVIDIA A100 PCIe", "cpu", "NVIDIA Hopper 9000"])
def test_device_memory_is_unknown_where_the_variant_or_device_is(platform: str) -> None:
    # a V100 and an A100 PCIe come in two sizes: no capacity is guessed
    assert device_memory(platform) is None


def test_docs_table_has_each_devices_memory() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "hardware.md").read_text()
    cells = {line.split("|")[1].strip().removesuffix(" (default)"): line.split("|")[7].strip()
             for line in docs.splitlines() if line.startswith(("| NVIDIA", "| AMD"))}
    assert cells == {d.name: "—" if d.capacity_gb is None else f"{d.capacity_gb:g}" for d in DEVICES}


def test_a_known_chip_in_another_memory_size_finds_its_peak_and_says_so():
    # CINECA's Leonardo has A100s of 64 GB, which nvidia-smi names "NVIDIA A100-SXM-64GB"; NVIDIA's A100 datasheet
    # gives 312 TFLOPS dense BF16 for every A100 (40GB and 80GB, SXM and PCIe).
    peak = dense_peak_tflops("NVIDIA A100-SXM-64GB", "bf16")
    assert peak is not None and peak.tflops == 312
    assert "found by its chip, A100" in peak.source and "every A100" in peak.source
    assert platform_name("NVIDIA A100-SXM-64GB") == "NVIDIA A100-SXM-64GB"  # its own name is kept
