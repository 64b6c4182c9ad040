"""``trainperf report``: build the HTML reports and their index page."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainperf.reading import SCHEDULER
from trainperf.report.build import REPORTS
from trainperf.report.build.parameters import ParameterError

if TYPE_CHECKING:  # the build's modules are imported once the kernel server starts (run)
    from trainperf.report.build.pipeline import ReportResult


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``report`` on the ``trainperf`` command's subparsers."""
    parser = subparsers.add_parser(
        "report", help="build the HTML reports (papermill + nbconvert) and reports/index.html",
        description="Run the report notebooks with papermill, export them to self-contained HTML "
                    "and write an index page. A report the data cannot answer gets a short page "
                    "saying what is missing (not a failure). Exits 1 when a report fails (the "
                    "others are still built), 2 on bad arguments.")
    parser.add_argument("--data", nargs="+", metavar="PATH",
                        help="runs tables, run folders, logs or folders of them, for every report "
                             "(default: each notebook's own data parameter)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help=f"build only these reports (of: {', '.join(REPORTS)})")
    parser.add_argument("--out", default="reports", metavar="DIR",
                        help="output folder for the pages, executed notebooks and index.html (default: reports)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="set a notebook parameter, converted to its declared type (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, metavar="N",
                        help="notebooks run at a time (default: 2)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a dask.distributed scheduler (tcp://host:8786) that reads and aggregates the run "
                             "folders and steps tables (default: $TRAINPERF_SCHEDULER, else this machine)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the reports; print one line per report with its time; 1 if any failed."""
    from trainperf.report.build.kernels import forked_kernels, kernel_command

    if args.scheduler:  # the kernels inherit it
        os.environ[SCHEDULER] = args.scheduler
    # the kernel server imports the notebooks' modules while this process imports the build's and plans it
    with forked_kernels(kernel_command() or [], Path.cwd()):
        from trainperf.report.html import count
        from trainperf.report.build.pipeline import NOTEBOOKS, build, check_out, plan

        try:
            check_out(args.out)
            jobs = plan(args.only, data=args.data, parameters=[tuple(p) for p in args.parameter],
                        out_dir=args.out, notebooks_dir=NOTEBOOKS)
            print(f"building {count(len(jobs), 'report')} into {args.out}/ with {args.jobs} at a time")
            result = build(jobs, workers=args.jobs, on_done=_print_result)
        except ParameterError as exc:
            print(f"trainperf report: error: {exc}", file=sys.stderr)
            return 2
    print(f"index: {result.index}  ({count(len(result.reports), 'report')} in {result.seconds:.1f} s)")
    for report in result.reports:
        if report.not_applicable:
            print(f"trainperf report: {report.name} is not applicable to this data: {report.not_applicable}")
    for failed in result.failed:
        print(f"trainperf report: {failed.name} failed: {failed.error}", file=sys.stderr)
    return 1 if result.failed else 0


def _print_result(result: ReportResult) -> None:
    status = "n/a" if result.not_applicable else "ok" if result.ok else "FAILED"
    print(f"  {result.name:<12} {status:<6} {result.seconds:6.1f} s  {result.html or '(no page)'}", flush=True)
