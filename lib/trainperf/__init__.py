"""trainperf: measure how fast deep-learning training runs and how well it scales.

The runs table (``load_runs``) and the steps table (``load_steps``) are the
only shapes that flow between parts; ``derive`` adds every metric. Importing
``trainperf`` does not import torch: the profiler and the bench load it lazily;
it makes a ``DataWarning`` print as one line (``DataWarning: message``).
"""

from trainperf.derive import derive
from trainperf.errors import DataError, DataWarning, install_warning_format
from trainperf.loading import load_runs
from trainperf.profiler import StepProfiler, export_chrome_trace
from trainperf.steps import aggregate_steps, load_steps
from trainperf.stragglers import find_straggler

__version__ = "0.1.0"

install_warning_format()  # a DataWarning is shown as one line, without trainperf's source line

__all__ = ["DataError", "DataWarning", "StepProfiler", "__version__", "aggregate_steps", "derive", "find_straggler",
           "export_chrome_trace", "load_runs", "load_steps"]
