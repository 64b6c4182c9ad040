"""Run a sweep plan: measure the CPU peak, launch every run under torchrun and wait for it, show progress."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from tqdm import tqdm

from trainperf.bench.model import counted_flops_per_token, model_config
from trainperf.bench.spec import STEP_MARK, RunSpec
from trainperf.bench.sweeps import Machine, Plan, Settings, with_cpu_peaks
from trainperf.errors import DataError
from trainperf.profiler.peak_flops import measure_peak_flops
from trainperf.runfolder.reader import open_run_folder, read_ranks

OUTPUT_TAIL_LINES: int = 40
STOP_GRACE_S = 30.0
"""Seconds torchrun is given to stop its workers before it is killed."""


class RunFailed(RuntimeError):
    """A bench run's torchrun exited with an error or ran out of time; the message ends with its output."""


def launch(spec: RunSpec, on_step: Callable[[], None] | None = None, timeout_s: float | None = None) -> None:
    """Run ``spec`` into a fresh ``spec.run_dir`` under ``torchrun --standalone``; ``on_step`` is called per step
    the main worker reports. Raises :class:`RunFailed` when it fails or runs longer than ``timeout_s`` seconds;
    torchrun is stopped then, or when this process is interrupted."""
    if spec.run_dir.exists():
        shutil.rmtree(spec.run_dir)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={spec.nprocs}",
               "-m", "trainperf.bench.worker", spec.to_json()]
    environment = {**os.environ, "OMP_NUM_THREADS": str(spec.threads_per_process), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        _stop(process)

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
    try:
        if timer:
            timer.start()
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(STEP_MARK):
                if on_step:
                    on_step()
            else:
                tail.append(line.rstrip("\n"))
        code = process.wait()
    except BaseException:
        _stop(process)
        raise
    finally:
        if timer:
            timer.cancel()
    output = "\n".join(tail)
    if timed_out.is_set():
        raise RunFailed(f"run {spec.run_id} did not finish within {timeout_s:.0f} s\n{output}")
    if code != 0:
        raise RunFailed(f"run {spec.run_id} failed (torchrun exit {code})\n{output}")


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM to torchrun, which forwards it to its workers; SIGKILL after :data:`STOP_GRACE_S`."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Outcome:
    """What a sweep produced: runs finished, out of memory (``too_big``, with where), failed (with the
    error) and skipped (with the reason), and ``wall_s``, the sweep's wall-clock seconds."""

    finished: list[RunSpec] = field(default_factory=list)
    too_big: list[tuple[RunSpec, str]] = field(default_factory=list)
    failed: list[tuple[RunSpec, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    wall_s: float = 0.0


def out_of_memory(spec: RunSpec) -> str:
    """The steps of ``spec``'s run that ran out of memory (``rank R step S; ...``), '' where none did."""
    try:
        steps = read_ranks(open_run_folder(spec.run_dir))[1]["out_of_memory"]
    except (DataError, OSError, ValueError):
        return ""
    return "; ".join(f"rank {rank} step {step}" for rank, step, _ in steps)


def describe(settings: Settings, machine: Machine, sweep_plan: Plan) -> list[str]:
    """Lines that say what the sweep will do, before it starts."""
    config = model_config(settings.model, settings.seq_len)
    where = (f"{machine.devices} x {machine.platform}" if machine.device == "cuda"
             else f"CPU, {machine.cores} cores")
    lines = [
        f"bench on {where}: model {settings.model} ({config.n_params / 1e6:.2f} M parameters, "
        f"{config.n_layers} layers, width {config.d_model}, context {config.seq_len}), {settings.precision}, "
        f"{settings.warmup_steps} warm-up + {settings.steps} measured steps per run",
        f"{len(sweep_plan.runs)} runs in {len({r.experiment for r in sweep_plan.runs})} experiments",
    ]
    if crowded := sorted({r.nprocs for r in sweep_plan.runs if machine.oversubscribed(r.nprocs)}):
        counts = ", ".join(map(str, crowded))
        lines.append(
            f"WARNING: runs with {counts} processes outnumber the {machine.cores} CPU cores; the processes "
            "time-share the cores, so their scaling figures measure oversubscription, not the hardware.")
    lines += [f"skipped {run_id}: {why}" for run_id, why in sweep_plan.skipped]
    return lines


def run_sweeps(sweep_plan: Plan, settings: Settings, machine: Machine, *, progress: bool = True,
               timeout_s: float | None = None, echo: Callable[[str], None] = print) -> Outcome:
    """Measure every run of ``sweep_plan`` in turn, on CPU after the matmul peak per thread count; each records
    ``extra_counted_flops_per_token``. A run out of memory is listed apart (its folder stays); after it, or any
    other failure, the sweep goes on."""
    started = time.perf_counter()
    for line in describe(settings, machine, sweep_plan):
        echo(line)
    counted = counted_flops_per_token(model_config(settings.model, settings.seq_len))
    runs = [replace(r, extra={**r.extra, "extra_counted_flops_per_token": counted}) for r in sweep_plan.runs]
    if machine.device == "cpu" and runs:
        dtype = torch.bfloat16 if settings.precision == "bf16" else torch.float32
        threads = sorted({r.threads_per_process for r in runs})
        peaks = {n: measure_peak_flops(dtype=dtype, threads=n) / 1e12 for n in threads}  # TFLOP/s by thread count
        echo(f"measured CPU matmul peak ({settings.precision}): " + ", ".join(
            f"{n} thread(s) {tflops * 1e3:.1f} GFLOP/s" for n, tflops in peaks.items()))
        runs = with_cpu_peaks(runs, peaks, machine.cores)
    outcome = Outcome(skipped=list(sweep_plan.skipped))
    total_steps = sum(r.warmup_steps + r.steps for r in runs)
    with tqdm(total=total_steps, unit="step", disable=not progress, dynamic_ncols=True) as bar:
        for spec in runs:
            bar.set_description(spec.run_id)
            before = bar.n
            try:
                launch(spec, on_step=lambda: bar.update(1), timeout_s=timeout_s)
                outcome.finished.append(spec)
            except RunFailed as exc:
                if where := out_of_memory(spec):
                    outcome.too_big.append((spec, where))
                    bar.write(f"does not fit: {spec.run_id} ran out of memory at {where}")
                else:
                    outcome.failed.append((spec, str(exc)))
                    bar.write(f"FAILED {exc}")
            bar.update(before + spec.warmup_steps + spec.steps - bar.n)
    outcome.wall_s = time.perf_counter() - started
    return outcome
