"""Jupyter kernels that start together without racing for ports, forked from a process that has imported the
notebooks' modules once.

Over TCP a client picks five free ports (bind to port 0, read the number, close) for the kernel to bind a moment
later, so kernels started at once (notebooks built in parallel, test workers) can get the same port and die with
``ZMQError: Address already in use``: :class:`IPCKernelManager` uses ZeroMQ's IPC transport instead, its sockets in
a folder only its user can enter (to connect or to read the connection file there), and :func:`forked_kernels` forks
each kernel from a server (:mod:`trainperf.report.build.kernel_fork`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum, Type, default

from trainperf.report.build import kernel_fork

KERNEL = "trainperf"
"""Jupyter kernel the report notebooks run in: the project's venv, registered by ``make setup``."""
IPC_PREFIX = "trainperf-kernel-"
SERVER_ENV = "TRAINPERF_KERNEL_SERVER"
"""Environment variable naming the server of :func:`forked_kernels` (JSON: its socket and kernel command prefix)."""
PRELOAD = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger", "IPython.core.debugger",
           "IPython.core.completerlib", "IPython.extensions.storemagic", "sqlite3", "IPython.display",
           "matplotlib.backends.backend_svg", "pandas", "seaborn", "trainperf", "trainperf.compare",
           "trainperf.report.batch_size", "trainperf.report.html", "trainperf.report.page",
           "trainperf.report.platforms", "trainperf.report.run_labels",
           "trainperf.report.scaling", "trainperf.report.theme", "trainperf.report.throughput")
"""What a report kernel imports as it starts (debugger, history, completer, SVG backend) and what the notebooks
import (never torch; not the inline backend: :func:`trainperf.report.theme.apply`), once, in the kernel server."""
READ_AHEAD = "trainperf.report.page:read_ahead"
"""The function the kernel server runs for :func:`read_ahead`."""
EXIT_POLL_S = 0.01
"""Seconds between two looks at whether a stopping kernel has exited (jupyter_client's: 0.1)."""


class ReadyClient(AsyncKernelClient):
    """A kernel client ready as soon as its kernel has answered ``kernel_info`` and its IOPub channel carries
    the kernel's messages: jupyter_client's then waits until IOPub has been quiet for 0.2 s, which nbclient
    does not need (it reads only the messages each cell's request caused)."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Ask the kernel for its ``kernel_info`` until it answers, within ``timeout`` seconds (None: no limit);
        ``RuntimeError`` when the kernel dies first or the time is up."""
        deadline = time.monotonic() + (math.inf if timeout is None else timeout)
        while True:
            self.kernel_info()
            reply = None
            with suppress(Empty):
                reply = await self.shell_channel.get_msg(timeout=1)
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)  # IOPub is connected: a status message came
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


class IPCKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernel listens on Unix sockets ``<tmp>/trainperf-kernel-<random>/k-<n>``
    instead of TCP ports, in a folder of its own (mode 0700) with its connection file, removed at shutdown."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
    client_factory = Type(ReadyClient, klass=AsyncKernelClient, config=True)

    @default("ip")
    def _private_ipc_path(self) -> str:
        return os.path.join(self._folder, "k")  # Unix socket paths are limited to about 100 bytes: a short name

    @default("connection_file")
    def _private_connection_file(self) -> str:
        return os.path.join(self._folder, "kernel.json")

    @property
    def _folder(self) -> str:
        """This kernel's folder, made on first use."""
        if not getattr(self, "_made", None):
            self._made = tempfile.mkdtemp(prefix=IPC_PREFIX)
        return self._made

    async def _async_wait(self, pollinterval: float = EXIT_POLL_S) -> None:
        """Wait for the kernel to exit, looking every :data:`EXIT_POLL_S` seconds (jupyter_client's 0.1 s adds a
        tenth of a second to each report)."""
        await super()._async_wait(pollinterval=min(pollinterval, EXIT_POLL_S))

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart and getattr(self, "_made", None):
            shutil.rmtree(self._made, ignore_errors=True)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        """The kernel command; inside :func:`forked_kernels`, one that asks its
        server for the kernel when the server serves this command."""
        command = super().format_kernel_cmd(extra_arguments)
        server = json.loads(os.environ.get(SERVER_ENV) or "null")
        if server and command[:len(server["prefix"])] == server["prefix"] \
                and kernel_fork.kernel_arguments(command) is not None:
            return [sys.executable, "-I", "-S", kernel_fork.__file__, "launch", server["socket"], "--", *command]
        return command


def kernel_command() -> list[str] | None:
    """The command that starts a :data:`KERNEL` kernel (its kernelspec's ``argv``); ``None``: not registered."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        return KernelSpecManager().get_kernel_spec(KERNEL).argv
    except NoSuchKernel:
        return None


@contextmanager
def forked_kernels(argv: list[str], cwd: Path) -> Iterator[bool]:
    """While inside, :class:`IPCKernelManager` kernels of the kernelspec command ``argv`` (``python ... -m
    ipykernel_launcher ...``), started here or in processes started from here, are forked from a server that has
    imported :data:`PRELOAD` (run by ``argv``'s Python in ``cwd``, or the one of an enclosing ``forked_kernels``
    for the same Python). Yields whether a server runs: none for a kernelspec that does not start ipykernel that
    way or where processes cannot fork. The server and its kernels end with this process, even killed outright."""
    prefix = argv[:argv.index("-m")] if "-m" in argv else []
    if not hasattr(os, "fork") or not prefix or kernel_fork.kernel_arguments(argv) is None:
        yield False
        return
    running = json.loads(os.environ.get(SERVER_ENV) or "null")
    if running and running["prefix"] == prefix:
        yield True
        return
    folder = tempfile.mkdtemp(prefix=IPC_PREFIX)  # only this user can enter it, so only this user can connect
    address = os.path.join(folder, "server")
    server = subprocess.Popen([*prefix, kernel_fork.__file__, "serve", address, "--call", READ_AHEAD, *PRELOAD],
                              cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        started = server.stdout.readline().strip() == b"listening"
        with environment(SERVER_ENV, json.dumps({"socket": address, "prefix": prefix}) if started else None):
            yield started
    finally:
        server.terminate()  # the server ends at once, even while it still imports, and kills any kernel still running
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """While inside, the environment variable ``name`` is ``value`` (None: as it is); after, as it was before."""
    saved = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def read_ahead(paths: list[str]) -> dict | None:
    """The pins of the inputs at or below ``paths`` (:func:`trainperf.reading.loading.pin_inputs`) as the
    kernel server of :func:`forked_kernels` read them, keeping what it read for the kernels it forks after;
    ``None`` where no server runs or it could not read them."""
    if server := json.loads(os.environ.get(SERVER_ENV) or "null"):
        with suppress(OSError, ValueError):
            return kernel_fork.call(server["socket"], paths)
    return None
