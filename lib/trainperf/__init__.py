"""trainperf: measure how fast deep-learning training runs and how well it scales.

The runs table (``load_runs``), the step intervals (``load_steps``) and their summaries (``load_summaries``) flow
between the parts; ``derive`` adds every metric. The names load their modules when first used (the ``trainperf``
command starts without pandas; torch is never imported here), and a ``DataWarning`` prints as one line.
"""

import warnings
from importlib import import_module
from typing import TYPE_CHECKING

from trainperf.errors import DataError, DataWarning, format_warning

if TYPE_CHECKING:
    from trainperf.derived import derive
    from trainperf.reading.loading import load_runs, load_steps, load_summaries
    from trainperf.reading.run_folders import aggregate_steps
    from trainperf.profiler import StepProfiler, export_chrome_trace
    from trainperf.stragglers import find_straggler

_HOMES = {"derive": "trainperf.derived", "load_runs": "trainperf.reading.loading", "StepProfiler": "trainperf.profiler",
          "export_chrome_trace": "trainperf.profiler", "aggregate_steps": "trainperf.reading.run_folders",
          "load_steps": "trainperf.reading.loading", "load_summaries": "trainperf.reading.loading",
          "find_straggler": "trainperf.stragglers"}

__version__ = "0.1.0"

warnings.formatwarning = format_warning  # a DataWarning is shown as one line, without trainperf's source line

__all__ = ["DataError", "DataWarning", "StepProfiler", "__version__", "aggregate_steps", "derive", "find_straggler",
           "export_chrome_trace", "load_runs", "load_steps", "load_summaries"]


def __getattr__(name: str) -> object:
    """``trainperf.load_runs`` and the other names of ``__all__``, imported on first use."""
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'trainperf' has no attribute {name!r}")
