"""Errors and warnings that trainperf raises about its users' data."""

from __future__ import annotations

import warnings


class DataError(ValueError):
    """Input data that trainperf cannot use.

    The message names where the problem is: the file, and where it applies
    the line or the row and column, so a user can fix the input.
    """

    def __init__(self, message: str, *, path: object = None, row: object = None,
                 column: str | None = None, line: int | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        self.path, self.row, self.column, self.line = path, row, column, line
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class UnknownFormat(DataError):
    """An input that no reader recognises for what it holds (TensorBoard event
    files without the tags of a known stack or a mapping): where it was found
    in a folder it is listed as skipped, not read."""


class NoMeasuredSteps(DataError):
    """A run folder in which no rank recorded a step after the warm-up (yet):
    a run still being written, or one stopped during its warm-up."""


class DataWarning(UserWarning):
    """Data trainperf can use, but with a gap the user should know about
    (an unknown platform leaves MFU empty, a rank stopped early, ...)."""


def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   line: str | None = None) -> str:
    """``DataWarning: message`` for a :class:`DataWarning` (a user's data, not
    trainperf's source, is what it is about: no file name, line number or source
    line); other warnings as Python formats them."""
    if issubclass(category, DataWarning):
        return f"{category.__name__}: {message}\n"
    return _python_format_warning(message, category, filename, lineno, line)


def install_warning_format() -> None:
    """Make :func:`format_warning` Python's ``warnings.formatwarning`` (done on
    ``import trainperf``; the command line and notebook kernels show warnings through it)."""
    warnings.formatwarning = format_warning


_python_format_warning = warnings.formatwarning
