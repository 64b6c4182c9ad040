"""``trainperf compare BASELINE CANDIDATE`` (or ``--history DIR CANDIDATE``): :mod:`trainperf.compare`'s command."""

from __future__ import annotations

import argparse

from trainperf.compare.analysis import compare, read_side
from trainperf.compare.format import FORMATS, render
from trainperf.compare.history import LAST, accept, entries, read_baselines
from trainperf.compare.metrics import METRICS
from trainperf.errors import DataError
from trainperf.stats import DRAWS


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compare``."""
    defaults = ", ".join(f"{m.name} {m.min_effect:g}" for m in METRICS.values())
    cvs = ", ".join(f"{m.name} {m.run_cv:g}" for m in METRICS.values())
    p = subparsers.add_parser(
        "compare", help="baseline vs candidate: faster, slower, no detectable difference or inconclusive "
                        "(exit 1 if a judged metric regressed)",
        usage="%(prog)s [options] BASELINE CANDIDATE | --history DIR CANDIDATE",
        description="Compare the training speed (and, with --metric, peak memory, energy per token and goodput) "
                    "of a candidate with a baseline. Each side is a run folder, a folder of run folders, a runs "
                    "table or a log; several runs on a side are repeats of one configuration. Exit status: 0 no "
                    "regression (faster, no detectable difference or inconclusive), 1 a judged metric regressed "
                    "significantly, 2 bad input.")
    p.add_argument("inputs", nargs="+", metavar="BASELINE CANDIDATE",
                   help="the baseline and the candidate; with --history, the candidate alone")
    p.add_argument("--metric", action="extend", type=_metrics, metavar="NAME[,NAME]",
                   help=f"what to judge, repeatable or a comma list: {', '.join(METRICS)} (default throughput); "
                        "a metric a run does not record is 'not measured'")
    p.add_argument("--min-effect", action="extend", type=_per_metric, default=[], metavar="[METRIC=]FRACTION",
                   help=f"smallest relative change called a change, of throughput or of METRIC (repeatable; "
                        f"defaults: {defaults})")
    p.add_argument("--run-cv", action="extend", type=_per_metric, default=[], metavar="[METRIC=]FRACTION",
                   help=f"run-to-run coefficient of variation assumed for a run compared with a run when no side "
                        f"has repeats to measure it, of throughput or of METRIC (defaults: {cvs}; 0: none, "
                        "steps only for throughput)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (default), json (every figure, verdict and the exit code) or markdown (a table for a "
                        "pull-request comment)")
    p.add_argument("--history", metavar="DIR",
                   help="compare the candidate with the last accepted baselines in DIR (one entry each, ordered by "
                        "name); their spread measures the run-to-run variation")
    p.add_argument("--last", type=_count(1), default=LAST, metavar="N",
                   help=f"with --history: how many accepted baselines (default {LAST})")
    p.add_argument("--accept", action="store_true",
                   help="with --history: add the candidate to DIR when no judged metric regressed (exit 0)")
    p.add_argument("--warmup", type=_count(0), default=0, metavar="STEPS",
                   help="steps to drop at the start of each run, on top of those recorded as warm-up")
    p.add_argument("--draws", type=_count(100), default=DRAWS, help=f"bootstrap replicates per side (default {DRAWS})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0): the same inputs and seed "
                                                       "give the same result")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if len(args.inputs) != (1 if args.history else 2):
        raise DataError(f"give {'the candidate alone with --history' if args.history else 'a baseline and a candidate'}"
                        f", not {len(args.inputs)} input(s)")
    if args.accept and not args.history:
        raise DataError("--accept adds the candidate to a history: give --history DIR")
    candidate = read_side(args.inputs[-1], warmup=args.warmup)
    if args.history and args.accept and not entries(args.history):
        print(f"No accepted baseline yet: {args.inputs[-1]} accepted as the first, "
              f"{accept(args.inputs[-1], args.history)}.")
        return 0
    baseline, history_note = (read_baselines(args.history, args.last, args.warmup) if args.history else
                              (read_side(args.inputs[0], warmup=args.warmup), None))
    result = compare(baseline, candidate, draws=args.draws, seed=args.seed, metrics=args.metric or ["throughput"],
                     min_effects=_by_metric(args.min_effect, "--min-effect"),
                     run_cvs=_by_metric(args.run_cv, "--run-cv"))
    result.notes[:0] = [history_note] if history_note else []
    if args.accept and result.exit_code == 0:
        result.notes.append(f"Accepted into the history as {accept(args.inputs[-1], args.history)}.")
    print(render(result, args.format))
    return result.exit_code


def _by_metric(given: list[tuple[str, float]], option: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in given:
        if name in out:
            raise DataError(f"{option} given twice for {name}")
        out[name] = value
    return out


def _metric(name: str) -> str:
    if name not in METRICS:
        raise argparse.ArgumentTypeError(f"unknown metric {name!r}: one of {', '.join(METRICS)}")
    return name


def _metrics(text: str) -> list[str]:
    return [_metric(n.strip()) for n in text.split(",") if n.strip()] or [_metric(text)]


def _per_metric(text: str) -> list[tuple[str, float]]:
    """``0.02`` (throughput) or ``peak_memory=0.05``; a comma list of either."""
    pairs = [item.strip().rpartition("=") for item in text.split(",")]
    return [(_metric(name.strip() or "throughput"), _fraction(value)) for name, _, value in pairs]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a fraction in [0, 1) is expected (0.02 = 2 %), got {text!r}") from None
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
