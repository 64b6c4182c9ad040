"""Scale benchmark: ``trainperf watch`` on a run of 1,024 ranks.

Writes a synthetic run folder of ``--ranks`` steps files of ``--steps`` steps
of history each (the profiler's own line encoder: a 128-node DDP job, every
phase timed, rank 3 slower), then, in this process, takes the first frame
(each file's header and its last 16 KiB read) and ``--frames`` frames more,
appending a batch of ``--batch`` steps to every rank before each (not timed).
A frame is what the live view does once a second: read what was appended,
compute every rank's figures and the run's (MFU by ``trainperf.derived``),
draw the rich table (into a string). Prints each frame's wall time, the
median and the worst, and the process's peak resident memory
(``ru_maxrss``, this writer included).

    python benchmarks/watch_scale.py [--ranks 1024] [--steps 2000] [--batch 100] [--frames 10] [--run DIR]

Targets (issue: a 1,024-rank run): a frame under 1 s, the process under 500 MB.
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from trainperf.runfolder import rankfile
from trainperf.runfolder.manifest import MANIFEST_FILE, write_json
from trainperf.profiler.watch import RunWatch, render

TARGET_FRAME_S = 1.0
TARGET_RSS_MB = 500


def step_lines(rank: int, first: int, count: int, rng: np.random.Generator) -> bytes:
    """``count`` step lines of one rank from step ``first``: phases of about
    a 0.5 s step (rank 3 10 % slower), 4,096 tokens a step."""
    slow = 1.1 if rank == 3 else 1.0
    lines = []
    for step in range(first, first + count):
        phases = [0.01, 0.002, 0.15 * slow, 0.01, 0.25 * slow, 0.03, 0.04, None, None]  # data .. validation
        phases = [p * rng.uniform(0.95, 1.05) if p is not None else None for p in phases]
        exposed = 0.01 if rank == 3 else 0.04
        step_s = sum(p for p in phases[:6] if p) + exposed + 0.005
        values = [step, step < 2, step * 0.5, step_s, *phases[:7], exposed, *phases[7:], 4096, 8, 1, 2.5, 60.0, 70.0,
                  12.0, 0, 0, None, False]
        lines.append(rankfile.step_line(values))
    return b"".join(lines)


def write_run(run_dir: Path, ranks: int, steps: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    nodes = [f"node{r // 8}" for r in range(ranks)]
    write_json(run_dir / MANIFEST_FILE, {
        "format": "trainperf-run", "version": 1, "warmup_steps": 2, "warmup_rule": "fixed",
        "config": {"model": "gpt-7b", "precision": "bf16", "n_params": 6.7e9, "n_layers": 32, "d_model": 4096,
                   "seq_len": 4096},
        "environment": {"device": "NVIDIA H100 SXM", "strategy": "ddp", "world_size": ranks,
                        "ranks": [{"rank": r, "host": nodes[r], "node": nodes[r]} for r in range(ranks)]}})
    rng = np.random.default_rng(0)
    for rank in range(ranks):
        path = run_dir / rankfile.STEPS_FILE.format(rank=rank)
        path.write_bytes(rankfile.header_line(rank, nodes[rank], rank // 8, nodes[rank], 0)
                         + step_lines(rank, 0, steps, rng))


def frame(watch: RunWatch, console: Console) -> float:
    """One frame's wall time (s)."""
    start = time.perf_counter()
    watch.update()
    console.print(render([watch.frame()]))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=2000, help="steps of history per rank")
    parser.add_argument("--batch", type=int, default=100, help="steps appended to every rank before each frame")
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--run", help="keep the run folder here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.run) if args.run else Path(tmp) / "run"
        started = time.perf_counter()
        write_run(run_dir, args.ranks, args.steps)
        size = sum(p.stat().st_size for p in run_dir.iterdir())
        print(f"{args.ranks} ranks x {args.steps} steps written ({size / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - started:.1f} s")
        console = Console(file=io.StringIO(), width=160)
        watch = RunWatch(run_dir)
        first = frame(watch, console)
        times = []
        rng = np.random.default_rng(1)
        step = args.steps
        for _ in range(args.frames):
            for rank in range(args.ranks):
                with (run_dir / rankfile.STEPS_FILE.format(rank=rank)).open("ab") as file:
                    file.write(step_lines(rank, step, args.batch, rng))
            step += args.batch
            times.append(frame(watch, console))
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        slowest = watch.frame().get("slowest", {}).get("rank")
    print(f"first frame (headers + last 16 KiB of each file): {first:.2f} s")
    print(f"frames after a batch of {args.batch} steps on every rank: median {statistics.median(times):.2f} s, "
          f"worst {max(times):.2f} s ({len(times)} frames); slowest rank named: {slowest}")
    print(f"peak resident memory: {rss_mb:.0f} MB")
    ok = max(first, *times) < TARGET_FRAME_S and rss_mb < TARGET_RSS_MB
    print(f"targets (frame < {TARGET_FRAME_S:.0f} s, process < {TARGET_RSS_MB} MB): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
