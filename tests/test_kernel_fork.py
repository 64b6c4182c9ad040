"""Report kernels forked from a process that has imported the notebooks'
modules: each is a kernel of its own (its folder, environment and state),
starts without importing them again, and ends with its launch process; with
no server, the launch process starts an ordinary kernel."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from trainperf.reading.loading import load_runs, pin_inputs
from trainperf.report.build import kernel_fork, kernels
from trainperf.report.build.kernels import KERNEL, PRELOAD, SERVER_ENV, IPCKernelManager, forked_kernels, read_ahead

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "bench-cpu-small-fp32-batch-size" / \
    "bench-cpu-small-fp32-batch-size-mb16x1-r1"
"""A one-rank run folder."""

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
def test_kernels_forked_after_the_server_read_ahead_find_the_inputs_in_its_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    run = shutil.copytree(RUN, tmp_path / RUN.name)
    load_runs(run, cache=True)  # its entries written: what is read ahead is read from them
    code = ("from trainperf.reading import cache, loading\n"
            "cache.read_frame = lambda path, *a, **k: print('read', path)\n"
            f"print(len(loading.load_summaries({str(run)!r}).per_rank), len(loading.load_runs({str(run)!r})))")
    with forked_kernels(_spec(), tmp_path) as forked:
        assert forked
        pins = read_ahead([str(run)])
        pinned = pin_inputs(run)[f"run:{run}"]
        assert pins == {f"run:{run}": {**pinned, "read_at": pins[f"run:{run}"]["read_at"]}}
        printed, _ = asyncio.run(_run(IPCKernelManager(kernel_name=KERNEL), tmp_path, code))
    assert printed == "1 1"  # one rank, one run, and no Parquet file read
    assert read_ahead([str(run)]) is None  # no server now


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
def test_a_server_inside_another_is_the_same_and_a_server_stops_while_it_imports(tmp_path, monkeypatch):
    """``trainperf report`` starts the server before it plans the build, and the build asks again: one server.
    A build refused on its arguments leaves at once, without waiting for the server's imports to finish: here
    the last module to import takes 20 s (a fixed sleep, not a race with another process's imports on a busy
    machine), and the build leaves in well under half of that."""
    with forked_kernels(_spec(), tmp_path) as outer:
        server = os.environ[SERVER_ENV]
        folder = Path(json.loads(server)["socket"]).parent  # only this user can enter it, so only this user connects
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
        with forked_kernels(_spec(), tmp_path) as inner:
            assert outer and inner and os.environ[SERVER_ENV] == server
        assert os.environ[SERVER_ENV] == server
    assert SERVER_ENV not in os.environ and not folder.exists()
    imports = 20.0
    (tmp_path / "slow_import.py").write_text(f"import time\ntime.sleep({imports})\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(kernels, "PRELOAD", (*PRELOAD, "slow_import"))
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


def test_kernel_sockets_and_connection_file_lie_in_a_folder_of_their_own_that_only_the_user_can_enter():
    first, second = IPCKernelManager(kernel_name=KERNEL), IPCKernelManager(kernel_name=KERNEL)
    folder = Path(first.ip).parent
    assert Path(first.connection_file).parent == folder and Path(second.ip).parent != folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    for km in (first, second):
        asyncio.run(km._async_cleanup_resources())
    assert not folder.exists() and not Path(second.ip).parent.exists()


def test_the_server_refuses_a_process_of_another_user_and_says_so(tmp_path):
    """Another user cannot enter the socket's folder; were the folder open, the server would still
    ask the kernel who connects (SO_PEERCRED). Here the server is made to believe it runs as
    another uid than this test's (so no privilege is needed), and this test connects."""
    other = os.getuid() + 1
    serve = (f"import os, sys; sys.path.insert(0, {str(Path(kernel_fork.__file__).parent)!r}); import kernel_fork; "
             f"os.getuid = lambda: {other}; kernel_fork.serve(sys.argv[1], [])")
    address = str(tmp_path / "s")
    server = subprocess.Popen([sys.executable, "-c", serve, address], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert server.stdout.readline().strip() == b"listening"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
        try:
            conn.sendall(json.dumps({"command": [sys.executable, "-m", "ipykernel_launcher"], "cwd": str(tmp_path),
                                     "env": {}}).encode() + b"\n")
            reply = conn.recv(100)
        except (BrokenPipeError, ConnectionResetError):  # closed before or after the request was read
            reply = b""
        assert reply == b""  # closed without a kernel's process id
        conn.close()
        assert psutil.Process(server.pid).children() == []
    finally:
        server.stdin.close()
        server.wait(timeout=20)
    assert server.stderr.read().decode() == (f"trainperf kernel server: refused a connection from process "
                                             f"{os.getpid()} of uid {os.getuid()} (this server serves uid {other} "
                                             "only)\n")


@pytest.mark.slow
def test_a_build_killed_outright_leaves_no_process_behind(tmp_path):
    """``kill -9`` of ``trainperf report`` while two notebooks run: the kernel server, its kernels,
    the launch processes and the build's workers all end (Linux tells each its parent died)."""
    for name in ("sleep_a", "sleep_b"):
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell("title = 'sleeps'", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("import time\ntime.sleep(600)")])
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": KERNEL, "language": "python"}
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    build = (f"import sys; from pathlib import Path; from trainperf.report.build import pipeline; "
             f"pipeline.NOTEBOOKS = Path({str(tmp_path)!r}); from trainperf.cli import main; "
             f"sys.exit(main(['report', '--jobs', '2', '--out', {str(tmp_path / 'out')!r}]))")
    process = subprocess.Popen([sys.executable, "-c", build], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(_kernels(process.pid)) < 2:
            time.sleep(0.2)
        assert len(_kernels(process.pid)) == 2, "the two kernels did not start"
        descendants = psutil.Process(process.pid).children(recursive=True)
        # the server, its two kernels, two workers and their two launch processes
        assert len(descendants) == 7, [p.cmdline() for p in descendants]
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p.pid) for p in descendants):
        time.sleep(0.1)
    assert [p.cmdline() for p in descendants if _alive(p.pid)] == []


def _kernels(build: int) -> list[psutil.Process]:
    """The kernels forked by the kernel server of the build ``build``."""
    try:
        servers = [p for p in psutil.Process(build).children() if "serve" in p.cmdline()]
        return [kernel for server in servers for kernel in server.children()]
    except psutil.NoSuchProcess:
        return []
