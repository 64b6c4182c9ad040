"""Past one machine: reading a run folder on a dask.distributed cluster.

Starts a ``LocalCluster`` of ``--workers`` worker processes (one thread each,
``--memory-limit`` each: the stand-in for a cluster's nodes), then reads the
run folder on it as a user names a cluster (``scheduler=client``):
``load_runs`` (the store's first read: every part parsed, written and
summarized by the workers), then ``load_summaries``. Prints the wall time,
each worker's peak resident memory and this process's.

    python benchmarks/cluster_scale.py RUN_FOLDER [--workers 2] [--memory-limit 2GiB]

A run folder of 100 M step lines: ``load_scale.py --ranks 5000 --steps 20000 --run DIR``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_gib() -> float:
    """This process's peak resident memory (GiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="2GiB")
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    import trainperf

    with tempfile.TemporaryDirectory(prefix="cluster-scale-cache-") as cache, LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, memory_limit=args.memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        os.environ["TRAINPERF_CACHE_DIR"] = cache  # the store starts empty (the workers get it with each task's path)
        started = time.perf_counter()
        runs = trainperf.load_runs(args.run, scheduler=client)
        read = time.perf_counter() - started
        summaries = trainperf.load_summaries(args.run, scheduler=client)
        total = time.perf_counter() - started
        workers = client.run(peak_rss_gib)
    print(f"{summaries.rows:,} step intervals of {len(summaries.per_rank):,} ranks on {args.workers} workers "
          f"({args.memory_limit} each): first read {read:.0f} s, with the summaries {total:.0f} s")
    for address, peak in sorted(workers.items()):
        print(f"  worker {address}: peak RSS {peak:.2f} GiB")
    print(f"  this process: peak RSS {peak_rss_gib():.2f} GiB")
    row = runs.iloc[0]
    print(f"elapsed_s {row['elapsed_s']:.6f}, slowest rank {int(row['slowest_rank'])}, steps {int(row['steps'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
