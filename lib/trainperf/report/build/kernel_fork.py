"""Start report kernels by forking one process that has already imported what the notebooks import.

``serve`` imports pandas, matplotlib, seaborn, SciPy and trainperf once (seconds a kernel would spend each time),
then waits on a Unix socket and forks a kernel per request: a copy of the imported modules, no notebook state, running
ipykernel as ``python -m ipykernel_launcher`` would. ``launch``, the command Jupyter starts, watches and signals as
the kernel, sends the server the kernel command, folder and environment, forwards its signals and exits with the
kernel's status; with no server to answer, it runs the kernel command itself. The server kills a kernel whose
``launch`` is gone and exits with its kernels when its standard input closes, on SIGTERM (even while it imports) or
when the build ends, even by SIGKILL (:func:`die_with_parent`). It also runs one function for the build
(``--call MODULE:FUNCTION``, :func:`call`: ``trainperf.report.page.read_ahead`` reads the inputs there once, and
every kernel forked after finds them in memory). It runs commands for whoever connects, so its socket lies in a
folder only its user can enter (:func:`trainperf.report.build.kernels.forked_kernels`) and it refuses other users
(:func:`_same_user`). It runs as a script importing nothing from trainperf at the top, so ``launch`` starts at once::

    python kernel_fork.py serve SOCKET [--call MODULE:FUNCTION] MODULE...  # prints "listening", then imports
    python kernel_fork.py launch SOCKET -- COMMAND...  # COMMAND: python ... -m ipykernel_launcher -f conn.json
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
from contextlib import suppress
from typing import Any

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)
"""Signals ``launch`` passes on to its kernel (Jupyter interrupts with SIGINT, stops with SIGTERM)."""
POLL_S = 0.05
"""How often the server looks for kernels that ended, seconds."""
PR_SET_PDEATHSIG = 1
"""Linux ``prctl`` option: the signal a process gets when its parent dies (``<linux/prctl.h>``)."""


def serve(address: str, modules: list[str], function: str | None = None) -> None:
    """Import ``modules``, then fork a kernel for each request on the Unix socket ``address``, and
    run ``function`` (``module:name``) in this process for each request to call it (:func:`call`)."""
    if sys.path and sys.path[0] in ("", os.path.dirname(os.path.abspath(__file__))):
        del sys.path[0]  # as ipykernel_launcher: the kernel's sys.path does not start with this script's folder
    signal.signal(signal.SIGTERM, _stop)  # asked to stop, even in the middle of the imports
    build = os.getppid()
    die_with_parent(signal.SIGTERM, build)  # a build killed outright stops its server, which stops its kernels
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    kernels: dict[socket.socket, int] = {}
    try:
        listener.listen(64)  # kernels asked for while the modules load wait here
        print("listening", flush=True)
        os.dup2(2, 1)  # nobody reads the pipe after this line: what the kernels print goes where the server's errors go
        os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as ipykernel sets it
        for name in modules:
            __import__(name)
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        selector.register(sys.stdin, selectors.EVENT_READ)
        while os.getppid() == build:  # the build that started the server may end without closing its pipe
            for key, _ in selector.select(POLL_S):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    if not _same_user(conn):
                        conn.close()
                        continue
                    request = json.loads(_read_line(conn))
                    if "call" in request:
                        _answer(conn, function, request)
                        continue
                    server = os.getpid()
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        listener.close()
                        for other in kernels:
                            other.close()
                        conn.close()
                        _run_kernel(request, server)
                    conn.sendall(f"{pid}\n".encode())
                    kernels[conn] = pid
                    selector.register(conn, selectors.EVENT_READ)
                elif key.fileobj is sys.stdin:
                    if not os.read(sys.stdin.fileno(), 4096):
                        return  # the build ended
                else:  # a launch process closed its end: it is gone, so is the need for its kernel
                    _signal(kernels[key.fileobj], signal.SIGKILL)
                    selector.unregister(key.fileobj)
            for conn, pid in list(kernels.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    with suppress(OSError):
                        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                    if conn in (key.fileobj for key in selector.get_map().values()):
                        selector.unregister(conn)
                    conn.close()
                    del kernels[conn]
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # on the way out already: a late SIGTERM must not interrupt it
        for pid in kernels.values():
            _signal(pid, signal.SIGKILL)
        listener.close()
        os.unlink(address)


def _run_kernel(request: dict, server: int) -> None:
    """In the child forked by the process ``server``: become the kernel
    ``python -m ipykernel_launcher ARGUMENTS`` would start; never returns."""
    code = 1
    try:
        die_with_parent(signal.SIGKILL, server)
        os.setsid()  # a session of its own, as Jupyter starts a kernel (and the scheduler shares out CPU by session)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for number in FORWARDED:
            signal.signal(number, signal.SIG_DFL)
        if "numpy" in sys.modules:  # a fresh process's global random state, not the server's copy
            sys.modules["numpy"].random.seed()
        sys.argv = ["ipykernel_launcher", *kernel_arguments(request["command"])]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:  # noqa: BLE001 -- shown on the kernel's stderr like any kernel that fails to start
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _answer(conn: socket.socket, function: str | None, request: dict) -> None:
    """Run ``function`` (``module:name``) on the request's arguments, with its environment, and send
    back one JSON line: ``{"result": what it returned}``, or ``{"error": why not}``; then close ``conn``."""
    saved = dict(os.environ)
    try:
        if function is None:
            raise LookupError("this server runs no function")
        module, name = function.split(":")
        os.environ.clear()
        os.environ.update(request["env"])
        answer = {"result": getattr(importlib.import_module(module), name)(*request["call"])}
    except Exception as exc:  # noqa: BLE001 -- the caller does the work itself instead
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    with suppress(OSError):
        conn.sendall(json.dumps(answer).encode() + b"\n")
    conn.close()


def call(address: str, arguments: list) -> Any:
    """What the function of the server at ``address`` returns for ``arguments`` (JSON), run in the
    server with this process's environment; OSError or ValueError when no server answers or the function failed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(address)
        conn.sendall(json.dumps({"call": arguments, "env": dict(os.environ)}).encode() + b"\n")
        answer = json.loads(_read_line(conn))
    if "result" not in answer:
        raise ValueError(f"the kernel server's function failed: {answer.get('error')}")
    return answer["result"]


