"""Did a change make training faster, or use more memory or energy (docs/statistics.md)? Its modules, from the
top layer down: ``cli`` (``trainperf compare``); ``format``, ``history``; ``analysis``; ``metrics``."""

from trainperf.compare.analysis import (PLOTTED_STEPS, STEPS_BASIS, Comparison, Side, compare, exposed_within_phases,
                                        plotted_steps, read_side)

__all__ = ["PLOTTED_STEPS", "STEPS_BASIS", "Comparison", "Side", "compare", "exposed_within_phases", "plotted_steps",
           "read_side"]
