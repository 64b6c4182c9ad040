"""Errors and warnings about users' data, and the record a frame keeps of what it was read from (:func:`provenance`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable


class DataError(ValueError):
    """Input data that trainperf cannot use. The message names where, for the user to fix it: the file and, where
    they apply, the line or the row and column."""

    def __init__(self, message: str, *, path: object = None, row: object = None,
                 column: str | None = None, line: int | None = None) -> None:
        where = [text for value, text in ((path, str(path)), (line, f"line {line}"), (row, f"row {row}"),
                                          (column, f"column {column!r}")) if value is not None]
        self.path, self.row, self.column, self.line = path, row, column, line
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class UnknownFormat(DataError):
    """An input no reader recognises (TensorBoard event files without a known stack's tags or a mapping): one found
    in a folder is listed as skipped."""


class NoMeasuredSteps(DataError):
    """A run folder with no step after the warm-up (yet): a run still being written, or stopped in its warm-up."""


class DataWarning(UserWarning):
    """Data trainperf can use, with a gap the user should know of (an unknown platform leaves MFU empty, ...)."""


def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   line: str | None = None) -> str:
    """``DataWarning: message`` for a :class:`DataWarning` (about a user's data, not trainperf's source: no file, line
    number or source line); other warnings as Python formats them."""
    if issubclass(category, DataWarning):
        return f"{category.__name__}: {message}\n"
    return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning


class Record(tuple):
    """A tuple that :func:`copy.deepcopy` returns as it is: pandas deep-copies ``attrs`` into every frame an operation
    makes, and a record of what was read never changes (copying it took a quarter of the scaling report's analysis)."""

    def __deepcopy__(self, memo: dict) -> Record:
        return self


def provenance(**items: Iterable) -> dict[str, Record]:
    """``attrs`` for a frame: each of ``items`` (inputs read, skipped and why, warnings, …) as a :class:`Record`."""
    return {key: Record(values) for key, values in items.items()}
