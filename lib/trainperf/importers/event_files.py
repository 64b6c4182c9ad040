"""TensorBoard event files: a run's log dir (its files, or one ``rank_<N>`` folder a rank), an event file told by
its content, and its scalars, read with the ``tensorboard`` package (the extra ``trainperf[tensorboard]``; it never
imports torch). A file is read up to a record cut short or damaged; the rest is reported (:class:`Damage`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainperf.errors import DataError

RANK_FOLDER = re.compile(r"rank[_-]?(\d+)")
"""A log dir's folder of one rank's event files (torchtitan: ``rank_3``)."""
FILE_VERSION = "brain.Event:"
"""How the first record of an event file starts its ``file_version``."""
FRAMING_BYTES = 16
"""Bytes a TFRecord adds to each record: its length (8), the length's CRC (4), the data's CRC (4)."""
INSTALL = "reading TensorBoard event files needs the tensorboard package: pip install 'trainperf[tensorboard]'"


def is_event_file_name(path: Path) -> bool:
    """Whether ``path`` is named as an event file (TensorBoard's own rule)."""
    return "tfevents" in path.name and not path.name.endswith(".profile-empty")


def log_dir_files(folder: Path) -> dict[int, list[Path]]:
    """The event files of each rank of the log dir ``folder``, in name order: its own as rank 0, or those of its
    ``rank_<N>`` folders; empty when it is no log dir; DataError for a folder holding both."""
    own = sorted(p for p in folder.iterdir() if p.is_file() and is_event_file_name(p))
    ranks = {int(match.group(1)): sorted(p for p in child.iterdir() if p.is_file() and is_event_file_name(p))
             for child in folder.iterdir() if child.is_dir() and (match := RANK_FOLDER.fullmatch(child.name))}
    ranks = {rank: files for rank, files in sorted(ranks.items()) if files}
    if own and ranks:
        raise DataError("holds event files both directly and in rank folders: name one log dir "
                        f"({own[0].name}; {', '.join(f'rank_{r}' for r in ranks)})", path=folder)
    return {0: own} if own else ranks


def is_event_file(path: Path) -> bool:
    """Whether ``path``'s first record is a TFRecord holding an event-file header, whatever its name; DataError
    where it is named as an event file and the tensorboard package is not installed."""
    try:
        from google.protobuf.message import DecodeError
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:
        if is_event_file_name(path):
            raise DataError(INSTALL, path=path) from None
        return False
    first = next(iter(RawEventFileLoader(str(path)).Load()), None)
    if first is None:
        return False
    try:
        return Event.FromString(first).file_version.startswith(FILE_VERSION)
    except DecodeError:
        return False


@dataclass(frozen=True)
class Damage:
    """Where reading an event file stopped: the first record not read (1-based), its byte offset, the bytes unread."""

    path: Path
    record: int
    offset: int
    unread_bytes: int

    def __str__(self) -> str:
        return (f"{self.path}: record {self.record} (byte {self.offset:,}) is cut short or damaged; "
                f"the {self.unread_bytes:,} bytes from there on are not read (a job stopped while writing?)")


@dataclass
class Scalars:
    """The scalars of one rank's event files: each tag's steps and values as written (:meth:`series`), the records
    read (and how many held no event), and where a file could not be read to its end."""

    points: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    records: int = 0
    undecoded: int = 0
    damage: list[Damage] = field(default_factory=list)

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of ``tag`` in the order written (empty arrays if absent)."""
        steps, values = self.points.get(tag, ([], []))
        return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=float)


def read_scalars(files: list[Path]) -> Scalars:
    """The scalars of ``files``, read in that order: v1 ``simple_value`` (as ``torch.utils.tensorboard`` and
    tensorboardX write them) and v2 scalar tensors."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    except ImportError:
        raise DataError(INSTALL, path=files[0] if files else None) from None
    scalars = Scalars()
    values = _decoder()
    for path in files:
        read = count = 0
        for raw in RawEventFileLoader(str(path)).Load():
            count += 1
            read += len(raw) + FRAMING_BYTES
            found = values(raw)
            if found is None:
                scalars.undecoded += 1
                continue
            for tag, step, value in found:
                steps, points = scalars.points.setdefault(tag, ([], []))
                steps.append(step)
                points.append(value)
        scalars.records += count
        size = path.stat().st_size
        if read < size:
            scalars.damage.append(Damage(path, count + 1, read, size - read))
    return scalars


def _decoder() -> Callable[[bytes], list[tuple[str, int, float]] | None]:
    """A function giving ``(tag, step, value)`` of each scalar in a serialized event (None: no event); a v2
    scalar's tag is known by the metadata its first value carries."""
    from google.protobuf.message import DecodeError
    from tensorboard import data_compat
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.scalar.metadata import PLUGIN_NAME
    from tensorboard.util.tensor_util import make_ndarray

    scalar_tags: set[str] = set()

    def values(raw: bytes) -> list[tuple[str, int, float]] | None:
        try:
            event = Event.FromString(raw)
        except DecodeError:
            return None
        found = []
        for value in event.summary.value:
            if value.HasField("simple_value"):
                found.append((value.tag, event.step, float(value.simple_value)))
                continue
            value = data_compat.migrate_value(value)
            if value.metadata.plugin_data.plugin_name == PLUGIN_NAME:
                scalar_tags.add(value.tag)
            if value.tag in scalar_tags and value.HasField("tensor"):
                array = make_ndarray(value.tensor)
                if array.size == 1:
                    found.append((value.tag, event.step, float(array.reshape(-1)[0])))
        return found

    return values
