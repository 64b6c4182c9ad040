"""Report build time: where it goes. Builds the reports with the same
pipeline as ``trainperf report`` (or reads a build already made with
``--out DIR``) and prints, per report, the wall clock the CLI sees and the
seconds of each notebook cell that took more than ``--min`` seconds (from
papermill's cell durations), with the first line of the cell. Usage::

    python benchmarks/report_time.py                  # build into a temporary folder, then print
    python benchmarks/report_time.py --out reports    # print the cells of a build in reports/
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from trainperf.report.pipeline import REPORTS, build, plan


def cell_times(executed: Path, least: float) -> list[tuple[float, str]]:
    """(seconds, first line) of each cell of an executed notebook that ran ``least`` seconds or more."""
    cells = json.loads(executed.read_text())["cells"]
    out = []
    for cell in cells:
        seconds = (cell.get("metadata", {}).get("papermill", {}) or {}).get("duration") or 0.0
        if seconds >= least:
            source = "".join(cell.get("source", ""))
            out.append((seconds, next((line for line in source.splitlines() if line.strip()), "")[:70]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="a finished build to read instead of building")
    parser.add_argument("--min", type=float, default=0.3, help="shortest cell listed, seconds")
    args = parser.parse_args()
    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="trainperf-report-time-"))
        start = time.perf_counter()
        result = build(plan(out_dir=out), workers=2)
        print(f"build of {len(result.reports)} reports, 2 at a time: {time.perf_counter() - start:.1f} s wall clock")
        for report in result.reports:
            print(f"  {report.name:<12} {report.seconds:6.1f} s (kernel start, cells, export)")
    for name in REPORTS:
        executed = out / f"{name}.ipynb"
        if executed.exists():
            cells = cell_times(executed, args.min)
            print(f"\n{name}: cells {sum(s for s, _ in cell_times(executed, 0.0)):.1f} s")
            for seconds, line in sorted(cells, reverse=True):
                print(f"  {seconds:6.2f} s  {line}")


if __name__ == "__main__":
    main()
