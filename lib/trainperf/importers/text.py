"""Reading log text: chunks of cleaned lines (gzip too), numbers, rank prefixes, timestamps, records wrapped over
lines (docs/importers.md, "Tolerance"). Line numbers are those of the file.
"""

from __future__ import annotations

import datetime as dt
import gzip
import math
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from trainperf.errors import DataError

CHUNK_BYTES = 8 << 20
LOOKAHEAD = 4
"""Lines kept back at the end of a chunk for joining wrapped records."""
WRAP_LINES = 2
"""A record may continue over at most this many following lines."""
MAX_LINE_BYTES = 64 << 20
"""A 'line' longer than this is cut: the file is not line-oriented text."""
MAX_SKIPPED_KEPT = 10_000
"""Unreadable lines kept with their reason; beyond that they are only counted."""

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_BARE_COLOUR = re.compile(r"\[[0-9;]{0,16}m")
_OVERWRITTEN = re.compile(r"[^\n]*\r(?!\n)")

NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?)"
"""A number as logs print it: optional sign, thousands separators (``12,345``), decimals, exponent, ``nan``/``inf``."""
_NUMBER = re.compile(rf"(?:{NUMBER})\Z")
_PAIR = re.compile(rf"({NUMBER})\s*/\s*(?:{NUMBER})")

_RANK_PREFIX = re.compile(
    r"\s*(?:\[(?:rank|default)(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:|(\d+): )")
"""Per-rank prefixes added by launchers: ``[rank3]:`` (torchrun ``--tee`` / ``--local-ranks-filter``),
``[default3]:`` (torchelastic), ``[1,3]<stdout>:`` (Open MPI ``--tag-output``), ``3: `` (Slurm ``srun --label``).
They nest (``0: [rank3]:`` from torchrun under ``srun -l``): the innermost names the rank."""
LEADING_TIME = r"\s*\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]?"
"""A timestamp a log collector writes at the start of a line (ISO date and time, maybe bracketed)."""
_LEADING_TIME = re.compile(rf"{LEADING_TIME}(?= )")

_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d):(\d\d)(?:[.,](\d{1,9}))?")


class LineError(Exception):
    """A line that looks like a record of the format but cannot be read (internal)."""


class CutLine(LineError):
    """A record line without the field its format prints last: cut, or wrapped onto the next lines. ``value``: what
    its other fields give, used where no continuation completes it (:func:`parse_wrapped`)."""

    def __init__(self, message: str, value: object) -> None:
        super().__init__(message)
        self.value = value


def number(text: str) -> float:
    """The value of a printed number (see :data:`NUMBER`); :class:`LineError` otherwise."""
    try:
        return float(text)
    except ValueError:
        pass
    text = text.strip()
    if not _NUMBER.match(text):
        raise LineError(f"{text[:40]!r} is not a number")
    return float(text.replace(",", ""))


def field_number(key: str, text: str | None) -> float:
    """The value of field ``key`` printed as ``text`` (:func:`number`; of a pair, :func:`current`); NaN where the
    field is absent (None); :class:`LineError` naming ``key`` if it is not a number."""
    if text is None:
        return math.nan
    try:
        return number(current(text))
    except LineError as exc:
        raise LineError(f"{key}: {exc}") from None


def current(text: str) -> str:
    """The first number of a printed pair ``X/Y``: of a ``current/average`` pair (``13100.0/13240.9``, as AMD's
    Primus prints Megatron's times and rates) the current, of a counter ``N/M`` the N; else ``text`` itself."""
    if "/" not in text:  # most figures: no pair, and no need for the pattern
        return text
    pair = _PAIR.fullmatch(text.strip())
    return pair.group(1) if pair is not None else text


def one_record(start: re.Pattern[str], body: str, end: int) -> None:
    """:class:`LineError` where a record's ``start`` matches ``body`` again from ``end``: two records on one line."""
    if start.search(body, end):
        raise LineError("two records on one line (interleaved output of several processes)")


