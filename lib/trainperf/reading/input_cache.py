"""The runs read from each input, kept by content, for ``load_runs(..., cache=True)``: an entry ``inputs/<key>/``
of trainperf's cache folder holds the checked frame an input gave and the warnings its reading raised (raised
again on a hit); ``TRAINPERF_INPUT_CACHE=off`` reads every input every time. What an entry is made of and what
happens to one that does not check out: docs/data.md, "What the caches guarantee".
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa

from trainperf.reading.cache import (building, damaged, entries_dir, library_versions, open_entry, read_checked, seal,
                                     write_frame)
from trainperf.errors import DataWarning
from trainperf.importers.settings import sidecar_path

HASH_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Files hashed at once (a run of a thousand ranks has a thousand files)."""
KEY_LENGTH = 40
"""Hex digits of a key (160 bits)."""
KEEP = 512
"""Entries kept (one per input); the least recently written beyond this are removed."""
FRAME_FILE = "frame.parquet"
WARNINGS = {c.__name__: c for c in (DataWarning, *(v for v in vars(builtins).values()
                                                     if isinstance(v, type) and issubclass(v, Warning)))}
"""The warning classes an entry may name (a reader's warning of another class is kept as its nearest of these)."""


def cached(path: Path, kind: str, key: str | None, read: Callable[[], pd.DataFrame], on: bool = True) -> pd.DataFrame:
    """The runs of input ``path`` read as ``kind``: from the cache when its files and trainperf are unchanged since
    they were stored (``key``: its :func:`input_key`, when known), the warnings their reading raised raised again;
    else ``read()``, stored with its warnings. ``on`` False, or the cache off: ``read()``, nothing stored. An entry
    that does not check out is read again, with one warning."""
    folder = entries_dir("inputs") if on else None
    if folder is None:
        return read()
    entry = folder / (key or input_key(path, kind))
    try:
        content = open_entry(entry)
        frame = read_checked(entry, FRAME_FILE, content["files"])
        raised = [(WARNINGS[name], message) for name, message in content["warnings"] if isinstance(message, str)]
    except Exception as exc:  # anything a damaged entry raises: read again
        if entry.exists():
            damaged("input cache entry", entry, exc, f"{path} is read again")
        frame = None
    if frame is None:
        with warnings.catch_warnings(record=True, action="always") as caught:
            frame = read()
        raised = [(w.category, str(w.message)) for w in caught]
        _store(entry, frame, raised)
    for category, message in raised:
        warnings.warn(message, category, stacklevel=2)
    return frame


def input_key(path: Path, kind: str) -> str:
    """The cache key of input ``path`` read as ``kind`` (hex digest) of the kind, the resolved path, the SHA-256 of
    every file it holds and of its sidecar ``<path>.trainperf.yaml``, trainperf's source and the versions of the
    libraries that shape what is stored: a changed, added or removed file, or another version, has another key."""
    resolved = Path(path).resolve()
    digest = hashlib.sha256()
    for part in (kind, str(resolved), source_digest(), library_versions()):
        digest.update(part.encode() + b"\0")
    files = sorted(resolved.rglob("*")) if resolved.is_dir() else [resolved]
    files = [f for f in (*files, sidecar_path(resolved)) if f.is_file()]
    with ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:  # hashlib releases the GIL on large buffers
        for file, content in zip(files, pool.map(file_digest, files)):
            digest.update(str(file.relative_to(resolved.parent)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:KEY_LENGTH]


def file_digest(path: Path) -> bytes:
    """SHA-256 digest of the file's content (twice BLAKE2's speed where the CPU has SHA instructions)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").digest()


@functools.cache
def source_digest() -> str:
    """Digest of trainperf's installed source (every file of the package except bytecode)."""
    root = Path(__file__).resolve().parents[1]  # trainperf, the package above this one
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + file_digest(file))
    return digest.hexdigest()[:KEY_LENGTH]


def _store(entry: Path, frame: pd.DataFrame, raised: list[tuple[type[Warning], str]]) -> None:
    """Write the entry (:func:`trainperf.reading.cache.building`: two notebooks may store the same one at once); a
    cache that cannot be written, or a frame Parquet cannot hold, only costs time."""
    with suppress(OSError, ValueError, TypeError, pa.ArrowException), building(entry, KEEP) as folder:
        write_frame(folder / FRAME_FILE, frame)
        nearest = [next(c.__name__ for c in category.__mro__ if WARNINGS.get(c.__name__) is c)  # itself or a base
                   for category, _ in raised]
        seal(folder, {"warnings": [[name, message] for name, (_, message) in zip(nearest, raised)]})
