"""How often ``trainperf compare`` calls identical configurations different, and
how often it detects a slowdown: on the measured steps in data/runs and on
simulated runs whose truth is known. Prints Markdown tables (docs/statistics.md).

    PYTHONPATH=lib .venv/bin/python benchmarks/compare_validation.py [--runs data/runs] [--trials 200]

Real data: (1) halves of one run — the first half of its measured steps
against the second, without and with the default run-to-run term; (2) a
run against its repeat (runs of one configuration, grouped as the reports
group them: ``extra_configuration``), both orders, with the default
run-to-run term and without it; (3) the same pairs with 5 % and 20 % added to
every candidate step time. Simulated: 60 steps a run with 5 % CV,
uncorrelated or with AR(1) correlation (phi 0.5), with and without a
run-to-run effect (sd 5 %), one run a side (run-to-run term: none, the
default, or the simulation's 5 %) or three repeats a side.
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

import trainperf
from trainperf.aggregate import job_steps
from trainperf.compare import Side, compare
from trainperf.estimates import configuration_keys
from trainperf.stats import FASTER, RUN_CV, SLOWER

SLOWDOWNS = (0.0, 0.05, 0.20)
"""Added step time: 0 is the A/A comparison."""


def slowed(frame: pd.DataFrame, added: float) -> pd.DataFrame:
    """A job-steps frame with ``added`` (fraction) more time in every step (and every rank's step)."""
    out = frame.copy()
    for column in ["step_time_s", *[c for c in out if c.startswith("rank_")]]:
        out[column] = out[column] * (1 + added)
    return out


def side(name: str, frames: list[pd.DataFrame]) -> Side:
    return Side(name, pd.DataFrame(), {f"{name}-{i}": f for i, f in enumerate(frames)})


def verdicts(pairs: list[tuple[list[pd.DataFrame], list[pd.DataFrame]]], added: float, draws: int,
             run_cv: float) -> list[str]:
    return [compare(side("a", a), side("b", [slowed(f, added) for f in b]), draws=draws, seed=i,
                    run_cv=run_cv).verdict for i, (a, b) in enumerate(pairs)]


def real_pairs(runs_dir: Path) -> dict[str, list]:
    """Halves of each run, and ordered pairs of runs of one configuration (its repeats)."""
    frames, _ = job_steps(trainperf.load_summaries(runs_dir))
    halves = []
    for frame in frames.values():
        cut = len(frame) // 2
        halves.append(([frame.iloc[:cut]], [frame.iloc[cut:]]))
    runs = trainperf.load_runs(runs_dir)
    same = []
    for _, ids in runs.groupby(configuration_keys(runs))["run_id"]:
        for a, b in itertools.permutations(ids, 2):
            same.append(([frames[a]], [frames[b]]))
    return {"halves of one run": (halves, (0.0, RUN_CV)), "run against its repeat": (same, (RUN_CV, 0.0))}


def simulated_run(rng: np.random.Generator, steps: int, run_sd: float, phi: float, cv: float = 0.05) -> pd.DataFrame:
    """Step times ``0.5 s · (1 + run effect) · (1 + AR(1) noise)``, stationary from the first step."""
    e = rng.normal(0, cv * math.sqrt(1 - phi ** 2), steps)
    x = np.empty(steps)
    x[0] = rng.normal(0, cv)
    for t in range(1, steps):
        x[t] = phi * x[t - 1] + e[t]
    time = 0.5 * (1 + rng.normal(0, run_sd)) * (1 + x)
    return pd.DataFrame({"step": np.arange(steps), "step_time_s": time, "tokens": 4096.0})


def simulated_pairs(trials: int, per_side: int, run_sd: float, phi: float, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [([simulated_run(rng, 60, run_sd, phi) for _ in range(per_side)],
             [simulated_run(rng, 60, run_sd, phi) for _ in range(per_side)]) for _ in range(trials)]


def rates(calls: list[str]) -> str:
    n = len(calls)
    different = sum(c in (FASTER, SLOWER) for c in calls)
    slower = sum(c == SLOWER for c in calls)
    return f"{n} | {different / n:.0%} | {slower / n:.0%}" if n else "0 | — | —"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="data/runs", type=Path)
    parser.add_argument("--trials", type=int, default=200, help="simulated comparisons per row")
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    print("| data | comparison | run-to-run term | added step time | trials | called different | called slower |")
    print("|---|---|---|---|---|---|---|")
    for name, (pairs, run_cvs) in real_pairs(args.runs).items():
        for run_cv in run_cvs:
            for added in SLOWDOWNS:
                print(f"| {args.runs} (real) | {name} | {term(run_cv)} | {added:.0%} | "
                      f"{rates(verdicts(pairs, added, args.draws, run_cv))} |")
    scenarios = {"uncorrelated steps; 1 run a side": (1, 0.0, 0.0, (0.0,)),
                 "AR(1) 0.5; 1 run a side": (1, 0.0, 0.5, (0.0,)),
                 "AR(1) 0.5; 1 run a side, run-to-run sd 5 %": (1, 0.05, 0.5, (0.0, RUN_CV, 0.05)),
                 "AR(1) 0.5; 3 repeats a side, run-to-run sd 5 %": (3, 0.05, 0.5, (RUN_CV,))}
    for i, (name, (per_side, run_sd, phi, run_cvs)) in enumerate(scenarios.items()):
        pairs = simulated_pairs(args.trials, per_side, run_sd, phi, seed=100 + i)
        for run_cv in run_cvs:
            for added in SLOWDOWNS:
                print(f"| simulated, 60 steps, CV 5 % | {name} | {term(run_cv, per_side)} | {added:.0%} | "
                      f"{rates(verdicts(pairs, added, args.draws, run_cv))} |")


def term(run_cv: float, per_side: int = 1) -> str:
    """What covers the run-to-run variance of a row."""
    if per_side > 1:
        return "measured by the repeats"
    return "none (steps only)" if run_cv == 0 else f"assumed CV {run_cv:.0%}" + (" (default)" if run_cv == RUN_CV
                                                                                  else "")


if __name__ == "__main__":
    main()
