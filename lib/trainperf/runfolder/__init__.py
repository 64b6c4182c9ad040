"""The run folder: what ``StepProfiler`` writes and ``trainperf.load_runs``
reads, one folder per run:

* ``manifest.json`` (:mod:`~trainperf.runfolder.manifest`): the run's
  configuration and environment, written once at the start;
* ``steps-rank{R}.jsonl`` (:mod:`~trainperf.runfolder.rankfile`): one line per
  optimizer step of rank R, written in batches of whole lines
  (:mod:`~trainperf.runfolder.linefile`), so a job killed at any moment keeps
  every batch written; :mod:`~trainperf.runfolder.tail` follows one while it
  is written;
* ``trace-rank{R}.jsonl`` (optional): the phases of each step as intervals,
  for ``trainperf.export_chrome_trace``.

:mod:`~trainperf.runfolder.reader` reads a folder into step intervals and its
runs row. The profiler writes with this package and the loader reads with it,
so reading a run imports no profiler code (nor torch).
"""
