"""trainperf's cache folder and what its entries are made of (the CPU peak measured on this machine, the input
cache, the step-intervals store): a folder of Parquet files, every page with its CRC-32 checksum, and an
``entry.json`` recording each file, itself checksummed (:func:`seal`); no pickle. Entries are built in a private
temporary folder and renamed into place (:func:`building`); a writer that shares work holds a lock file naming it
(:func:`holding`). What is checked, and what happens on damage: docs/data.md, "What the caches guarantee".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from trainperf.errors import DataWarning

ENTRY_FILE = "entry.json"
OFF = "TRAINPERF_INPUT_CACHE"
"""Environment variable: ``off`` turns the input cache and the step-intervals store off (every input read every
time)."""
LOCK_TIMEOUT = "TRAINPERF_LOCK_TIMEOUT_S"
"""Environment variable: seconds a lock's holder may show no sign of life before a waiter stops waiting."""
LOCK_TIMEOUT_S = 30.0
"""Default of :data:`LOCK_TIMEOUT`."""
TELL_AFTER_S = 5.0
"""Seconds of waiting for a lock after which its holder is named (once)."""
HEARTBEAT_S = 1.0
"""Seconds between a lock holder's signs of life (the lock file's modification time)."""
TEMP_AGE_S = 24 * 3600.0
"""Age (seconds) after which a temporary folder of a writer on another host is swept."""
VERSIONED = ("pandas", "numpy", "pyarrow", "dask")
"""Libraries whose versions shape what a cache stores (they are part of every key)."""
_TEMP = re.compile(r"^\.[0-9a-f]+-(?P<host>[A-Za-z0-9.]*)-(?P<pid>\d+)-[a-z0-9_]+$")
"""The name :func:`temp_folder` gives: ``.<key>-<host>-<pid>-<random>``."""


_kept: dict[str, tuple[dict[str, Any], pd.DataFrame]] = {}
"""Frames :func:`keeping` kept, by file: the record they were read with, the frame."""
_keeping = False
"""Whether :func:`read_checked` keeps what it reads (inside :func:`keeping`)."""


class Damaged(ValueError):
    """A cache entry that does not check out (it is built again)."""


