"""``trainperf import``: training logs into a runs table (CSV)."""

from __future__ import annotations

import argparse
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.derived import derive
from trainperf.errors import DataError, DataWarning
from trainperf.importers import TOLERANCE, ImportResult, compare_reported, import_path
from trainperf.importers.records import GROUPS
from trainperf.importers.settings import MAPPING_KEY
from trainperf.importers.tensorboard_log import MAPPABLE
from trainperf.table_rules import spreadsheet_safe

SKIPPED_SHOWN = 5


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``import``."""
    parser = subparsers.add_parser(
        "import", help="read training logs (Megatron, torchtitan, nanoGPT, ...) into a runs table",
        description="Recognise each log's format by its content, read it into canonical runs (one row per "
                    "run), list the lines it could not read and the fields it still needs, and compare the "
                    "figures the log printed itself with trainperf's recomputation. Values a log lacks come "
                    "from its sidecar <log>.trainperf.yaml or from --set.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="log file, TensorBoard log dir or event file (or CSV with a column mapping)")
    parser.add_argument("--out", required=True, metavar="FILE.csv", help="write the runs table here")
    parser.add_argument("--steps-out", metavar="FILE.csv",
                        help="write the steps table (logs that print single steps) here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a runs column for every run (e.g. --set gpus=8 --set platform='NVIDIA H100 SXM'); "
                             "wins over the sidecar and the log")
    parser.add_argument("--mapping", metavar="FILE.yaml", help="column mapping for a CSV (a 'columns:' section)")
    parser.add_argument("--pattern", metavar="REGEX",
                        help="read a log of any stack: a regular expression whose named groups "
                             f"({', '.join(GROUPS)}) match one line per step")
    parser.add_argument("--tags", dest="tags", action="append", default=[], metavar="FIGURE=TAG",
                        help="read TensorBoard events of any stack: the tag that gives a figure "
                             f"({', '.join(MAPPABLE)}), e.g. --tags step_time_s=train/step_time")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="files read in parallel (default 1)")
    parser.set_defaults(run=_run)


def parse_overrides(items: list[str], option: str = "--set") -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict (DataError naming ``option`` for one without ``=``)."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DataError(f"{option} {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides


def _import_quietly(path: str, overrides: dict[str, Any]) -> ImportResult:
    """``import_path`` with its DataWarnings kept in the result only (printed once by the caller)."""
    with warnings.catch_warnings(action="ignore", category=DataWarning):
        return import_path(path, overrides)


def _run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = parse_overrides(args.overrides)
    if args.mapping:
        overrides[MAPPING_KEY] = args.mapping
    if args.pattern:
        overrides["pattern"] = args.pattern
    if args.tags:
        overrides["tensorboard_tags"] = parse_overrides(args.tags, "--tags")
    if args.jobs > 1 and len(args.paths) > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_import_quietly, args.paths, [overrides] * len(args.paths)))
    else:
        results = [_import_quietly(path, overrides) for path in args.paths]
    runs = pd.concat([r.runs for r in results], ignore_index=True)
    duplicated = runs["run_id"][runs["run_id"].duplicated()]
    if len(duplicated):
        raise DataError(f"run_id {duplicated.iloc[0]!r} appears in more than one run: give distinct run_id "
                        "values in the sidecars")
    for result in results:
        _describe(result)
    _comparisons(runs)
    _write(runs, args.out, "run(s)")
    steps = [r.steps for r in results if r.steps is not None]
    if args.steps_out and steps:
        _write(pd.concat(steps, ignore_index=True), args.steps_out, "step row(s)")
    elif args.steps_out:
        print("no steps table: none of the logs prints single steps")
    return 0


def _write(table: pd.DataFrame, path: str, rows: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    spreadsheet_safe(table).to_csv(path, index=False)
    print(f"wrote {len(table)} {rows} to {path}")


def _describe(result: ImportResult) -> None:
    """Print what was read from one log, and the fields it still needs."""
    steps = 0 if result.steps is None else len(result.steps)
    print(f"{result.path}: {result.format}, {len(result.runs)} run(s), {steps} step row(s), "
          f"{result.skipped_total} unreadable line(s) of {result.lines}")
    for file, line, reason in result.skipped[:SKIPPED_SHOWN]:
        print(f"  skipped {file}:{line}: {reason}")
    if result.skipped_total > SKIPPED_SHOWN:
        print(f"  ... and {result.skipped_total - SKIPPED_SHOWN} more")
    for note in result.warnings:
        print(f"  warning: {note}", file=sys.stderr)
    every = set(result.runs["run_id"])
    for missing in result.missing:
        why = f"blocks {', '.join(missing.blocks)}" if missing.blocks else missing.note
        which = "" if set(missing.runs) == every else f" (runs {', '.join(missing.runs)})"
        print(f"  missing {missing.field}: {why}{which}")


def _comparisons(runs: pd.DataFrame) -> None:
    with warnings.catch_warnings(action="ignore", category=DataWarning):
        table = compare_reported(derive(runs))
    if table.empty:
        return
    print(f"reported by the log vs recomputed by trainperf (flagged beyond {TOLERANCE:.0%}):")
    for row in table.itertuples(index=False):
        flag = "  FLAGGED" if row.flagged else ""
        print(f"  {row.run_id}  {row.metric}: reported {row.reported:,.6g}, recomputed {row.recomputed:,.6g} "
              f"({row.note if pd.isna(row.relative_difference) else f'{row.relative_difference:+.1%}'}){flag}")