def launch(address: str, command: list[str]) -> int:
    """Ask the server at ``address`` for the kernel ``command`` (``python ... -m ipykernel_launcher ARGUMENTS``)
    would start and wait for it to end; run ``command`` itself when no server answers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
        conn.sendall(json.dumps({"command": command, "cwd": os.getcwd(), "env": dict(os.environ)}).encode() + b"\n")
        pid = int(_read_line(conn))
    except (OSError, ValueError):
        os.execv(command[0], command)  # no server (it failed to start or ended): an ordinary kernel
    for number in FORWARDED:
        signal.signal(number, lambda sig, _frame: _signal(pid, sig))
    status = _read_line(conn)
    return int(status) if status else 1


def kernel_arguments(command: list[str]) -> list[str] | None:
    """The arguments of ``ipykernel_launcher`` in a kernel ``command``, or ``None``
    when the command does not start ipykernel as ``python ... -m ipykernel_launcher``."""
    for i in range(1, len(command) - 1):
        if command[i] == "-m":
            return command[i + 2:] if command[i + 1] == "ipykernel_launcher" else None
    return None


def die_with_parent(sig: int, parent: int) -> None:
    """Have Linux send this process ``sig`` when the thread that started it ends (``prctl(PR_SET_PDEATHSIG)``),
    and now when its parent, the process ``parent``, is already gone; nothing where there is no ``prctl``."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), sig)


def _same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of the Unix socket ``conn`` runs as this process's user, telling
    standard error when not (``SO_PEERCRED``; where there is none, the socket's private folder alone keeps others
    out)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid == os.getuid():
        return True
    print(f"trainperf kernel server: refused a connection from process {pid} of uid {uid} "
          f"(this server serves uid {os.getuid()} only)", file=sys.stderr, flush=True)
    return False


def _stop(_sig: int, _frame: object) -> None:
    raise SystemExit(0)  # ``serve`` kills its kernels on the way out


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _read_line(conn: socket.socket) -> str:
    """The next line ``conn`` receives (each side sends one, then waits for the answer), stripped."""
    with conn.makefile("rb") as received:
        return received.readline().decode().strip()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        called = sys.argv[4] if sys.argv[3:4] == ["--call"] else None
        with suppress(SystemExit):  # SIGTERM: the build is over
            serve(sys.argv[2], sys.argv[5:] if called else sys.argv[3:], called)
        sys.stdout.flush()
        sys.stderr.flush()
        # nothing left to save: no waiting for the imported modules' threads and teardown (0.4 s per build)
        os._exit(0)
    elif sys.argv[1:2] == ["launch"] and sys.argv[3:4] == ["--"]:
        sys.exit(launch(sys.argv[2], sys.argv[4:]))
    else:
        sys.exit(__doc__)