def whole(text: str, what: str) -> int:
    """A non-negative whole number (thousands separators allowed)."""
    value = number(text)
    if not (math.isfinite(value) and value >= 0 and value == int(value)):
        raise LineError(f"{what} must be a whole number, not {text.strip()[:40]!r}")
    return int(value)


def rank_prefix(line: str) -> tuple[int | None, str]:
    """The rank named by the launcher prefixes at the start of ``line`` (the innermost of nested ones; None without
    any) and the line without them (a collector's timestamp before them is kept)."""
    if line[:1].isalpha():  # most record lines: neither a prefix nor a timestamp starts with a letter
        return None, line
    match = _RANK_PREFIX.match(line)
    kept = ""
    if match is None:
        stamp = _LEADING_TIME.match(line) if line[:1] in "[0123456789 " else None
        if stamp is None:
            return None, line
        match = _RANK_PREFIX.match(line, stamp.end())
        if match is None:
            return None, line
        kept = line[:stamp.end()] + " "
    rank = None
    while match is not None:
        rank = int(match.group(match.lastindex or 1))
        end = match.end()
        match = _RANK_PREFIX.match(line, end)
    return rank, kept + line[end:]


_MINUTE_SECONDS: dict[str, float] = {}


def timestamp(text: str) -> float:
    """Seconds since 1970 (naive local time taken as UTC) of the first ``YYYY-MM-DD HH:MM:SS[.,fraction]`` in
    ``text``; NaN if there is none."""
    match = _TIMESTAMP.search(text)
    if match is None:
        return math.nan
    minute, seconds, fraction = match.groups()
    base = _MINUTE_SECONDS.get(minute)
    if base is None:
        try:
            day = dt.datetime.strptime(minute[:10], "%Y-%m-%d").replace(tzinfo=dt.timezone.utc).timestamp()
        except ValueError:
            return math.nan
        hours, minutes = int(minute[11:13]), int(minute[14:16])
        if hours > 23 or minutes > 59:
            return math.nan
        base = _MINUTE_SECONDS[minute] = day + hours * 3600 + minutes * 60
    value = base + int(seconds)
    return value + int(fraction) / 10 ** len(fraction) if fraction else value


def _open(path: Path) -> BinaryIO:
    handle = open(path, "rb")
    if handle.read(2) == b"\x1f\x8b":
        handle.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    handle.seek(0)
    return handle


def clean(text: str) -> str:
    """Text without ANSI escapes, colour codes that lost their escape byte (``[32m``, in a text that also
    holds a reset code ``[0m``) and carriage-return overwrites (a lone ``\\r``, a progress bar redrawing its line,
    keeps only the text after the last one, as a terminal shows it); the line count is kept."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "[0m" in text:  # colour codes whose escape byte a collector dropped: "[[32m20251202 06:56:28[0m]"
        text = _BARE_COLOUR.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            text = _OVERWRITTEN.sub("", text)
    return text


READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a file can raise (a damaged gzip stream included)."""


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of the (decompressed) file."""
    try:
        with _open(path) as handle:
            return handle.read(size)
    except READ_ERRORS as exc:
        raise DataError(f"cannot read: {exc}", path=path) from exc


def iter_chunks(path: Path) -> Iterator[list[str]]:
    """The file's cleaned lines, a chunk (a list of whole lines, :data:`CHUNK_BYTES`) at a time."""
    try:
        with _open(path) as handle:
            rest = b""
            while data := handle.read(CHUNK_BYTES):
                data = rest + data
                cut = data.rfind(b"\n")
                if cut < 0 and len(data) < MAX_LINE_BYTES:
                    rest = data
                    continue
                if cut < 0:
                    cut = len(data) - 1
                rest = data[cut + 1:]
                # cleaned with its final newline, so a CRLF at the cut is not read as a lone carriage return
                yield clean(data[:cut + 1].decode("utf-8", errors="replace")).removesuffix("\n").split("\n")
            if rest:
                yield clean(rest.decode("utf-8", errors="replace")).split("\n")
    except READ_ERRORS as exc:
        raise DataError(f"cannot read: {exc}", path=path) from exc


