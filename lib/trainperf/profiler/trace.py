"""Every rank of a run on one timeline, as one Chrome trace JSON, with ``torch.profiler`` (Kineto)
traces of the same job merged in: ``trainperf trace`` (docs/profiler.md, "One timeline for every rank");
the ``trace-rank{R}.jsonl`` lines it reads: docs/profiler.md, "The run folder".
"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trainperf.errors import DataError, DataWarning
from trainperf.runfolder.eventfile import EVENTS_FILE, read_events
from trainperf.runfolder.rankfile import STEPS_FILE, BadLine, json_object, warn_bad_lines

TRACE_FILE_PATTERN = re.compile(r"^trace-rank(\d+)\.jsonl$")
TRACE_OUT = "trace.json"
TRACKS = {"step": 0, "phases": 1, "allreduce": 2, "data (host clock)": 3}
KINETO_PID = 1_000_000
"""Kineto processes are renumbered from here (their own pids may equal a rank)."""
SORT_PER_RANK = 1_000
"""A rank's processes sort from ``rank * SORT_PER_RANK``: trainperf's tracks, then its Kineto processes."""


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


def export_chrome_trace(run_dir: str | Path, out_dir: str | Path | None = None, *, ranks: Iterable[int] | None = None,
                 steps: tuple[int, int] | None = None, torch_traces: Sequence[str | Path] = ()) -> Path:
    """Write ``trace.json`` into ``out_dir`` (default: the run folder) and return its path: the ranks on one
    wall clock, their steps ``steps[0]`` to ``steps[1]`` (inclusive) and the phases outside the steps between
    them, the Kineto traces ``torch_traces`` merged in. Malformed lines are skipped (one DataWarning); a rank
    without a clock origin puts every rank on its own clock (DataWarning), and cannot take a Kineto trace."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError("no such folder", path=run_dir)
    wanted = set(ranks) if ranks is not None else None
    sources = sorted((int(m.group(1)), p) for p in run_dir.glob("trace-rank*.jsonl")
                     if (m := TRACE_FILE_PATTERN.match(p.name)) and (wanted is None or int(m.group(1)) in wanted))
    if not sources:
        raise DataError("no trace-rank<R>.jsonl files" + (f" of ranks {sorted(wanted)}" if wanted is not None else
                                                          " (the run was profiled with trace=False?)"), path=run_dir)
    origins = {rank: origin_unix_ns(run_dir / STEPS_FILE.format(rank=rank)) for rank, _ in sources}
    kineto = [_read_kineto(Path(p)) for p in torch_traces]
    if unknown := sorted(rank for rank, origin in origins.items() if origin is None):
        said = f"the steps files of rank(s) {unknown} record no clock origin (origin_unix_ns)"
        if kineto:
            raise DataError(f"{said}: the run cannot be aligned with a torch.profiler trace", path=run_dir)
        warnings.warn(f"{run_dir}: {said}: every rank is shown on its own clock, from 0", DataWarning, stacklevel=2)
        origins = dict.fromkeys(origins, 0)
    base = min(origins.values())
    events: list[dict[str, Any]] = []
    bad: list[BadLine] = []
    for rank, source in sources:
        shift_us = (origins[rank] - base) / 1e3
        events += [{"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}},
                   {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank * SORT_PER_RANK}}]
        events += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}}
                   for name, tid in TRACKS.items()]
        kept: list[tuple[float, float]] = []  # the kept steps' windows (start_s, end_s)
        for number, line in enumerate(source.read_text(errors="replace").splitlines(), start=1):
            try:
                entry = json.loads(line)
                step = int(entry["step"])
                if steps is None or steps[0] <= step <= steps[1]:
                    events += _events(rank, entry, shift_us)
                    kept.append((float(entry["window"][0]), float(entry["window"][0]) + float(entry["window"][1])))
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                bad.append(BadLine(source, number, f"{type(exc).__name__}: {exc}"))
        outside = run_dir / EVENTS_FILE.format(rank=rank)
        if outside.exists():
            phases, skipped = read_events(outside)
            bad += skipped
            if steps is not None:  # between the first and the last step kept
                phases = [p for p in phases if kept and min(kept)[0] <= p.start_s <= max(e for _, e in kept)]
            events += [_span(rank, shift_us, {}, "outside", p.name, TRACKS["step"], (p.start_s, p.seconds))
                       for p in phases]
    for number, (path, trace) in enumerate(zip(torch_traces, kineto)):
        events += _kineto_events(trace, (trace["baseTimeNanoseconds"] - base) / 1e3, KINETO_PID * (number + 1),
                                 number, Path(path).name)
    out = Path(out_dir) if out_dir is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    target = out / TRACE_OUT
    target.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms", "baseTimeNanoseconds": base}))
    warn_bad_lines(bad, "trace and events files")
    return target


def origin_unix_ns(steps_file: Path) -> int | None:
    """The Unix time (ns) at which a rank's clock reads 0, from its steps file's header; None where unknown."""
    try:
        with steps_file.open("rb") as file:
            header = json_object(file.readline()) or {}
    except OSError:
        return None
    origin = header.get("origin_unix_ns")
    return origin if isinstance(origin, int) and not isinstance(origin, bool) else None


