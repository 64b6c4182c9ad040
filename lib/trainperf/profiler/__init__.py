"""The training-step profiler: ``StepProfiler`` writes a run folder that ``trainperf.load_steps`` and
``trainperf.load_runs`` read (docs/profiler.md). Importing this package does not import torch;
``StepProfiler`` does when it is created.
"""

from trainperf.profiler.step_profiler import ProfilerWarning, StepProfiler
from trainperf.profiler.trace import export_chrome_trace
from trainperf.profiler.writing import RunFolderInUse

__all__ = ["ProfilerWarning", "RunFolderInUse", "StepProfiler", "export_chrome_trace"]
