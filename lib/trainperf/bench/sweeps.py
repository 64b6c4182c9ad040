"""The bench sweeps (:data:`SWEEPS`): which runs each one makes, with defaults per machine; each run writes one
profiler run folder ``<out>/<experiment>/<run_id>``, experiments named ``bench-<platform>-<model>-<precision>-<sweep>``
(docs/bench.md, "The sweeps").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from itertools import groupby

from trainperf.bench.spec import RunSpec

SWEEPS: tuple[str, ...] = ("batch-size", "scaling", "strategy")


@dataclass(frozen=True)
class Machine:
    """What the bench runs on: ``devices``, GPUs (0 on CPU); ``cores``, CPU cores this process may use."""

    device: str
    platform: str
    devices: int
    cores: int

    def oversubscribed(self, nprocs: int) -> bool:
        """Whether ``nprocs`` CPU processes outnumber the cores (they then time-share them)."""
        return self.device == "cpu" and nprocs > self.cores


def detect_machine(device: str = "auto") -> Machine:
    """The machine the bench will run on; ``device``: ``auto`` (GPUs when CUDA is available), ``cpu`` or ``cuda``."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ValueError("--device cuda: CUDA is not available on this machine")
    if device == "cuda" or (device == "auto" and has_cuda):
        return Machine("cuda", torch.cuda.get_device_name(0), torch.cuda.device_count(), cores)
    return Machine("cpu", "cpu", 0, cores)


@dataclass(frozen=True)
class Settings:
    """Sweep parameters (docs/bench.md, "Options"). Batch sizes in samples of ``seq_len`` tokens; ``threads``:
    intra-op threads per process (None: ``max(1, cores // processes)``); ``repeats``: runs of each configuration."""

    model: str
    seq_len: int
    precision: str
    steps: int
    warmup_steps: int
    global_batch: int
    micro_batches: tuple[int, ...]
    per_process_batch: int
    processes: tuple[int, ...]
    strategy_processes: int
    threads: int | None = None
    learning_rate: float = 1e-3
    seed: int = 0
    repeats: int = 2


CPU_DEFAULTS = Settings(
    model="small", seq_len=128, precision="fp32", steps=12, warmup_steps=3, global_batch=16,
    micro_batches=(1, 2, 4, 8, 16), per_process_batch=8, processes=(1, 2, 4), strategy_processes=2, threads=1)
"""Sized so that ``make bench`` (13 configurations, each measured twice) takes a few minutes on 2 cores; one thread
per process (docs/bench.md, "A run": one process on one core stands for one device)."""

GPU_DEFAULTS = Settings(
    model="large", seq_len=512, precision="bf16", steps=20, warmup_steps=5, global_batch=64,
    micro_batches=(4, 8, 16, 32, 64), per_process_batch=16, processes=(1, 2, 4), strategy_processes=4)


def default_settings(machine: Machine) -> Settings:
    """The GPU defaults on CUDA (the strategy sweep's processes capped at the GPUs present), else the CPU's."""
    if machine.device != "cuda":
        return CPU_DEFAULTS
    return replace(GPU_DEFAULTS, strategy_processes=min(GPU_DEFAULTS.strategy_processes, machine.devices))


@dataclass(frozen=True)
class Plan:
    """The runs to make, and the ones left out with the reason."""

    runs: list[RunSpec]
    skipped: list[tuple[str, str]]


