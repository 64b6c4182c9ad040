"""Scale benchmark: ``load_steps`` + ``load_runs`` on a synthetic run of
64 ranks x 20,000 steps (1.28 M step records).

The run folder is written with the profiler's own line encoder (the same
bytes ``StepProfiler`` writes), then read in a fresh process, so that the peak
resident memory reported is that of loading alone (plus the interpreter and
libraries). Besides wall time, the CPU time of loading (user + system, all
threads) is reported: on a shared machine it does not grow with the other
processes' load. Targets: at most 10 s and 2 GiB on a 2-core machine.

    python benchmarks/load_scale.py [--ranks 64] [--steps 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trainperf.profiler import rankfile
from trainperf.profiler.environment import MANIFEST_FILE

TIME_LIMIT_S = 10.0
MEMORY_LIMIT_GIB = 2.0


def write_synthetic_run(run_dir: Path, ranks: int, steps: int, seed: int = 0) -> None:
    """A run folder as a 2-node DDP job would leave it: every phase timed,
    rank 3 a straggler (10 % slower steps)."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True)
    hosts = [f"node{r * 2 // ranks}" for r in range(ranks)]
    manifest = {"format": "trainperf-run", "version": 1, "warmup_steps": 2,
                "config": {"run_id": run_dir.name, "model": "synthetic", "seq_len": 1024},
                "environment": {"world_size": ranks, "device": "cpu", "strategy": "ddp",
                                "ranks": [{"rank": r, "host": h, "node": h} for r, h in enumerate(hosts)]}}
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    for rank in range(ranks):
        slow = 1.1 if rank == 3 else 1.0
        phases = rng.uniform(0.001, 0.02, size=(steps, 9)) * slow
        step_s = phases.sum(axis=1) + 0.0005
        start_s = np.concatenate(([0.5], 0.5 + np.cumsum(step_s)[:-1]))
        loss = 5.0 * np.exp(-np.arange(steps) / steps) + rng.normal(0, 0.01, steps)
        lines = [rankfile.header_line(rank, hosts[rank], rank * 2 // ranks, hosts[rank])]
        for i in range(steps):
            p = phases[i].tolist()
            lines.append(rankfile.step_line([i, i < 2, float(start_s[i]), float(step_s[i]), *p,
                                             8192, 8, 1, float(loss[i]), 1.5]))
        lines.append(rankfile.end_line(steps, {}))
        (run_dir / rankfile.STEPS_FILE.format(rank=rank)).write_bytes(b"".join(lines))


MEASURE = r"""
import resource, sys, time, json
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
t0 = time.perf_counter()
import trainperf
from trainperf.steps import load_steps
t1, c1 = time.perf_counter(), cpu()
steps = load_steps(sys.argv[1])
t2 = time.perf_counter()
runs = trainperf.load_runs(sys.argv[1])
t3, c3 = time.perf_counter(), cpu()
print(json.dumps({"import_s": t1 - t0, "load_steps_s": t2 - t1, "load_runs_s": t3 - t2, "rows": len(steps),
                  "cpu_s": c3 - c1,
                  "elapsed_s": float(runs["elapsed_s"].iloc[0]), "slowest_rank": int(runs["slowest_rank"].iloc[0]),
                  "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed loads (fresh process each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "synthetic-run"
        started = time.perf_counter()
        write_synthetic_run(run_dir, args.ranks, args.steps)
        size = sum(p.stat().st_size for p in run_dir.iterdir())
        print(f"wrote {args.ranks} ranks x {args.steps} steps ({size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - started:.1f} s")
        results = [json.loads(subprocess.run([sys.executable, "-c", MEASURE, str(run_dir)], check=True,
                                             capture_output=True, text=True).stdout)
                   for _ in range(args.repeat)]
    print(f"\n{'run':>4} {'rows':>10} {'load_steps s':>13} {'load_runs s':>12} {'total s':>8} {'CPU s':>6} "
          f"{'peak RSS GiB':>13}")
    for i, r in enumerate(results, start=1):
        total = r["load_steps_s"] + r["load_runs_s"]
        print(f"{i:>4} {r['rows']:>10,} {r['load_steps_s']:>13.2f} {r['load_runs_s']:>12.2f} {total:>8.2f} "
              f"{r['cpu_s']:>6.2f} {r['peak_rss_gib']:>13.2f}")
    best = min(r["load_steps_s"] + r["load_runs_s"] for r in results)
    median = float(np.median([r["load_steps_s"] + r["load_runs_s"] for r in results]))
    peak = max(r["peak_rss_gib"] for r in results)
    ok = median <= TIME_LIMIT_S and peak <= MEMORY_LIMIT_GIB
    print(f"\nmedian {median:.2f} s (best {best:.2f} s; target <= {TIME_LIMIT_S:.0f} s), "
          f"peak RSS {peak:.2f} GiB (target <= {MEMORY_LIMIT_GIB:.0f} GiB): {'PASS' if ok else 'FAIL'}")
    print(f"CPU time of loading (user + sys, all threads): median "
          f"{float(np.median([r['cpu_s'] for r in results])):.2f} s; on a shared machine the wall time grows "
          f"with the other processes' load, the CPU time does not")
    print(f"slowest rank found: {results[0]['slowest_rank']} (the synthetic straggler is rank 3)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
