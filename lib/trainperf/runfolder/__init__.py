"""The run folder: what ``StepProfiler`` writes and ``trainperf.load_runs`` reads, one folder per run
(docs/profiler.md, "The run folder"): ``manifest.json`` (:mod:`.manifest`), ``steps-rank{R}.jsonl``
(:mod:`.rankfile`, written by :mod:`.linefile`, followed by :mod:`.tail`), ``events-rank{R}.jsonl``
(:mod:`.eventfile`); :mod:`.reader` reads a folder. The profiler writes with this package and the loader reads with
it, so reading a run imports no profiler code (nor torch).
"""