class LineParser:
    """Base of the line-oriented parsers: feeds each line holding one of :attr:`anchors` to :meth:`handle` (the same
    as the line before it: :meth:`repeated_line`), which returns the lines it used; counts the unreadable lines."""

    anchors: tuple[str, ...] = ()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped: list[tuple[str, int, str]] = []
        self.skipped_total = 0
        self.lines = 0
        self.repeated = 0
        self._previous: str | None = None

    def handle(self, lines: list[str], i: int, number: int) -> int:
        raise NotImplementedError

    def skip(self, number: int, reason: str) -> None:
        """Count a line that could not be read (the first ones kept with their reason)."""
        self.skipped_total += 1
        if len(self.skipped) < MAX_SKIPPED_KEPT:
            self.skipped.append((str(self.path), number, reason))

    def consume(self, lines: list[str], first: int, final: bool) -> int:
        """Parse ``lines`` (the first is line ``first`` of the file); how many were consumed (all when ``final``,
        else all but the lookahead)."""
        stop = len(lines) if final else max(0, len(lines) - LOOKAHEAD)
        anchors = self.anchors
        handle = self.handle
        i = 0
        while i < stop:
            line = lines[i]
            for anchor in anchors:
                if anchor in line:
                    if line == (lines[i - 1] if i else self._previous) and line.strip():
                        i += self.repeated_line(lines, i, first + i)
                    else:
                        i += handle(lines, i, first + i)
                    break
            else:
                i += 1
        if i:
            self._previous = lines[i - 1]
        return i

    def repeated_line(self, lines: list[str], i: int, number: int) -> int:
        """Read ``lines[i]`` (line ``number``), the same as the line just before it: printed twice (a wrapper's
        echo), it is read once; the lines used."""
        self.repeated += 1
        return 1

    def notes(self) -> list[str]:
        """Notes on the lines read: those printed twice, read once."""
        return [f"{self.path}: {self.repeated} line(s) the same as the line just before them (printed twice, as some "
                "wrappers and collectors do, or by several ranks without a prefix) read once"] if self.repeated else []

    def read(self) -> None:
        carry: list[str] = []
        first = 1
        chunks = iter_chunks(self.path)
        pending = next(chunks, None)
        while pending is not None:
            following = next(chunks, None)
            lines = carry + pending if carry else pending
            used = self.consume(lines, first, following is None)
            carry = lines[used:]
            first += used
            pending = following
        self.lines = first - 1 + len(carry)


T = TypeVar("T")


def parse_wrapped(lines: list[str], i: int, parse: Callable[[str], T],
                  starts_record: Callable[[str], bool]) -> tuple[T, int]:
    """``parse(lines[i])``, or, when that fails, ``parse`` of the line joined with up to :data:`WRAP_LINES`
    continuation lines (none starts a record; a launcher's rank prefix on one is dropped; an echo of the line before
    it is passed over), and the lines used. Where no join reads, a :class:`CutLine` gives what the line itself has;
    any other first :class:`LineError` is raised again."""
    try:
        return parse(lines[i]), 1
    except LineError as error:
        first_error = error
    text = lines[i]
    j = i
    for _ in range(WRAP_LINES):
        j += 1
        while j < len(lines) and lines[j] == lines[j - 1]:
            j += 1  # a line printed twice: its echo continues nothing
        if j >= len(lines):
            break
        piece = rank_prefix(lines[j])[1]
        if not piece.strip() or starts_record(piece):
            break
        for joiner in ("", " "):
            try:
                return parse(text + joiner + piece), j - i + 1
            except LineError:
                pass
        text += piece
    if isinstance(first_error, CutLine):
        return first_error.value, 1  # type: ignore[return-value]
    raise first_error
