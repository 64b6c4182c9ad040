"""``trainperf compare BASELINE CANDIDATE``: did a change make training faster?"""

from __future__ import annotations

import argparse
import math

from trainperf.compare import Comparison, compare, read_side
from trainperf.stats import DRAWS, MIN_EFFECT, RUN_CV


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compare``."""
    p = subparsers.add_parser(
        "compare", help="baseline vs candidate: faster, slower or no detectable difference (exit 1 if slower)",
        description="Compare the training speed of a candidate with a baseline. Each side is a run folder, a "
                    "folder of run folders, a runs table or a log; several runs on a side are repeats of one "
                    "configuration. Exit status: 0 no regression, 1 the candidate is significantly slower, "
                    "2 bad input.")
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("candidate", metavar="CANDIDATE")
    p.add_argument("--min-effect", type=_fraction, default=MIN_EFFECT, metavar="FRACTION",
                   help=f"smallest relative change in throughput called faster or slower (default {MIN_EFFECT})")
    p.add_argument("--run-cv", type=_fraction, default=RUN_CV, metavar="FRACTION",
                   help=f"run-to-run coefficient of variation of throughput assumed for a run compared with a run "
                        f"when no side has repeats to measure it (default {RUN_CV}; 0: steps only)")
    p.add_argument("--warmup", type=_count(0), default=0, metavar="STEPS",
                   help="steps to drop at the start of each run, on top of those recorded as warm-up")
    p.add_argument("--draws", type=_count(100), default=DRAWS, help=f"bootstrap replicates per side (default {DRAWS})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0): the same inputs and seed "
                                                       "give the same result")
    p.set_defaults(run=_run)


def render(result: Comparison) -> str:
    """The short text report: sides, phases and ranks that moved, notes, and the verdict last."""
    lines = [f"{'side':<10} {'runs':>4} {'steps':>6} {result.unit + '/s':>14}  95 % interval"]
    for row in result.sides.itertuples():
        interval = "—" if math.isnan(row.low) else f"{row.low:,.1f} – {row.high:,.1f}"
        lines.append(f"{row.side:<10} {row.runs:>4} {row.steps:>6} {row.throughput:>14,.1f}  {interval}")
    for title, table in (("phase", result.phases), ("rank", result.ranks)):
        if len(table):
            lines.append("")
            lines.append(f"{title:<12} {'baseline s':>11} {'candidate s':>11} {'delta':>8}  95 % interval (s)")
            for row in table.itertuples():
                mark = "  *" if row.moved else ""
                lines.append(f"{getattr(row, title):<12} {row.baseline_s:>11.4f} {row.candidate_s:>11.4f} "
                             f"{row.delta_pct:>+8.1%}  {row.low_s:+.4f} to {row.high_s:+.4f}{mark}")
    if len(result.phases):
        lines.append("(* moved: interval excludes 0 and the change is at least the minimum effect of a step)")
    lines += ["", *result.notes, result.headline()]
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    baseline = read_side(args.baseline, warmup=args.warmup)
    candidate = read_side(args.candidate, warmup=args.warmup)
    result = compare(baseline, candidate, min_effect=args.min_effect, draws=args.draws, seed=args.seed,
                     run_cv=args.run_cv)
    print(render(result))
    return result.exit_code


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"a fraction in [0, 1) is expected (0.02 = 2 %), got {text}")
    return value


def _count(least: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse
