"""The run-to-run coefficient of variation of throughput between two sweeps of the
same configurations (``trainperf.stats.RUN_CV`` is derived with it; docs/statistics.md):

    mkdir -p /tmp/sweep-a && git archive fae2fa0 data/runs | tar -x -C /tmp/sweep-a
    PYTHONPATH=lib .venv/bin/python benchmarks/run_cv.py /tmp/sweep-a/data/runs tests/data/measured_runs

Per run id found in both sweeps: ``d = log(X_b / X_a)`` of the two runs' throughputs
and each run's standard error of ``log X`` from its steps (block bootstrap). As
``E[d²] = 2 σ² + se_a² + se_b²``, the run-to-run part is
``σ = √(mean(d² − se_a² − se_b²) / 2)``. Prints a Markdown table and σ.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import trainperf
from trainperf.aggregate import job_steps
from trainperf.estimates import Side, estimate_steps


def per_run(folder: Path) -> dict[str, tuple[float, float]]:
    """Per run id: throughput (tokens/s) and the standard error of its log from its steps."""
    runs = trainperf.derive(trainperf.load_runs(folder))
    frames, _ = job_steps(trainperf.load_summaries(folder))
    out = {}
    for run_id, frame in frames.items():
        found = estimate_steps(Side(run_id, runs[runs["run_id"] == run_id], {run_id: frame}), "tokens", [])
        out[run_id] = (found.throughput, found.se_log)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_a", type=Path)
    parser.add_argument("sweep_b", type=Path)
    args = parser.parse_args()
    a, b = per_run(args.sweep_a), per_run(args.sweep_b)
    both = sorted(set(a) & set(b))
    print("| run | tokens/s (a) | tokens/s (b) | log(b/a) | se (a) | se (b) |")
    print("|---|---|---|---|---|---|")
    excess, total = [], []
    for run_id in both:
        (xa, sa), (xb, sb) = a[run_id], b[run_id]
        d = math.log(xb / xa)
        excess.append(d * d - sa * sa - sb * sb)
        total.append(d * d)
        print(f"| {run_id} | {xa:,.0f} | {xb:,.0f} | {d:+.3f} | {sa:.3f} | {sb:.3f} |")
    print(f"\n{len(both)} runs in both sweeps: run-to-run CV {math.sqrt(max(sum(excess), 0) / len(both) / 2):.1%} "
          f"(steps' noise removed), {math.sqrt(sum(total) / len(both) / 2):.1%} (not removed)")


if __name__ == "__main__":
    main()