def plan(settings: Settings, machine: Machine, sweeps: tuple[str, ...], out_dir: str) -> Plan:
    """Every run of ``sweeps``, in order, without a peak yet (see :func:`with_cpu_peaks`); a run needing more
    processes than GPUs is skipped, on CPU it runs oversubscribed; baselines: docs/bench.md, "The sweeps"."""
    if unknown := [s for s in sweeps if s not in SWEEPS]:
        raise ValueError(f"unknown sweep {', '.join(unknown)}; known: {', '.join(SWEEPS)}")
    prefix = f"bench-{slug(machine.platform)}-{settings.model}-{settings.precision}"
    runs: list[RunSpec] = []
    skipped: list[tuple[str, str]] = []

    def add(sweep: str, name: str, strategy: str, nprocs: int, micro: int, accum: int,
            baseline: str | None = None) -> None:
        experiment = f"{prefix}-{sweep}"
        run_id = f"{experiment}-{name}"
        if machine.device == "cuda" and nprocs > machine.devices:  # on CPU, oversubscription is allowed
            skipped.append((run_id, f"needs {nprocs} GPUs, {machine.devices} present"))
            return
        runs.append(RunSpec(
            experiment=experiment, run_id=run_id, out_dir=out_dir, model=settings.model,
            seq_len=settings.seq_len, device=machine.device, strategy=strategy, nprocs=nprocs,
            micro_batch_size=micro, grad_accum_steps=accum, steps=settings.steps,
            warmup_steps=settings.warmup_steps, precision=settings.precision,
            threads_per_process=settings.threads or max(1, machine.cores // nprocs),
            baseline_run_id=None if baseline is None else f"{experiment}-{baseline}",
            learning_rate=settings.learning_rate, seed=settings.seed,
            extra={"extra_sweep": sweep, "extra_cpu_cores": machine.cores,
                   "oversubscribed": machine.oversubscribed(nprocs)}))

    def batch_name(micro: int) -> str:
        return f"mb{micro}x{settings.global_batch // micro}"

    if "batch-size" in sweeps:
        for micro in settings.micro_batches:
            if settings.global_batch % micro:
                raise ValueError(f"micro-batch {micro} does not divide the global batch {settings.global_batch}")
            add("batch-size", batch_name(micro), "single", 1, micro, settings.global_batch // micro,
                baseline=batch_name(settings.micro_batches[0]))
    if "scaling" in sweeps:
        for nprocs in settings.processes:
            add("weak-scaling", f"p{nprocs}", "ddp", nprocs, settings.per_process_batch, 1)
        for nprocs in settings.processes:
            if settings.global_batch % nprocs:
                raise ValueError(f"{nprocs} processes do not divide the global batch {settings.global_batch}")
            add("strong-scaling", f"p{nprocs}", "ddp", nprocs, settings.global_batch // nprocs, 1)
    if "strategy" in sweeps:
        for strategy in ("ddp", "fsdp"):
            add("strategy", f"{strategy}-p{settings.strategy_processes}", strategy,
                settings.strategy_processes, settings.per_process_batch, 1,
                baseline=f"ddp-p{settings.strategy_processes}")
    return Plan(with_repeats(runs, settings.repeats), skipped)


def with_repeats(runs: list[RunSpec], repeats: int) -> list[RunSpec]:
    """Each run ``repeats`` times, as repeats of one configuration (docs/bench.md, "The sweeps"): run ids
    ``<run_id>-r<i>``, ``extra_configuration`` and ``extra_repeat = i``; whole passes one after the other;
    baselines name the first repeat of the baseline configuration. ``repeats = 1`` leaves ``runs`` as they are."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if repeats == 1:
        return runs
    by_experiment = groupby(sorted(runs, key=lambda r: r.experiment), key=lambda r: r.experiment)
    fewest = {experiment: min(alike, key=lambda r: r.nprocs).run_id for experiment, alike in by_experiment}
    return [replace(run, run_id=f"{run.run_id}-r{i}",
                    baseline_run_id=f"{run.baseline_run_id or fewest[run.experiment]}-r1",
                    extra={**run.extra, "extra_configuration": run.run_id, "extra_repeat": i})
            for i in range(1, repeats + 1) for run in runs]


def with_cpu_peaks(runs: list[RunSpec], peaks_tflops: dict[int, float], cores: int) -> list[RunSpec]:
    """``runs`` with one process's CPU peak as ``peak_tflops_per_gpu`` (TFLOP/s): ``peaks_tflops`` by thread count,
    times ``cores / (nprocs × threads)`` where processes time-share the cores; the measured one as
    ``extra_measured_peak_tflops``."""
    out = []
    for run in runs:
        measured = peaks_tflops[run.threads_per_process]
        share = min(1.0, cores / (run.nprocs * run.threads_per_process))
        out.append(replace(run, peak_tflops_per_gpu=measured * share,
                           extra={**run.extra, "extra_measured_peak_tflops": measured}))
    return out


def slug(text: str) -> str:
    """``text`` in lower case with runs of other characters than letters and digits as ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
