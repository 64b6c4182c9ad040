"""Jupyter kernels that can start together without racing for ports.

A kernel talks to its client over five ZeroMQ sockets. Over TCP, the client
picks five free ports (bind to port 0, read the number, close) and the kernel
binds them a moment later; kernels started at the same moment (report
notebooks built in parallel, test workers) can be handed the same port in
between, and one of them dies with ``ZMQError: Address already in use``.

:class:`IPCKernelManager` uses ZeroMQ's IPC transport instead: each socket is
a Unix socket file under a path unique to the kernel (a random name in the
temporary folder), so no two kernels share an address and nothing is picked
and released. The files are removed when the kernel shuts down.
"""

from __future__ import annotations

import os
import tempfile
import uuid

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum, default

IPC_PREFIX = "trainperf-kernel-"


class IPCKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernel listens on Unix sockets
    ``<tmp>/trainperf-kernel-<random>-<n>`` (one name per kernel) instead of TCP ports."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _unique_ipc_path(self) -> str:
        # Unix socket paths are limited to about 100 bytes: keep the name short
        return os.path.join(tempfile.gettempdir(), f"{IPC_PREFIX}{uuid.uuid4().hex[:16]}")
