"""Following a steps file while it is written (``trainperf watch``): the step lines appended since the last read,
at the cost of what was appended. The first read takes the header and at most :data:`FIRST_READ_BYTES` of the end
of the file; a line still being written is read once it is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainperf.runfolder.rankfile import FORMAT, LINE_COLUMNS, is_end, json_object

FIRST_READ_BYTES = 16 << 10
"""Bytes read from the end of a file the first time (about 70 recent steps)."""
HEADER_BYTES = 64 << 10
"""The most a header line may take."""


class StepsTail:
    """One rank's steps file, followed: :meth:`read` returns the step lines appended since the previous call as lists
    of values, in the order of :attr:`columns`; :attr:`closed` turns true once the end line is read;
    :attr:`bad_lines` counts the lines that could not be used (line numbers are not known in the middle of a file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: tuple[str, ...] = LINE_COLUMNS
        self.header: dict[str, Any] | None = None
        self.closed = False
        self.bad_lines = 0
        self._offset = 0

    def read(self) -> list[list[Any]]:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size <= self._offset:
            return []
        with open(self.path, "rb") as file:
            if self.header is None and not self._read_header(file, size):
                return []
            file.seek(self._offset)
            chunk = file.read(size - self._offset)
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        return self._rows(chunk[:end].split(b"\n"))

    def _read_header(self, file: Any, size: int) -> bool:
        """Read line 1; start after it, or :data:`FIRST_READ_BYTES` before the end of the file at the start of a line.
        False until line 1 is complete."""
        line = file.readline(HEADER_BYTES)
        if not line.endswith(b"\n"):
            return False
        header = json_object(line)
        if header is None or header.get("format") != FORMAT or not isinstance(header.get("columns"), list):
            self.bad_lines += 1
            header = {}
        self.header = header
        self.columns = tuple(header.get("columns") or LINE_COLUMNS)
        self._offset = len(line)
        if size - self._offset > FIRST_READ_BYTES:
            file.seek(size - FIRST_READ_BYTES)
            self._offset = size - FIRST_READ_BYTES + len(file.readline())  # past the rest of a line cut by the seek
        return True

    def _rows(self, lines: list[bytes]) -> list[list[Any]]:
        steps = [line for line in lines if line.startswith(b"[")]
        if len(steps) < len(lines):
            for line in lines:
                if line.startswith(b"{") and is_end(line):
                    self.closed = True
                elif not line.startswith(b"["):
                    self.bad_lines += 1
        try:
            rows = json.loads(b"[" + b",".join(steps) + b"]")
        except ValueError:  # a damaged line: read them one by one
            rows = []
            for line in steps:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    self.bad_lines += 1
        good = [row for row in rows if isinstance(row, list) and len(row) == len(self.columns)]
        self.bad_lines += len(rows) - len(good)
        return good

