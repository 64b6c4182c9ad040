"""Per-rank timelines of a run, and their export as Chrome trace JSON.

With ``trace=True`` (the default) the profiler writes ``trace-rank{R}.jsonl``
beside the steps file: one JSON object per step with every interval it timed,
``[start_s, duration_s]`` in seconds since the profiler started on that rank:

``{"step": 3, "warmup": false, "window": [s, d], "phases": [["forward", s, d], ...],
"allreduce": [[s, d], ...], "data": [[s, d], ...], "data_clock": "step"}``

``data_clock`` is ``step`` when the waits for data share the step clock (CPU),
``host`` when they do not (GPU: phases are device time from CUDA events, the
data waits host time; the trace shows them on a track of their own).

:func:`export_chrome_trace` turns these files into one Chrome trace JSON per
rank (the Trace Event Format: complete events, times in microseconds), which
opens in Perfetto (ui.perfetto.dev) or ``chrome://tracing``; the phases the
rank timed outside its steps (``events-rank{R}.jsonl``) lie on the steps'
track, between them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainperf.errors import DataError
from trainperf.runfolder.eventfile import EVENTS_FILE, read_events
from trainperf.runfolder.rankfile import BadLine, warn_bad_lines

TRACE_FILE_PATTERN = re.compile(r"^trace-rank(\d+)\.jsonl$")
CHROME_FILE = "rank{rank}.trace.json"
TRACKS = {"step": 0, "phases": 1, "allreduce": 2, "data (host clock)": 3}


def trace_line(step: int, warmup: bool, window: tuple[float, float], phases: list[tuple[str, float, float]],
               allreduce: list[tuple[float, float]], data: list[tuple[float, float]], data_clock: str) -> bytes:
    """One step's trace entry as a line, times rounded to 1 µs (formatted
    directly: this runs once per training step)."""
    return ('{"step":%d,"warmup":%s,"window":[%.6f,%.6f],"phases":[%s],"allreduce":[%s],"data":[%s],'
            '"data_clock":"%s"}\n' % (
                step, "true" if warmup else "false", *window,
                ",".join(['["%s",%.6f,%.6f]' % p for p in phases]),
                ",".join(["[%.6f,%.6f]" % i for i in allreduce]),
                ",".join(["[%.6f,%.6f]" % i for i in data]), data_clock)).encode()


def export_chrome_trace(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write ``rank{R}.trace.json`` for every ``trace-rank{R}.jsonl`` of the
    run folder (into ``out_dir``, default the run folder) and return their
    paths. Malformed lines are skipped and reported in one DataWarning."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError("no such folder", path=run_dir)
    sources = sorted((int(m.group(1)), p) for p in run_dir.glob("trace-rank*.jsonl")
                     if (m := TRACE_FILE_PATTERN.match(p.name)))
    if not sources:
        raise DataError("no trace-rank<R>.jsonl files (the run was profiled with trace=False?)", path=run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    bad: list[BadLine] = []
    for rank, source in sources:
        events = _metadata(rank)
        for number, line in enumerate(source.read_text(errors="replace").splitlines(), start=1):
            try:
                events += _events(rank, json.loads(line))
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                bad.append(BadLine(source, number, f"{type(exc).__name__}: {exc}"))
        outside = run_dir / EVENTS_FILE.format(rank=rank)
        if outside.exists():
            phases, skipped = read_events(outside)
            bad += skipped
            events += [{"name": p.name, "cat": "outside", "ph": "X", "pid": rank, "tid": TRACKS["step"],
                        "ts": p.start_s * 1e6, "dur": p.seconds * 1e6, "args": {}} for p in phases]
        target = out / CHROME_FILE.format(rank=rank)
        target.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
        written.append(target)
    warn_bad_lines(bad, "trace and events files")
    return written


def _metadata(rank: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}}
               for name, tid in TRACKS.items()]
    return events


def _events(rank: int, entry: dict[str, Any]) -> list[dict[str, Any]]:
    step = int(entry["step"])
    args = {"step": step, "warmup": bool(entry["warmup"])}
    data_track = TRACKS["phases"] if entry["data_clock"] == "step" else TRACKS["data (host clock)"]
    spans = [("step", f"step {step}", TRACKS["step"], entry["window"])]
    spans += [("phase", name, TRACKS["phases"], [start, duration]) for name, start, duration in entry["phases"]]
    spans += [("phase", "data", data_track, interval) for interval in entry["data"]]
    spans += [("allreduce", "all-reduce", TRACKS["allreduce"], interval) for interval in entry["allreduce"]]
    return [{"name": name, "cat": category, "ph": "X", "pid": rank, "tid": track,
             "ts": float(start) * 1e6, "dur": float(duration) * 1e6, "args": args}
            for category, name, track, (start, duration) in spans]
