"""The data-quality section every report ends with, in one call: what was
read, what was left out and why, the figures emptied because they cannot be
true (``trainperf.invariants``), the empty or doubtful values, the conventions
behind the figures, and the sources' own figures against trainperf's.

A notebook shows it with ``quality.section(runs)`` under its ``## Data quality``
heading; the frames and sentences come from :mod:`trainperf.report.page`, the
tables are :func:`trainperf.report.theme.table` Stylers.
"""

from __future__ import annotations

import pandas as pd
from pandas.io.formats.style import Styler

from trainperf.aggregate import Summaries
from trainperf.report import page
from trainperf.report.html import Html, bullets, esc, fmt_pct
from trainperf.report.theme import table

SOURCE_FIGURES = ("Figures the sources printed themselves (reported_* columns) that differ from the figure trainperf "
                  f"recomputes by more than {fmt_pct(page.REPORTED_TOLERANCE)} and by more than the last digit the source printed. Difference = "
                  "(source − trainperf) / trainperf; fractions (MFU, efficiency) as fractions, trainperf's MFU against "
                  "the peak the source divided by where it names one; a printed peak of another device is not "
                  "comparable. Where they differ, the report uses trainperf's.")
"""What the "Source figures vs trainperf" part lists."""


def section(runs: pd.DataFrame, steps: Summaries | None = None, *, scaling: bool = True, mfu: bool = True) -> Html:
    """The data-quality section of a page showing ``runs`` (and the per-rank
    ``steps`` summaries, where the page reads them): its parts under ``h3``
    headings. Without ``scaling``, notes and conventions of the scaling
    multiplier are left out, without ``mfu`` the notes on HFU (for a report
    that shows none)."""
    differences = page.reported_differences(runs)
    parts = [
        ("Inputs read", [bullets(page.inputs_read(runs, steps))]),
        ("Skipped and why", [table(page.skipped(runs, steps), empty="Nothing was skipped.")]),
        ("Impossible figures, emptied", [table(page.impossible(runs, scaling=scaling), empty="No figure broke an invariant.")]),
        ("Empty or doubtful values", [table(page.note_counts(runs, scaling=scaling, mfu=mfu),
                                            empty="Every derived value of every run could be computed.")]),
        ("Conventions", [bullets(page.conventions(runs, scaling=scaling)),
                         table(page.peak_entries(runs),
                               caption="Peak table entries used for MFU (dense, never 2:4-sparse)")]),
        ("Source figures vs trainperf", [Html(f"<p>{esc(SOURCE_FIGURES)}</p>", SOURCE_FIGURES),
                                         table(page.difference_summary(differences), empty=page.NO_DIFFERENCES),
                                         table(differences.head(12), caption="The largest differences"),
                                         bullets(page.unverifiable_figures(runs))]),
    ]
    html = "".join(f'<h3 id="{_anchor(title)}">{esc(title)}</h3>' + "".join(_html(p) for p in shown)
                   for title, shown in parts)
    text = "\n\n".join(title + "\n" + "\n".join(_text(p) for p in shown) for title, shown in parts)
    return Html(html, text)


def _anchor(title: str) -> str:
    """The heading's id, as nbconvert makes one for a Markdown heading (spaces as hyphens)."""
    return title.replace(" ", "-")


def _html(part: Html | Styler) -> str:
    return part.to_html() if isinstance(part, Styler) else part.html


def _text(part: Html | Styler) -> str:
    return part.data.to_string(index=False) if isinstance(part, Styler) else part.text
