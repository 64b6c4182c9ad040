"""The training-step profiler: ``StepProfiler`` writes a run folder
(``manifest.json`` and one ``steps-rank{R}.jsonl`` per rank) that
``trainperf.load_steps`` and ``trainperf.load_runs`` read.

Importing this package does not import torch; ``StepProfiler`` does when it
is created.
"""

from trainperf.profiler.folder import RunFolderInUse
from trainperf.profiler.step_profiler import ProfilerWarning, StepProfiler
from trainperf.profiler.trace import export_chrome_trace

__all__ = ["ProfilerWarning", "RunFolderInUse", "StepProfiler", "export_chrome_trace"]
