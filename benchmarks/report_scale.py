"""Scale benchmark of the reports: ``trainperf report --data RUN`` on a run of
many ranks, its wall time and the peak resident memory of every process it
starts (the build, the kernel server, each report's kernel), sampled every
0.1 s with psutil.

    python benchmarks/report_scale.py RUN_FOLDER [--out DIR] [--cold]

``RUN_FOLDER``: e.g. one written by ``benchmarks/load_scale.py --run DIR``.
``--cold`` empties trainperf's cache first (a first read inside the build).
Targets (docs/data.md), 1,024 ranks x 20,000 steps: every report in <= 120 s,
no kernel above 2 GiB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

TIME_LIMIT_S = 120.0
KERNEL_LIMIT_GIB = 2.0


def watch(process: psutil.Process, peaks: dict[int, tuple[str, int]], stop: threading.Event) -> None:
    """Record the largest resident set of ``process`` and each of its descendants until ``stop``."""
    while not stop.is_set():
        for p in [process, *process.children(recursive=True)]:
            try:
                rss = p.memory_info().rss
                name = " ".join(p.cmdline()[1:4])[:70]
            except psutil.Error:
                continue
            if rss > peaks.get(p.pid, ("", 0))[1]:
                peaks[p.pid] = (name, rss)
        stop.wait(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cold", action="store_true", help="empty trainperf's cache first")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="report-scale-"))
    env = dict(os.environ)
    if args.cold:
        cache = Path(tempfile.mkdtemp(prefix="report-scale-cache-"))
        env["TRAINPERF_CACHE_DIR"] = str(cache)
    started = time.perf_counter()
    build = subprocess.Popen([sys.executable, "-m", "trainperf", "report", "--data", str(args.run), "--out", str(out)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[int, tuple[str, int]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(psutil.Process(build.pid), peaks, stop), daemon=True)
    watcher.start()
    output, _ = build.communicate()
    wall = time.perf_counter() - started
    stop.set()
    watcher.join()
    if args.cold:
        shutil.rmtree(cache, ignore_errors=True)
    print(output.rstrip())
    print(f"\nexit {build.returncode}, {wall:.1f} s wall; pages in {out}")
    print(f"\n{'peak RSS GiB':>13}  process")
    for name, rss in sorted(peaks.values(), key=lambda x: -x[1])[:12]:
        print(f"{rss / 2**30:>13.2f}  {name}")
    kernels = [rss for name, rss in peaks.values() if "kernel" in name]
    largest = max(kernels, default=0) / 2**30
    ok = build.returncode == 0 and wall <= TIME_LIMIT_S and largest <= KERNEL_LIMIT_GIB
    print(f"\nlargest kernel {largest:.2f} GiB (target <= {KERNEL_LIMIT_GIB:.0f}), {wall:.0f} s "
          f"(target <= {TIME_LIMIT_S:.0f}): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
