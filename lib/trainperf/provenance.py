"""What a frame was read from, kept in its ``attrs``: the inputs read, those
skipped and why, the warnings raised (:func:`provenance`)."""

from __future__ import annotations

from collections.abc import Iterable


class Record(tuple):
    """A tuple that :func:`copy.deepcopy` returns as it is. pandas deep-copies a
    frame's ``attrs`` into every frame an operation makes; a record of what was
    read is never changed, so the copies can share it (copying lists of paths
    and reasons took a quarter of the scaling report's analysis)."""

    def __deepcopy__(self, memo: dict) -> Record:
        return self


def provenance(**items: Iterable) -> dict[str, Record]:
    """``attrs`` for a frame: each of ``items`` (inputs, skipped inputs,
    warnings, …) as a :class:`Record`."""
    return {key: Record(values) for key, values in items.items()}