def _events(rank: int, entry: dict[str, Any], shift_us: float) -> list[dict[str, Any]]:
    step = int(entry["step"])
    args = {"step": step, "warmup": bool(entry["warmup"])}
    data_track = TRACKS["phases"] if entry["data_clock"] == "step" else TRACKS["data (host clock)"]
    spans = [("step", f"step {step}", TRACKS["step"], entry["window"])]
    spans += [("phase", name, TRACKS["phases"], [start, duration]) for name, start, duration in entry["phases"]]
    spans += [("phase", "data", data_track, interval) for interval in entry["data"]]
    spans += [("allreduce", "all-reduce", TRACKS["allreduce"], interval) for interval in entry["allreduce"]]
    return [_span(rank, shift_us, args, *span) for span in spans]


def _span(rank: int, shift_us: float, args: dict[str, Any], category: str, name: str, track: int,
          interval: Sequence[float]) -> dict[str, Any]:
    """A complete event of ``rank``'s ``track``, ``interval`` being ``(start_s, duration_s)`` on its clock."""
    start, duration = interval
    return {"name": name, "cat": category, "ph": "X", "pid": rank, "tid": track,
            "ts": shift_us + float(start) * 1e6, "dur": float(duration) * 1e6, "args": args}


def _read_kineto(path: Path) -> dict[str, Any]:
    """A Kineto trace JSON; DataError naming it when it is not one that can be aligned."""
    try:
        trace = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the torch.profiler trace: {exc}", path=path) from exc
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise DataError("not a Chrome trace JSON (an object with 'traceEvents')", path=path)
    base = trace.get("baseTimeNanoseconds")
    if not isinstance(base, int) or isinstance(base, bool):
        raise DataError("no integer baseTimeNanoseconds (written by torch.profiler 2.0 or later?): its clock "
                        "cannot be aligned with the run's", path=path, column="baseTimeNanoseconds")
    return trace


def _kineto_events(trace: dict[str, Any], shift_us: float, first_pid: int, number: int,
                   name: str) -> list[dict[str, Any]]:
    """A Kineto trace's events moved by ``shift_us`` onto the run's clock, its processes renumbered from
    ``first_pid``, named after its rank and sorted below that rank's tracks."""
    rank = (trace.get("distributedInfo") or {}).get("rank")
    label = f"rank {rank} torch.profiler" if isinstance(rank, int) else f"torch.profiler ({name})"
    pids: dict[Any, int] = {}
    events = []
    for event in trace["traceEvents"]:
        if not isinstance(event, dict) or event.get("name") == "process_sort_index":
            continue
        event = dict(event)
        if "pid" in event:
            event["pid"] = pids.setdefault(event["pid"], first_pid + len(pids))
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] = float(event["ts"]) + shift_us
        if event.get("ph") == "M" and event.get("name") == "process_name":
            event["args"] = {**event.get("args", {}), "name": f"{label}: {event.get('args', {}).get('name', '')}"}
        events.append(event)
    sort = (rank if isinstance(rank, int) else number) * SORT_PER_RANK
    events += [{"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort + 1 + i}}
               for i, pid in enumerate(pids.values())]
    return events


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``trainperf trace``: :func:`export_chrome_trace` on the command line."""
    parser = subparsers.add_parser(
        "trace", help="put a profiled run's ranks on one timeline: one Chrome trace JSON (Perfetto)",
        description=f"Turn the trace-rank<R>.jsonl files of a run folder written by StepProfiler into one "
                    f"{TRACE_OUT} with a track per rank on one wall clock, which opens in Perfetto "
                    "(ui.perfetto.dev) or chrome://tracing; torch.profiler traces of the same job can be merged in.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run folder written by StepProfiler")
    parser.add_argument("--out", metavar="DIR", help="write the file here (default: the run folder)")
    parser.add_argument("--ranks", metavar="LIST", type=int_ranges,
                        help="only these ranks, e.g. 0-3,8 (default: all)")
    parser.add_argument("--steps", metavar="FIRST-LAST", type=step_range,
                        help="only these steps, e.g. 100-120 (inclusive; default: all)")
    parser.add_argument("--torch-trace", metavar="FILE", nargs="+", default=[],
                        help="torch.profiler (Kineto) trace JSON files of the same job to merge, aligned by "
                             "their baseTimeNanoseconds")
    parser.set_defaults(run=_run)


def int_ranges(text: str) -> list[int]:
    """``0-3,8`` as ``[0, 1, 2, 3, 8]``."""
    return [n for first, last in _spans(text, "a list of ranks such as 0-3,8") for n in range(first, last + 1)]


def step_range(text: str) -> tuple[int, int]:
    """``100-120`` as ``(100, 120)``; ``7`` as ``(7, 7)``."""
    return _spans(text, "a step range such as 100-120", most=1)[0]


def _spans(text: str, example: str, most: int | None = None) -> list[tuple[int, int]]:
    """``0-3,8`` as ``[(0, 3), (8, 8)]`` (at most ``most``); else an argparse error naming ``example``."""
    parts = [part.partition("-") for part in text.split(",")]
    try:
        if most is not None and len(parts) > most:
            raise ValueError(text)
        return [(int(first), int(last or first)) for first, _, last in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {example}") from None


def _run(args: argparse.Namespace) -> int:
    try:
        print(export_chrome_trace(args.run_dir, args.out, ranks=args.ranks, steps=args.steps,
                                  torch_traces=args.torch_trace))
    except OSError as exc:
        raise DataError(f"cannot write the trace: {exc}", path=args.out or args.run_dir) from exc
    return 0
