"""``trainperf trace``: a profiled run's ranks on one timeline, as one Chrome trace JSON."""

from __future__ import annotations

import argparse

from trainperf.errors import DataError
from trainperf.profiler.trace import TRACE_OUT, export_chrome_trace


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``trace``."""
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
    values: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            values += range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks such as 0-3,8") from None
    return values


def step_range(text: str) -> tuple[int, int]:
    """``100-120`` as ``(100, 120)``; ``7`` as ``(7, 7)``."""
    first, _, last = text.partition("-")
    try:
        return int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step range such as 100-120") from None


def _run(args: argparse.Namespace) -> int:
    try:
        print(export_chrome_trace(args.run_dir, args.out, ranks=args.ranks, steps=args.steps,
                                  torch_traces=args.torch_trace))
    except OSError as exc:
        raise DataError(f"cannot write the trace: {exc}", path=args.out or args.run_dir) from exc
    return 0
