"""Append-only line files that survive the process being killed: whole lines (one, or a batch) go to the operating
system with one ``os.write`` when the writer hands them over (no user-space buffer), so a process killed with SIGKILL
loses no line handed over: the kernel writes the page cache out even after the process is gone.
"""

from __future__ import annotations

import os
from pathlib import Path


class LineFile:
    """A file opened for writing from scratch, written one line at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o644)

    def write(self, line: bytes) -> None:
        """Write complete lines (raises OSError on a full disk or I/O error)."""
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
