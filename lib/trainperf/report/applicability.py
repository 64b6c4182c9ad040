"""The signal a report notebook gives when its data cannot answer it: the build
writes a short page with its sentence and marks the report "not applicable"."""

from __future__ import annotations

from trainperf.errors import DataError


class NotApplicable(DataError):
    """The selected data cannot answer this report (not an error in the data); the
    message names what is missing and what would supply it."""

    def _render_traceback_(self) -> list[str]:
        return [f"NotApplicable: {self}"]
