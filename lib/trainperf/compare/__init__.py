"""Did a change make training faster, or use more memory or energy? A baseline against a candidate
(:mod:`~trainperf.compare.analysis`), the metrics judged (:mod:`~trainperf.compare.metrics`), a history of
accepted baselines (:mod:`~trainperf.compare.history`), the output formats (:mod:`~trainperf.compare.format`) and
``trainperf compare`` (:mod:`~trainperf.compare.cli`), layered in that order from the top down: docs/statistics.md."""

from trainperf.compare.analysis import (PLOTTED_STEPS, STEPS_BASIS, Comparison, Side, compare, exposed_within_phases,
                                        plotted_steps, read_side)

__all__ = ["PLOTTED_STEPS", "STEPS_BASIS", "Comparison", "Side", "compare", "exposed_within_phases", "plotted_steps",
           "read_side"]