def cache_dir() -> Path:
    """``$TRAINPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainperf``, else ``~/.cache/trainperf``."""
    if os.environ.get("TRAINPERF_CACHE_DIR"):
        return Path(os.environ["TRAINPERF_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainperf"


def entries_dir(name: str) -> Path | None:
    """Folder ``name`` (``inputs``, ``store``) of trainperf's cache folder; ``None`` when :data:`OFF` is ``off``."""
    return None if os.environ.get(OFF, "").lower() == "off" else cache_dir() / name


def private_dir(folder: Path) -> Path:
    """``folder`` (in the cache folder, or the cache folder itself), made with the cache folder where missing, each only
    its user can enter (0700); folders that exist keep their mode (a cache shared on purpose stays shared)."""
    cache_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@cache
def library_versions() -> str:
    """``name=version`` of each library in :data:`VERSIONED`, for cache keys."""
    return ",".join(f"{name}={version(name)}" for name in VERSIONED)


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    """``frame`` as Parquet (no index), every page with its CRC-32 checksum."""
    frame.to_parquet(path, index=False, write_page_checksum=True)


def read_frame(path: Path, columns: list[str] | None = None, filters: list | None = None) -> pd.DataFrame:
    """A Parquet file written by :func:`write_frame`, its ``columns`` of the rows that pass ``filters`` (pyarrow's),
    every page's checksum verified."""
    return pd.read_parquet(path, columns=columns, filters=filters, page_checksum_verification=True)


def read_checked(folder: Path, name: str, files: dict[str, Any]) -> pd.DataFrame:
    """File ``name`` of an entry in ``folder`` whose checked record is ``files`` (:func:`open_entry`): read whole, its
    columns and dtypes those recorded; from memory where :func:`keeping` kept it with that record (a copy)."""
    record = files[name]
    held = _kept.get(str(folder / name))
    if held is not None and held[0] == record:
        return held[1].copy(deep=False)
    frame = read_frame(folder / name)
    if {str(c): str(t) for c, t in frame.dtypes.items()} != record["dtypes"]:
        raise Damaged(f"{name} holds other columns or dtypes than recorded")
    if _keeping:
        _kept[str(folder / name)] = (record, frame.copy(deep=False))
    return frame


@contextmanager
def keeping() -> Iterator[None]:
    """Inside, every frame :func:`read_checked` reads is kept in this process's memory, where it reads it again,
    inside and after, while its entry records the same file: docs/data.md, "What the caches guarantee"."""
    global _keeping
    before, _keeping = _keeping, True
    try:
        yield
    finally:
        _keeping = before


def seal(folder: Path, content: dict[str, Any]) -> None:
    """Write ``folder``'s ``entry.json``: ``content``, and the record of every Parquet file below ``folder`` (size,
    footer SHA-256, dtypes), checksummed."""
    files = {str(p.relative_to(folder)): {**_footer(p), "dtypes": _dtypes(p)}
             for p in sorted(folder.rglob("*.parquet"))}
    body = {**content, "files": files}
    (folder / ENTRY_FILE).write_text(json.dumps({"sha256": _digest(body), "entry": body}))


def open_entry(folder: Path) -> dict[str, Any]:
    """The content :func:`seal` wrote in ``folder`` (with ``files``), once the record and every file's size and footer
    check out; ``FileNotFoundError`` when there is none, :class:`Damaged` (or what reading raised) when it does not."""
    sealed = json.loads((folder / ENTRY_FILE).read_bytes())
    if not isinstance(sealed, dict) or not isinstance(sealed.get("entry"), dict) \
            or sealed.get("sha256") != _digest(sealed["entry"]):
        raise Damaged(f"{ENTRY_FILE} does not match its checksum")
    body = sealed["entry"]
    for name, record in body["files"].items():
        if ".." in Path(name).parts or Path(name).is_absolute() or _footer(folder / name) != \
                {k: record[k] for k in ("size", "footer_sha256")}:
            raise Damaged(f"{name} is not the file recorded")
    return body


def _footer(path: Path) -> dict[str, Any]:
    """A Parquet file's size and its footer's SHA-256 (the footer's length is in the last 8 bytes)."""
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - 8, 0))
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or length + 12 > size:
            raise Damaged(f"{path.name} has no Parquet footer")
        handle.seek(size - 8 - length)
        return {"size": size, "footer_sha256": hashlib.sha256(handle.read(length)).hexdigest()}


def _dtypes(path: Path) -> dict[str, str]:
    """Column name: pandas dtype, of a Parquet file's schema."""
    return {str(c): str(t) for c, t in pq.read_schema(path).empty_table().to_pandas().dtypes.items()}


