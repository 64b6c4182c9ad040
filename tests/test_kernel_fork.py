"""Report kernels forked from a process that has imported the notebooks'
modules: each is a kernel of its own (its folder, environment and state),
starts without importing them again, and ends with its launch process; with
no server, the launch process starts an ordinary kernel."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from trainperf.report.build import kernel_fork
from trainperf.report.build.kernels import KERNEL, PRELOAD, SERVER_ENV, IPCKernelManager, forked_kernels

CHECK = ("import os, sys; print(os.getcwd(), os.environ.get('TP_TEST_MARK'), 'seaborn' in sys.modules, 'x' in dir(), "
         "os.getsid(0) == os.getpid())")


async def _run(km: IPCKernelManager, cwd: Path, code: str) -> tuple[str, int]:
    """Start a kernel in ``cwd``, run ``code``, then ``x = 1``; its printed output and its launch process id."""
    await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=CRITICAL"], cwd=str(cwd))
    try:
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=120)
        out: list[str] = []
        hook = (lambda msg: out.append(msg["content"]["text"]) if msg["msg_type"] == "stream" else None)
        await client.execute_interactive(code + "\nx = 1", timeout=120, output_hook=hook)
        client.stop_channels()
        return "".join(out).strip(), km.provisioner.pid
    finally:
        await km.shutdown_kernel(now=True)


def _spec() -> list[str]:
    return KernelSpecManager().get_kernel_spec(KERNEL).argv


@pytest.mark.slow
def test_forked_kernels_are_separate_and_start_with_the_modules_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("TP_TEST_MARK", "seen")
    with forked_kernels(_spec(), tmp_path) as forked:
        assert forked
        command = IPCKernelManager(kernel_name=KERNEL)
        command.connection_file = str(tmp_path / "c.json")
        assert "launch" in command.format_kernel_cmd()
        first, _ = asyncio.run(_run(IPCKernelManager(kernel_name=KERNEL), tmp_path, CHECK))
        second, _ = asyncio.run(_run(IPCKernelManager(kernel_name=KERNEL), tmp_path, CHECK))
    # imported once by the server; the folder and environment of the kernel asked for; no state of another
    # kernel; a session of its own, as Jupyter starts kernels (the scheduler shares CPU out by session)
    assert first == second == f"{tmp_path} seen True False True"
    assert SERVER_ENV not in os.environ  # restored at the end


@pytest.mark.slow
def test_without_a_server_the_launch_process_starts_an_ordinary_kernel(tmp_path, monkeypatch):
    gone = str(tmp_path / "no-server")
    monkeypatch.setenv(SERVER_ENV, json.dumps({"socket": gone, "prefix": _spec()[:_spec().index("-m")]}))
    out, _ = asyncio.run(_run(IPCKernelManager(kernel_name=KERNEL), tmp_path, CHECK))
    assert out == f"{tmp_path} None False False True"  # seaborn not imported: a kernel of its own


@pytest.mark.slow
def test_a_kernel_ends_when_its_launch_process_is_killed(tmp_path):
    async def start_and_kill() -> int:
        km = IPCKernelManager(kernel_name=KERNEL)
        await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=CRITICAL"], cwd=str(tmp_path))
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=120)
        reply = await client.execute_interactive("import os; print(os.getpid())", timeout=120,
                                                 output_hook=lambda msg: pids.append(msg["content"].get("text")))
        client.stop_channels()
        os.kill(km.provisioner.pid, signal.SIGKILL)
        await km.shutdown_kernel(now=True)
        return reply["content"]["status"]

    pids: list[str | None] = []
    with forked_kernels(_spec(), tmp_path):
        assert asyncio.run(start_and_kill()) == "ok"
        kernel = int(next(p for p in pids if p))
        deadline = time.monotonic() + 10
        while _alive(kernel) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(kernel)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (neither gone nor a zombie). A process that ends while its /proc entry is
    read makes the read fail with ESRCH (ProcessLookupError): it is gone."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


@pytest.mark.slow
def test_a_server_inside_another_is_the_same_and_a_server_stops_while_it_imports(tmp_path):
    """``trainperf report`` starts the server before it plans the build, and the build asks again: one server.
    A build refused on its arguments leaves at once, without waiting for the server's imports to finish."""
    with forked_kernels(_spec(), tmp_path) as outer:
        server = os.environ[SERVER_ENV]
        with forked_kernels(_spec(), tmp_path) as inner:
            assert outer and inner and os.environ[SERVER_ENV] == server
        assert os.environ[SERVER_ENV] == server
    assert SERVER_ENV not in os.environ and not Path(json.loads(server)["socket"]).exists()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {', '.join(PRELOAD)}"], check=True)
    imports = time.perf_counter() - start
    start = time.perf_counter()
    with forked_kernels(_spec(), tmp_path):
        socket = Path(json.loads(os.environ[SERVER_ENV])["socket"])
    assert time.perf_counter() - start < imports / 2 and not socket.exists()


def test_a_server_on_its_way_out_ignores_a_late_sigterm(tmp_path):
    """The build closes the server's input and stops it; a SIGTERM that arrives while the server is
    already exiting must not print a traceback into the build's output."""
    (tmp_path / "slow_exit.py").write_text("import atexit, time\natexit.register(time.sleep, 1.0)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, kernel_fork.__file__, "serve", str(tmp_path / "s"), "slow_exit"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert server.stdout.readline().strip() == b"listening"
    time.sleep(0.5)
    server.stdin.close()  # the build ended: the server leaves its loop; its exit waits in the atexit hook
    time.sleep(0.5)
    server.terminate()
    returncode = server.wait(timeout=20)
    errors = server.stderr.read().decode()
    assert returncode == 0 and "Traceback" not in errors, errors
