"""The signal a report notebook gives when its data cannot answer it.

A notebook raises :class:`NotApplicable` (usually through
:func:`trainperf.report.page.require`) with a sentence saying what is
missing and which column or profiler field would supply it. The build then
writes a short page with that sentence, marks the report "not applicable"
in the index, and does not count it as a failure.
"""

from __future__ import annotations

from trainperf.errors import DataError


class NotApplicable(DataError):
    """The selected data cannot answer this report (not an error in the data).

    The message names what is missing and what would supply it, e.g.
    ``no run has micro_batch_size: give the column, or profile with
    prof.step(samples=...)``.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"NotApplicable: {self}"]