def _digest(body: Any) -> str:
    """SHA-256 of ``body`` as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def temp_folder(root: Path, key: str) -> Path:
    """A new private folder in ``root`` to build entry ``key`` in, named after its writer (host and pid) so that
    :func:`prune` knows when it is left over."""
    return Path(tempfile.mkdtemp(prefix=f".{key}-{_host()}-{os.getpid()}-", dir=root))


@contextmanager
def building(entry: Path, keep: int) -> Iterator[Path]:
    """A :func:`temp_folder` to build ``entry`` in, renamed into place when the block ends, so that no reader sees half
    of one (where another writer's was renamed there first, it is kept); then the cache folder is pruned to ``keep``
    entries. Raises what the block raised; OSError where the cache cannot be written."""
    folder = temp_folder(private_dir(entry.parent), entry.name)
    try:
        yield folder
        os.rename(folder, entry)
    except OSError:
        if not entry.is_dir():
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    prune(entry.parent, keep)


def damaged(what: str, folder: Path, exc: Exception, then: str) -> None:
    """Say once that the entry in ``folder`` (``what``: of which cache) is not readable and ``then`` what is done
    instead, and remove it, to be built again."""
    warn_once(f"{what} {folder} is not readable ({type(exc).__name__}: {exc}): {then}")
    shutil.rmtree(folder, ignore_errors=True)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "", socket.gethostname())


def _alive(pid: int) -> bool:
    try:
        with suppress(PermissionError):  # another user's process
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def holding(lock: Path) -> Iterator[bool]:
    """Hold the lock file ``lock`` (an exclusive ``flock``; the file names its holder: pid, host, since, and its
    modification time is the holder's last sign of life); how a waiter names, breaks or gives up on another holder:
    docs/data.md, "What the caches guarantee". Yields whether the lock is held."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): builds at once only duplicate work, the rename keeps one
        yield False
        return
    bound = float(os.environ.get(LOCK_TIMEOUT) or LOCK_TIMEOUT_S)
    started, told = time.monotonic(), False
    while (fd := _try_lock(lock, fcntl)) is None:
        holder, idle = _holder(lock)
        waited = time.monotonic() - started
        mine = holder.get("host") == socket.gethostname()  # as the holder wrote it (_host() keeps no hyphen)
        if mine and isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):
            lock.unlink(missing_ok=True)  # the holder is gone: its lock is broken
            continue
        if waited >= bound and idle >= bound:
            warnings.warn(f"{lock} is held by {_named(holder)}, which showed no sign of life for {idle:.0f} s "
                          "(stopped?): going on without it", DataWarning, stacklevel=3)
            yield False
            return
        if not told and waited >= TELL_AFTER_S:
            told = True
            warnings.warn(f"waiting for {lock}, held by {_named(holder)} (gives up after {bound:.0f} s without a "
                          f"sign of life: ${LOCK_TIMEOUT})", DataWarning, stacklevel=3)
        time.sleep(0.1)
    done = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(fd, done), daemon=True)
    beat.start()
    try:
        yield True
    finally:
        done.set()
        beat.join()
        lock.unlink(missing_ok=True)
        os.close(fd)


def _try_lock(lock: Path, fcntl: Any) -> int | None:
    """The lock file's descriptor, locked and naming this process; None when another holds it."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock).st_ino:  # broken (removed) while we took it: take the new one
            raise BlockingIOError
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode())
    return fd


def _holder(lock: Path) -> tuple[dict[str, Any], float]:
    """What the lock file says of its holder (empty when unreadable), and the seconds since its last sign of life."""
    try:
        idle = time.time() - lock.stat().st_mtime
    except OSError:  # released meanwhile, or its folder is gone: nothing to wait for
        return {}, float("inf")
    holder = {}
    with suppress(OSError, ValueError):
        holder = json.loads(lock.read_bytes())
    return (holder if isinstance(holder, dict) else {}), idle


def _named(holder: dict[str, Any]) -> str:
    if not holder:
        return "a process that did not say who it is"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


def _heartbeat(fd: int, done: threading.Event) -> None:
    with suppress(OSError):  # the first failure ends the signs of life
        while not done.wait(HEARTBEAT_S):
            os.utime(fd)


def prune(root: Path, keep: int) -> None:
    """Keep the ``keep`` most recently written entries in ``root`` (folders not starting with ``.``), and remove what
    writers that are gone left there (the :func:`temp_folder` of a process that has ended on this host, or older than
    :data:`TEMP_AGE_S` on another) and what an older layout left (``*.pkl``, ``*.tmp``: never opened)."""
    try:
        found = list(root.iterdir())
        entries = sorted((p for p in found if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for old in found:
        name = _TEMP.match(old.name)
        with suppress(OSError):
            if name and (not _alive(int(name["pid"])) if name["host"] == _host() else
                         time.time() - old.stat().st_mtime > TEMP_AGE_S):
                shutil.rmtree(old, ignore_errors=True)
            elif old.suffix in (".pkl", ".tmp") and old.is_file():
                old.unlink(missing_ok=True)


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """A DataWarning with ``message``, once per process (a damaged entry is named once, not at every read)."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, DataWarning, stacklevel=3)
