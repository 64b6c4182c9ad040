"""Start one bench run under torchrun and wait for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable

from trainperf.bench.spec import RunSpec

STEP_MARK: str = "trainperf-bench step "
"""Prefix of the line the main worker prints after each optimizer step."""

OUTPUT_TAIL_LINES: int = 40
STOP_GRACE_S = 30.0
"""Seconds torchrun is given to stop its workers before it is killed."""


class RunFailed(RuntimeError):
    """A bench run's torchrun exited with an error or ran out of time; the message ends with its output."""


def launch(spec: RunSpec, on_step: Callable[[], None] | None = None, timeout_s: float | None = None) -> None:
    """Run ``spec`` to completion into a fresh ``spec.run_dir`` (a previous folder of the run replaced), under
    ``torchrun --standalone`` (a free local port) with ``OMP_NUM_THREADS`` = the spec's threads per process.
    ``on_step`` is called once per optimizer step the main worker reports (warm-up included). Raises
    :class:`RunFailed`, with the tail of torchrun's output, when it fails or runs longer than ``timeout_s`` seconds;
    torchrun (and so its workers) is stopped then, or when this process is interrupted."""
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
