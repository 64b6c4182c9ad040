"""``trainperf trace``: a profiled run's timelines as Chrome trace JSON."""

from __future__ import annotations

import argparse

from trainperf.profiler.trace import export_chrome_trace


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``trace``."""
    parser = subparsers.add_parser(
        "trace", help="export a profiled run's phases as Chrome trace JSON (one file per rank)",
        description="Turn the trace-rank<R>.jsonl files of a run folder written by StepProfiler into "
                    "rank<R>.trace.json files, which open in Perfetto (ui.perfetto.dev) or chrome://tracing.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run folder written by StepProfiler")
    parser.add_argument("--out", metavar="DIR", help="write the files here (default: the run folder)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    for path in export_chrome_trace(args.run_dir, args.out):
        print(path)
    return 0
