"""Memory and energy per step: the readers against fake allocator, NVML and
RAPL counters of the shapes the real ones have, the profiler on CPU with a
fake RAPL counter and with real out-of-memory errors, and their runs columns.

Shapes of the real interfaces:

* ``torch.cuda.memory_stats(device)`` returns a flat dict of ints keyed
  ``"<stat>.<pool>.<metric>"`` (stat ``allocated_bytes``, ``reserved_bytes``,
  ``active_bytes``, ``inactive_split_bytes``, ``requested_bytes``,
  ``allocation``, ``segment``, ``active``, ``inactive_split``; pool ``all``,
  ``large_pool``, ``small_pool``; metric ``current``, ``peak``,
  ``allocated``, ``freed``) plus ``num_alloc_retries``, ``num_ooms``,
  ``num_sync_all_streams``, ``num_device_alloc``, ``num_device_free``,
  ``max_split_size``, ``oversize_allocations.*``, ``oversize_segments.*``
  (PyTorch docs, ``torch.cuda.memory_stats``; torch/cuda/memory.py).
* ``pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)``: an int, millijoules
  since the driver was last reloaded (NVML API reference,
  ``nvmlDeviceGetTotalEnergyConsumption``; nvidia-ml-py's pynvml.py reads it
  into a ``c_uint64``).
* ``/sys/class/powercap/intel-rapl:<N>/energy_uj``: microjoules, counting up
  to ``max_energy_range_uj`` and wrapping to 0; ``name`` is ``package-<N>``
  for a package, ``intel-rapl:<N>:<M>`` are its sub-zones (core, uncore,
  dram), a ``psys`` zone holds the whole platform (Linux powercap sysfs
  documentation, Documentation/power/powercap/powercap.rst).
"""

from __future__ import annotations

import itertools
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from trainperf import DataWarning, StepProfiler, derive, load_runs, load_steps
from trainperf.profiler import energy
from trainperf.profiler.energy import NvmlEnergy, RaplEnergy, energy_meter, rapl_zones
from trainperf.profiler.memory import CudaMemory
from trainperf.runfolder import rankfile

GIB = 2**30
STATS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes",
         "allocation", "segment", "active", "inactive_split")


