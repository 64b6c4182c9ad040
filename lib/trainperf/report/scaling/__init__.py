"""The scaling report: :func:`studies` picks the runs, :func:`analyse` computes the page once
(:class:`ScalingPage`) and :func:`what_to_change` ends it; docs/reports.md maps each figure to its function."""

from trainperf.report.scaling.analysis import ScalingPage, analyse, what_to_change
from trainperf.report.scaling.multipliers import studies

__all__ = ["ScalingPage", "analyse", "studies", "what_to_change"]
