"""The ``trainperf`` command (also ``python -m trainperf``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from importlib import import_module

from trainperf import __version__
from trainperf.errors import DataError

COMMANDS: dict[str, str] = {"summarize": "trainperf.summarize_cli", "report": "trainperf.report.build.cli",
                            "bench": "trainperf.bench.cli", "compare": "trainperf.compare.cli",
                            "import": "trainperf.importers.cli", "trace": "trainperf.profiler.trace",
                            "watch": "trainperf.profiler.watch"}
"""Each subcommand and the module that registers it (``add_subcommand``). A command line naming one
imports only that module: ``trainperf report`` starts its kernel server before pandas is loaded."""


def build_parser(commands: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with the subcommands ``commands`` (default: all)."""
    parser = argparse.ArgumentParser(
        prog="trainperf", description="Measure training throughput and scaling; render reports.")
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        import_module(COMMANDS[name]).add_subcommand(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input exits 2 with a one-line message naming where it is."""
    argv = sys.argv[1:] if argv is None else argv
    named = [argv[0]] if argv and argv[0] in COMMANDS else COMMANDS
    args = build_parser(named).parse_args(argv)
    try:
        return args.run(args)
    except DataError as exc:
        print(f"trainperf: error: {exc}", file=sys.stderr)
        return 2
