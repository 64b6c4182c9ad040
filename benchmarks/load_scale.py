"""Scale benchmark: reading a run of many ranks, this version against a previous one.

Writes a synthetic run folder of ``--ranks`` x ``--steps`` step lines, with
the profiler's own line encoder (the bytes ``StepProfiler`` writes: a 2-node
DDP job, every phase timed, rank 3 a straggler), then reads it in fresh
processes, each measuring its wall time, CPU time and peak resident memory:

* ``first read``: ``load_runs`` then ``load_summaries`` (what a report reads)
  with an empty cache: the rank files are parsed and written to the Parquet
  store, then aggregated by Dask;
* ``cached read``: the same again, from the input cache and the store;
* ``aggregate from the store``: the summaries computed again from the stored
  step intervals (Dask, ``load_steps(lazy=True)``), the engine's own speed;
* ``previous``: the same run read by the revision ``--previous`` (its
  ``load_steps`` then ``load_runs``, which is what its reports did), from a
  copy of that revision's ``lib/`` (``git archive``). Left out with
  ``--previous ''``; a run it cannot finish (out of memory) is reported so.

    python benchmarks/load_scale.py --ranks 256 --steps 20000 [--previous b33d1be] [--run DIR]

``--run DIR`` keeps the run folder (written once, reused when it is there).
Targets (docs/data.md): 256 x 20,000: first read <= 20 s, cached <= 3 s, peak
RSS <= 1.5 GiB; 1,024 x 20,000: first <= 60 s, cached <= 8 s, peak <= 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from trainperf.runfolder import rankfile
from trainperf.runfolder.manifest import MANIFEST_FILE

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {256: (20.0, 3.0, 1.5), 1024: (60.0, 8.0, 2.0)}
"""Ranks: first read (s), cached read (s), peak RSS (GiB)."""
PROCESSES = max(1, min(4, os.cpu_count() or 1))


def version_1_header(rank: int, host: str, node_rank: int, node: str) -> bytes:
    """The profiler's header line, of the steps file's first version (the columns up to ``peak_memory_gb``): the
    one both this version and the previous one read (this one reads the later columns as empty)."""
    header = json.loads(rankfile.header_line(rank, host, node_rank, node))
    header.update(version=1, columns=list(rankfile.VERSION_1_COLUMNS))
    return (json.dumps(header) + "\n").encode()


def write_rank(run_dir: Path, rank: int, ranks: int, steps: int, seed: int = 0) -> None:
    """Rank ``rank``'s steps file (version 1, :func:`version_1_header`): 9 phases timed, rank 3 10 % slower,
    steps 0-1 warm-up."""
    rng = np.random.default_rng([seed, rank])
    slow = 1.1 if rank == 3 else 1.0
    host = f"node{rank * 2 // ranks}"
    phases = rng.uniform(0.001, 0.02, size=(steps, 9)) * slow
    step_s = phases.sum(axis=1) + 0.0005
    start_s = np.concatenate(([0.5], 0.5 + np.cumsum(step_s)[:-1]))
    loss = 5.0 * np.exp(-np.arange(steps) / steps) + rng.normal(0, 0.01, steps)
    lines = [version_1_header(rank, host, rank * 2 // ranks, host)]
    for i in range(steps):
        values = [i, i < 2, float(start_s[i]), float(step_s[i]), *phases[i].tolist(), 8192, 8, 1, float(loss[i]), 1.5]
        assert len(values) == len(rankfile.VERSION_1_COLUMNS)
        lines.append(rankfile.step_line(values))
    lines.append(rankfile.end_line(steps, {}))
    (run_dir / rankfile.STEPS_FILE.format(rank=rank)).write_bytes(b"".join(lines))


def write_synthetic_run(run_dir: Path, ranks: int, steps: int) -> None:
    """A run folder as a 2-node DDP job of ``ranks`` ranks would leave it."""
    run_dir.mkdir(parents=True)
    hosts = [f"node{r * 2 // ranks}" for r in range(ranks)]
    manifest = {"format": "trainperf-run", "version": 1, "warmup_steps": 2,
                "config": {"run_id": run_dir.name, "model": "synthetic", "seq_len": 1024},
                "environment": {"world_size": ranks, "device": "cpu", "strategy": "ddp",
                                "ranks": [{"rank": r, "host": h, "node": h} for r, h in enumerate(hosts)]}}
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    with ProcessPoolExecutor(PROCESSES) as pool:
        list(pool.map(write_rank, [run_dir] * ranks, range(ranks), [ranks] * ranks, [steps] * ranks))


PROLOGUE = r"""
import json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def done(**figures):
    figures["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(figures))
import trainperf
t0, c0 = time.perf_counter(), cpu()
"""
READ = PROLOGUE + r"""
runs = trainperf.load_runs(sys.argv[1])
t1 = time.perf_counter()
summaries = trainperf.load_summaries(sys.argv[1])
t2 = time.perf_counter()
done(load_runs_s=t1 - t0, load_summaries_s=t2 - t1, total_s=t2 - t0, cpu_s=cpu() - c0,
     rows=summaries.rows, elapsed_s=float(runs["elapsed_s"].iloc[0]), slowest_rank=int(runs["slowest_rank"].iloc[0]))
"""
AGGREGATE = PROLOGUE + r"""
from trainperf.aggregate import summarize
summaries = summarize(trainperf.load_steps(sys.argv[1], lazy=True))
done(total_s=time.perf_counter() - t0, cpu_s=cpu() - c0, rows=summaries.rows)
"""
PREVIOUS = PROLOGUE + r"""
steps = trainperf.load_steps(sys.argv[1])
t1 = time.perf_counter()
runs = trainperf.load_runs(sys.argv[1])
t2 = time.perf_counter()
done(load_steps_s=t1 - t0, load_runs_s=t2 - t1, total_s=t2 - t0, cpu_s=cpu() - c0, rows=len(steps),
     elapsed_s=float(runs["elapsed_s"].iloc[0]), slowest_rank=int(runs["slowest_rank"].iloc[0]))
"""


def measure(script: str, run_dir: Path, lib: Path, cache: Path, timeout: float) -> dict:
    """Run ``script`` on ``run_dir`` in a fresh process with ``lib`` on the path and ``cache`` as trainperf's
    cache folder; its figures, or ``{"failed": why}``."""
    env = {**os.environ, "PYTHONPATH": str(lib), "TRAINPERF_CACHE_DIR": str(cache)}
    env.pop("TRAINPERF_INPUT_CACHE", None)
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", script, str(run_dir)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"still running after {timeout:.0f} s"}
    if done.returncode != 0:
        why = "killed (out of memory?)" if done.returncode < 0 else done.stderr.strip().splitlines()[-1:]
        return {"failed": f"exit {done.returncode}: {why}", "wall_s": time.perf_counter() - started}
    return json.loads(done.stdout.strip().splitlines()[-1])


def previous_lib(revision: str, into: Path) -> Path:
    """``lib/`` of ``revision``, extracted into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "lib"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "lib"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--previous", default="b33d1be", help="revision to read the run with too ('': none)")
    parser.add_argument("--run", type=Path, help="keep the run folder here (reused when present)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a read may take")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_dir = args.run or tmp / f"synthetic-{args.ranks}x{args.steps}"
        if not (run_dir / MANIFEST_FILE).exists():
            started = time.perf_counter()
            write_synthetic_run(run_dir, args.ranks, args.steps)
            print(f"wrote {run_dir} in {time.perf_counter() - started:.0f} s")
        size = sum(p.stat().st_size for p in run_dir.iterdir())
        print(f"{args.ranks:,} ranks x {args.steps:,} steps = {args.ranks * args.steps:,} step lines, "
              f"{size / 2**30:.2f} GiB of steps files")
        cache = tmp / "cache"
        results = {"first read": measure(READ, run_dir, ROOT / "lib", cache, args.timeout),
                   "cached read": measure(READ, run_dir, ROOT / "lib", cache, args.timeout),
                   "aggregate from the store": measure(AGGREGATE, run_dir, ROOT / "lib", cache, args.timeout)}
        if args.previous:
            old = previous_lib(args.previous, tmp / "previous")
            results[f"previous ({args.previous})"] = measure(PREVIOUS, run_dir, old, tmp / "previous-cache",
                                                              args.timeout)
        store = sum(p.stat().st_size for p in (cache / "store").rglob("*") if p.is_file())
        if args.run is None:
            shutil.rmtree(run_dir)
    print(f"\n{'read':<26} {'wall s':>8} {'CPU s':>8} {'peak RSS GiB':>13}  rows")
    for name, r in results.items():
        if "failed" in r:
            print(f"{name:<26} {r['failed']}")
            continue
        print(f"{name:<26} {r['total_s']:>8.1f} {r['cpu_s']:>8.1f} {r['peak_rss_gib']:>13.2f}  {r['rows']:,}")
    print(f"\nstore: {store / 2**30:.2f} GiB of Parquet")
    checked = [r for r in results.values() if "slowest_rank" in r]
    print("slowest rank found: " + ", ".join(str(r["slowest_rank"]) for r in checked) + " (the straggler is rank 3); "
          "elapsed_s: " + ", ".join(f"{r['elapsed_s']:.6f}" for r in checked))
    target = TARGETS.get(args.ranks)
    if target is None:
        return 0
    first, cached = results["first read"], results["cached read"]
    ok = ("failed" not in first and "failed" not in cached and first["total_s"] <= target[0]
          and cached["total_s"] <= target[1] and max(first["peak_rss_gib"], cached["peak_rss_gib"]) <= target[2])
    print(f"targets at {args.ranks} ranks: first read <= {target[0]:.0f} s, cached <= {target[1]:.0f} s, "
          f"peak RSS <= {target[2]} GiB: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
