"""``trainperf summarize``: the runs with every derived column, as CSV, JSON or Markdown; the figures emptied
because they cannot be true (``trainperf.invariants``) are listed on standard error."""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from trainperf.derived import derive
from trainperf.errors import DataError
from trainperf.invariants import violations
from trainperf.reading.loading import load_runs
from trainperf.table_rules import figure_text, is_missing, json_ready, spreadsheet_safe

KEY_COLUMNS: tuple[str, ...] = (
    "run_id", "experiment", "platform", "model", "precision", "gpus", "elapsed_s",
    "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "tflops_per_gpu", "mfu",
    "scaling_multiplier", "scaling_efficiency", "comm_overhead", "wait_outside_s", "cost_usd", "notes",
)
"""Columns of the Markdown summary unless ``--columns all`` is given."""


RATE_BASIS = ("tokens_per_s and samples_per_s: the work over elapsed_s, the slowest rank's wall clock over the "
              "measured window, work between steps (evaluation, checkpoints) included; trainperf compare judges the "
              "steps' own time and gives this one as elapsed_throughput.")
"""What the Markdown summary says under its table about the throughput it shows."""


def summarize(runs: pd.DataFrame, experiment: str | None = None) -> pd.DataFrame:
    """Derived runs table, optionally restricted to one experiment (DataError if it has no runs)."""
    derived = derive(runs)
    if experiment is None:
        return derived
    chosen = derived[derived["experiment"] == experiment]
    if chosen.empty:
        known = ", ".join(sorted(derived["experiment"].dropna().astype(str).unique()))
        raise DataError(f"no runs in experiment {experiment!r}; experiments: {known}")
    return chosen


def to_markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; numbers with thousands separators, empty cells blank."""
    header = "| " + " | ".join(table.columns) + " |"
    rule = "| " + " | ".join("---:" if pd.api.types.is_numeric_dtype(table[c]) else "---"
                             for c in table.columns) + " |"
    rows = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def _cell(value: object) -> str:
    if is_missing(value):
        return ""
    return figure_text(value) if isinstance(value, float) else str(value).replace("|", "\\|")


def render(table: pd.DataFrame, fmt: str, columns: str = "key") -> str:
    """``table`` as ``csv`` (cells a spreadsheet would run escaped: :func:`spreadsheet_safe`), json or markdown."""
    if fmt == "csv":
        return spreadsheet_safe(table).to_csv(index=False)
    if fmt == "json":
        records = [dict(zip(table.columns, map(json_ready, row))) for row in table.itertuples(index=False)]
        return json.dumps(records, indent=1)
    shown = table if columns == "all" else table[[c for c in KEY_COLUMNS if c in table]]
    return to_markdown(shown) + "\n\n" + RATE_BASIS


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``summarize``."""
    parser = subparsers.add_parser(
        "summarize", help="print runs with every derived metric",
        description="Load runs (tables, run folders, logs, or folders of them), derive every metric "
                    "(throughput, TFLOPS, MFU, scaling, cost) and print the table.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="runs table, run folder, log, or folder")
    parser.add_argument("--experiment", help="only the runs of this experiment")
    parser.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown",
                        help="output format (default: markdown)")
    parser.add_argument("--columns", choices=("key", "all"), default=None,
                        help="markdown: key columns (default) or all; csv and json always print all")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    table = summarize(load_runs(*args.paths), args.experiment)
    sys.stdout.write(render(table, args.format, args.columns or "key") + "\n")
    emptied = violations(table)
    if len(emptied):
        sys.stderr.write(f"trainperf summarize: {len(emptied)} figure(s) emptied as impossible:\n" + "".join(
            f"  {row.run_id}: {row.figures}: {row.why}\n" for row in emptied.itertuples()))
    return 0
