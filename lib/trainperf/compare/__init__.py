"""Did a change make training faster, or use more memory or energy (``trainperf compare``; docs/statistics.md)?"""

from trainperf.compare.analysis import (PLOTTED_STEPS, STEPS_BASIS, Comparison, Side, compare, exposed_within_phases,
                                        plotted_steps, read_side)

__all__ = ["PLOTTED_STEPS", "STEPS_BASIS", "Comparison", "Side", "compare", "exposed_within_phases", "plotted_steps",
           "read_side"]
