"""Errors and warnings that trainperf raises about its users' data."""

from __future__ import annotations


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


class DataWarning(UserWarning):
    """Data trainperf can use, but with a gap the user should know about
    (an unknown platform leaves MFU empty, a rank stopped early, ...)."""