def memory_stats(allocated_peak: int, reserved_peak: int, retries: int, ooms: int) -> dict[str, int]:
    """A ``torch.cuda.memory_stats`` dict with every key the real one has."""
    stats = {f"{stat}.{pool}.{metric}": 0 for stat, pool, metric in itertools.product(
        STATS, ("all", "large_pool", "small_pool"), ("current", "peak", "allocated", "freed"))}
    stats.update({f"oversize_{kind}.{metric}": 0 for kind in ("allocations", "segments")
                  for metric in ("current", "peak", "allocated", "freed")})
    stats.update({"num_alloc_retries": retries, "num_ooms": ooms, "num_sync_all_streams": 0,
                  "num_device_alloc": 3, "num_device_free": 0, "max_split_size": -1,
                  "allocated_bytes.all.peak": allocated_peak, "reserved_bytes.all.peak": reserved_peak,
                  "allocated_bytes.all.current": allocated_peak // 2, "reserved_bytes.all.current": reserved_peak})
    return stats


class FakeCuda:
    """``torch.cuda`` as far as the memory reader uses it: the statistics of
    successive readings, and the resets it was asked for."""

    def __init__(self, readings: list[dict[str, int]]) -> None:
        self.readings = readings
        self.resets = 0

    def memory_stats(self, device):
        assert device == "cuda:0"
        return self.readings.pop(0)

    def reset_peak_memory_stats(self, device):
        self.resets += 1


def cuda_readings():
    # at creation 1 retry already happened (before the profiler); then two steps
    return [memory_stats(GIB, 2 * GIB, 1, 0), memory_stats(3 * GIB, 4 * GIB, 3, 0),
            memory_stats(int(3.5 * GIB), 4 * GIB, 3, 1)]


def test_cuda_memory_reads_the_peaks_and_counts_without_resetting_them():
    cuda = FakeCuda(cuda_readings())
    memory = CudaMemory(cuda, "cuda:0")
    first, second = memory.read(), memory.read()
    # peaks in GiB as the allocator keeps them (the peak so far); counts: the increase since the last reading
    assert tuple(first) == (3.0, 4.0, 2, 0)
    assert tuple(second) == (3.5, 4.0, 0, 1)
    assert cuda.resets == 0  # the user's torch.cuda.max_memory_allocated is left alone


def test_cuda_memory_resets_the_peaks_after_each_reading_when_asked():
    cuda = FakeCuda(cuda_readings())
    memory = CudaMemory(cuda, "cuda:0", reset_peak=True)
    assert memory.read().peak_gb == 3.0 and cuda.resets == 1
    assert memory.read().peak_gb == 3.5 and cuda.resets == 2


def test_cuda_memory_before_the_allocator_is_used_reads_nothing():
    # torch.cuda.memory_stats returns {} until the caching allocator is initialized
    memory = CudaMemory(FakeCuda([{}, {}]), "cuda:0")
    assert tuple(memory.read()) == (None, None, 0, 0)


class FakeNvml(types.ModuleType):
    """The part of ``pynvml`` the energy meter uses, with a counter in mJ."""

    def __init__(self, millijoules: list[int]) -> None:
        super().__init__("pynvml")
        self.millijoules = millijoules
        self.initialized = False
        self.index = None

    def nvmlInit(self):
        self.initialized = True

    def nvmlDeviceGetHandleByIndex(self, index):
        self.index = index
        return ("handle", index)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        assert handle == ("handle", self.index)
        return self.millijoules.pop(0)


def test_nvml_energy_is_the_counter_increase_in_joules():
    meter = NvmlEnergy(FakeNvml([1_000_000, 1_650_500, 2_300_000]), ("handle", None))
    assert meter.read() == 650.5
    assert meter.read() == 649.5


def test_on_cuda_the_meter_reads_the_nvml_counter_of_the_ranks_gpu(monkeypatch):
    nvml = FakeNvml([5_000, 7_500])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    # torch maps its device index to NVML's through CUDA_VISIBLE_DEVICES: device 0 here is NVML's GPU 3
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(_get_nvml_device_index=lambda device: 3))
    meter, said = energy_meter(fake_torch, torch.device("cuda", 0), first_on_host=False)
    assert nvml.initialized and nvml.index == 3 and said.startswith("nvml:")
    assert meter.read() == 2.5  # every rank reads its own GPU, the host's first or not


def test_on_cuda_without_nvidia_ml_py_there_is_no_meter_and_the_manifest_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    meter, said = energy_meter(torch, torch.device("cuda", 0), first_on_host=True)
    assert meter is None and said == "none: the nvidia-ml-py package (pynvml) is not installed"


def zone(root: Path, name: str, label: str, energy_uj: int | None, max_uj: int = 262_143_328_850) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(label + "\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    if energy_uj is not None:
        (folder / "energy_uj").write_text(f"{energy_uj}\n")
    return folder


def test_rapl_reads_package_zones_only_and_unwraps_the_counter(tmp_path):
    package0 = zone(tmp_path, "intel-rapl:0", "package-0", 262_143_000_000)
    package1 = zone(tmp_path, "intel-rapl:1", "package-1", 1_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside package 0: counted there already
    zone(tmp_path, "intel-rapl:2", "psys", 7)  # the platform, packages included
    zone(tmp_path, "intel-rapl:3", "package-3", None)  # no readable counter
    assert rapl_zones(tmp_path) == [package0, package1]
    meter = RaplEnergy([package0, package1])
    (package0 / "energy_uj").write_text("500000\n")  # wrapped past 262 143 328 850 µJ
    (package1 / "energy_uj").write_text("3000000\n")
    # (500 000 + 262 143 328 850 - 262 143 000 000) + (3 000 000 - 1 000 000) = 2 828 850 µJ
    assert meter.read() == pytest.approx(2.82885, abs=1e-9)


def test_rapl_is_read_by_the_first_rank_of_a_host_only(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    monkeypatch.setattr(energy, "RAPL_ROOT", tmp_path)
    first, said = energy_meter(torch, torch.device("cpu"), first_on_host=True)
    other, said_too = energy_meter(torch, torch.device("cpu"), first_on_host=False)
    assert first is not None and other is None  # a package counts every process on it: read once per host
    assert said == said_too == "rapl: CPU package counters (intel-rapl:0) of each host, read by its first rank"


def test_the_profiler_records_each_steps_energy_and_the_run_its_sum(tmp_path, monkeypatch):
    counter = zone(tmp_path / "powercap", "intel-rapl:0", "package-0", 1_000_000, max_uj=5_000_000)
    monkeypatch.setattr(energy, "RAPL_ROOT", tmp_path / "powercap")
    prof = StepProfiler(tmp_path / "run", config={"model": "m", "precision": "fp32", "price_per_kwh": 0.2,
                                                   "peak_tflops_per_gpu": 1.0}, warmup_steps=1, trace=False)
    # the package's counter (µJ) at the end of each step; the third wraps past 5 000 000
    for reading in (3_000_000, 4_500_000, 500_000, 2_500_000):
        with prof.step(tokens=1000, samples=10):
            (counter / "energy_uj").write_text(f"{reading}\n")
    prof.close()
    read = rankfile.read_rank_file(tmp_path / "run" / "steps-rank0.jsonl")
    assert read.columns["energy_j"].tolist() == [2.0, 1.5, 1.0, 2.0]
    (row,) = derive(load_runs(tmp_path / "run")).to_dict("records")
    assert row["energy_counter"].startswith("rapl: CPU package counters (intel-rapl:0)")
    assert row["energy_j"] == pytest.approx(4.5)  # steps 1-3: step 0 is the warm-up
    assert row["energy_j_per_token"] == pytest.approx(4.5 / 3000)
    assert row["power_w_per_gpu"] == pytest.approx(4.5 / row["elapsed_s"])
    assert row["energy_kwh"] == pytest.approx(1.25e-6)
    assert row["energy_cost_usd"] == pytest.approx(2.5e-7)
    assert row["energy_cost_usd_per_million_tokens"] == pytest.approx(2.5e-7 / 3000 * 1e6)


def test_without_a_counter_the_run_says_why_once_and_has_no_energy(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_ROOT", tmp_path / "no-powercap")
    with StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=1, trace=False) as prof:
        for _ in range(3):
            with prof.step(tokens=10, samples=1):
                pass
    said = f"none: no readable RAPL package counter in {tmp_path / 'no-powercap'} (reading may need root)"
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["environment"]["energy"] == said
    (row,) = derive(load_runs(tmp_path / "run")).to_dict("records")
    assert row["energy_counter"] == said and np.isnan(row["energy_j"]) and np.isnan(row["energy_j_per_token"])


def test_host_memory_is_the_processs_resident_set_at_each_steps_end(tmp_path):
    held = []
    with StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=0, trace=False) as prof:
        for step in range(3):
            with prof.step(tokens=10, samples=1):
                if step == 1:
                    held.append(torch.ones(64 * 2**20 // 4))  # 64 MiB written, kept until the end
    host = rankfile.read_rank_file(tmp_path / "run" / "steps-rank0.jsonl").columns["host_memory_gb"]
    assert host[1] - host[0] > 60 / 1024  # the 64 MiB (0.0625 GiB) are resident from step 1 on
    (row,) = load_runs(tmp_path / "run").to_dict("records")
    assert row["host_memory_gb"] == pytest.approx(host.max(), abs=1e-6)
    assert row["fits"] == True  # noqa: E712  (every rank could record an out-of-memory step, none did)


def allocate_too_much():
    """A real out-of-memory error of the CPU allocator (an exabyte)."""
    torch.empty(1 << 60, dtype=torch.uint8)


def test_a_step_that_runs_out_of_memory_is_recorded_and_the_error_passes_through(tmp_path):
    prof = StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=1, trace=False)
    for _ in range(3):
        with prof.step(tokens=10, samples=1):
            pass
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        with prof.step(tokens=10, samples=1):
            allocate_too_much()
    lines = (tmp_path / "run" / "steps-rank0.jsonl").read_text().splitlines()
    assert len(lines) == 5  # written at once, before close(): a job that dies of it keeps it
    read = rankfile.read_rank_file(tmp_path / "run" / "steps-rank0.jsonl")
    assert read.columns["out_of_memory"].tolist() == [False, False, False, True]
    assert read.columns["step"][-1] == 3 and np.isnan(read.columns["tokens"][-1]) and read.columns["ooms"][-1] == 1
    with prof.step(tokens=10, samples=1):  # the training caught it and goes on: the same step again
        pass
    prof.close()
    assert rankfile.read_rank_file(tmp_path / "run" / "steps-rank0.jsonl").columns["step"].tolist() == [0, 1, 2, 3, 3]
    assert load_steps(tmp_path / "run")["step"].tolist() == [0, 1, 2, 3]  # no interval for the failed step
    (row,) = derive(load_runs(tmp_path / "run")).to_dict("records")
    assert row["fits"] == False and row["ooms"] == 1  # noqa: E712
    assert row["extra_out_of_memory"] == "rank 0 step 3" and row["steps"] == 3 and row["tokens"] == 30
    assert "out of memory: the configuration does not fit the device (rank 0 step 3)" in row["notes"]


def test_a_configuration_that_runs_out_of_memory_at_once_is_a_run_that_does_not_fit(tmp_path):
    prof = StepProfiler(tmp_path / "big", config={"experiment": "sweep", "micro_batch_size": 64}, trace=False)
    with pytest.raises(RuntimeError):
        with prof.step(tokens=10, samples=1):
            allocate_too_much()
    # the job died: no close(), no measured step; still a row of the sweep, and one that stopped early
    with pytest.warns(DataWarning, match=r"rank 0: no steps recorded, profiler not closed"):
        runs = load_runs(tmp_path / "big")
    (row,) = derive(runs).to_dict("records")
    assert row["fits"] == False and row["micro_batch_size"] == 64 and np.isnan(row["elapsed_s"])  # noqa: E712
    assert "out of memory: the configuration does not fit the device (rank 0 step 0); no step was measured" \
        in row["notes"]


def test_other_errors_are_not_recorded_as_steps(tmp_path):
    prof = StepProfiler(tmp_path / "run", trace=False)
    with pytest.raises(ValueError):
        with prof.step(tokens=10, samples=1):
            raise ValueError("a bug in the training loop")
    prof.close()
    assert rankfile.read_rank_file(tmp_path / "run" / "steps-rank0.jsonl").steps == 0


def test_a_steps_file_of_version_1_reads_with_the_later_columns_empty():
    path = next(Path("data/runs").glob("*/*/steps-rank0.jsonl"))
    assert json.loads(path.read_text().splitlines()[0])["version"] == 1
    read = rankfile.read_rank_file(path)
    assert read.written == rankfile.VERSION_1_COLUMNS and read.bad_lines == []
    assert (read.columns["peak_memory_gb"] > 0).all()
    for name in ("reserved_memory_gb", "host_memory_gb", "alloc_retries", "ooms", "energy_j"):
        assert np.isnan(read.columns[name]).all(), name
    assert not read.columns["out_of_memory"].any()
    (row,) = load_runs(path.parent).to_dict("records")
    assert row["peak_memory_gb"] > 0 and "fits" not in row  # version 1 could not record out-of-memory steps
