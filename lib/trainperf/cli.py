"""The ``trainperf`` command (also ``python -m trainperf``)."""

from __future__ import annotations

import argparse
import sys

from trainperf import __version__, compare_cli, summary
from trainperf.errors import DataError
from trainperf.bench import cli as bench_cli
from trainperf.importers import cli as importers_cli
from trainperf.profiler import cli as profiler_cli
from trainperf.report import cli as report_cli


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="trainperf", description="Measure training throughput and scaling; render reports.")
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    summary.add_subcommand(subparsers)
    report_cli.add_subcommand(subparsers)
    bench_cli.add_subcommand(subparsers)
    compare_cli.add_subcommand(subparsers)
    importers_cli.add_subcommand(subparsers)
    profiler_cli.add_subcommand(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input exits 2 with a one-line message naming where it is."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except DataError as exc:
        print(f"trainperf: error: {exc}", file=sys.stderr)
        return 2
