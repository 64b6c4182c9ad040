"""The scaling report: how much faster each experiment runs as devices are added, where the time goes, how
ranks differ, and what a fitted scaling law projects beyond the measured scale next to a straight line;
projections and the headline only from experiments that change nothing but the device count.

:func:`studies` picks the runs, :func:`analyse` computes the page once (:class:`ScalingPage`) and
:func:`what_to_change` ends it. The modules: :mod:`.studies` (the studies, their kind, what else changes),
:mod:`.multipliers` (the table of multipliers and efficiencies), :mod:`.time_spent` (phases, overhead),
:mod:`.ranks` (ranks and stragglers), :mod:`.serial` (the Karp–Flatt serial fraction), :mod:`.projection`
(fits and projections), :mod:`.cost`, :mod:`.analysis` (the page and its headline) and :mod:`.rules`
(what to change)."""

from trainperf.report.scaling.analysis import ScalingPage, analyse
from trainperf.report.scaling.rules import what_to_change
from trainperf.report.scaling.studies import studies

__all__ = ["ScalingPage", "analyse", "studies", "what_to_change"]
