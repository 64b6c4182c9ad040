"""Report build time: where it goes. Runs ``python -m trainperf report``
as ``make report`` does (or reads a build already made with ``--out DIR``)
and prints the command's wall clock and the CPU seconds of all its
processes, then per report its seconds split into kernel start, imports,
data loading, analysis, charts and the rest (export, from the command's
own per-report times), from papermill's cell timings; then, with
``--cells``, each cell that took more than ``--min`` seconds. Usage::

    python benchmarks/report_time.py                  # build into a temporary folder, then print
    python benchmarks/report_time.py --repeat 2       # build twice (the second is warm), print each
    python benchmarks/report_time.py --out reports    # the cells of a build in reports/ (no "other")
    python benchmarks/report_time.py --repeat 5 --server both   # with and without the kernel server, alternating
    python benchmarks/report_time.py --repeat 4 --against /tmp/old   # this checkout and another, alternating

Each kind of build (kernel server on or off; with ``--against``, each checkout) has a cache folder of its own,
empty at the start and removed at the end: its first build reads every input (cold), the later ones are warm.
With ``--against DIR`` (another checkout, e.g. ``git worktree add /tmp/old REV``), each round builds with
that checkout's ``lib`` first on the path (run from its folder) and with this one's, alternating which goes
first, and prints the medians of all but the first round (warm builds) and their ratio: both versions on the
same machine under the same load.

A cell counts as data loading when it opens the inputs (``page.open_*``,
``page.data_steps``), as charts when it draws with seaborn (``sns.``), as
imports when it only imports and sets the theme, else as analysis (frames,
sentences and the tables that show them). Kernel start is the time from
papermill's start to the first cell; what remains of a report's seconds
(export, writing the executed notebook, stopping the kernel) is "other".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from trainperf.report.build.pipeline import REPORTS

PARTS = ("kernel start", "imports", "data loading", "analysis", "charts", "other")
LOADING = re.compile(r"\bpage\.(open_\w+|data_steps)\(")
REPORT_LINE = re.compile(r"^\s+(\w+)\s+\S.*?\s([\d.]+) s\s", re.M)
"""A report's line in ``trainperf report``'s output: its name, ..., its seconds."""
WITHOUT_SERVER = ("import contextlib, sys, trainperf.report.build.kernels as kernels; "
                  "kernels.forked_kernels = lambda *a, **k: contextlib.nullcontext(False); "
                  "from trainperf.cli import main; sys.exit(main(sys.argv[1:]))")
"""``trainperf report`` with every kernel an ordinary one (no kernel server forking them)."""


def kind_of(source: str) -> str:
    """The part of the build a code cell belongs to (see the module's docstring)."""
    if LOADING.search(source):
        return "data loading"
    if "sns." in source:
        return "charts"
    code = [line for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if code and all(line.startswith(("import ", "from ")) or line.strip() == "theme.apply()" for line in code):
        return "imports"
    return "analysis"


def cell_times(executed: Path) -> list[tuple[float, str, str]]:
    """(seconds, part, first line) of each code cell of an executed notebook."""
    out = []
    for cell in json.loads(executed.read_text())["cells"]:
        if cell.get("cell_type") != "code":
            continue
        seconds = (cell.get("metadata", {}).get("papermill", {}) or {}).get("duration") or 0.0
        source = "".join(cell.get("source", ""))
        first = next((line for line in source.splitlines() if line.strip()), "")
        out.append((seconds, kind_of(source), first[:70]))
    return out


def kernel_start(executed: Path) -> float:
    """Seconds from papermill's start of the notebook to the start of its first cell."""
    nb = json.loads(executed.read_text())
    begun = nb["metadata"]["papermill"]["start_time"]
    first = next(c["metadata"]["papermill"]["start_time"] for c in nb["cells"]
                 if c.get("metadata", {}).get("papermill", {}).get("start_time"))
    return (datetime.fromisoformat(first) - datetime.fromisoformat(begun)).total_seconds()


def split(executed: Path, total: float | None) -> dict[str, float]:
    """The report's seconds per part of :data:`PARTS`."""
    parts = dict.fromkeys(PARTS, 0.0)
    parts["kernel start"] = kernel_start(executed)
    for seconds, part, _ in cell_times(executed):
        parts[part] += seconds
    if total is not None:
        parts["other"] = max(0.0, total - sum(parts.values()))
    return parts


def print_table(out: Path, seconds: dict[str, float]) -> None:
    names = [n for n in REPORTS if (out / f"{n}.ipynb").exists()]
    rows = {n: split(out / f"{n}.ipynb", seconds.get(n)) for n in names}
    print(f"{'seconds':<14}" + "".join(f"{n:>12}" for n in names) + f"{'sum':>10}")
    for part in PARTS:
        values = [rows[n][part] for n in names]
        print(f"{part:<14}" + "".join(f"{v:12.1f}" for v in values) + f"{sum(values):10.1f}")
    totals = [sum(rows[n].values()) for n in names]
    print(f"{'report':<14}" + "".join(f"{v:12.1f}" for v in totals) + f"{sum(totals):10.1f}")


def print_cells(out: Path, least: float) -> None:
    for name in REPORTS:
        executed = out / f"{name}.ipynb"
        if executed.exists():
            cells = cell_times(executed)
            print(f"\n{name}: cells {sum(s for s, _, _ in cells):.1f} s")
            for seconds, part, line in sorted(cells, reverse=True):
                if seconds >= least:
                    print(f"  {seconds:6.2f} s  {part:<13} {line}")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and the processes it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="a finished build to read instead of building")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at a time (as trainperf report --jobs)")
    parser.add_argument("--repeat", type=int, default=1, help="builds in a row (the first may be cold)")
    parser.add_argument("--cells", action="store_true", help="also list the slowest cells")
    parser.add_argument("--min", type=float, default=0.3, help="shortest cell listed, seconds")
    parser.add_argument("--server", choices=("on", "off", "both"), default="on",
                        help="kernels forked from the kernel server (on), ordinary kernels (off), or both, "
                             "alternating which goes first, with the medians of all but the first round")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="another checkout to build with, alternating with this one (kernel server on)")
    args = parser.parse_args()
    if args.against is not None and args.server != "on":
        parser.error("--against builds both checkouts with the kernel server: leave --server out")
    if args.out is not None:
        print_table(args.out, {})
        if args.cells:
            print_cells(args.out, args.min)
        return
    here = Path(__file__).resolve().parents[1]
    if args.against is not None:
        modes = {"against": (args.against.resolve(), ["-m", "trainperf"]), "this": (here, ["-m", "trainperf"])}
    else:
        modes = {"on": (here, ["-m", "trainperf"]), "off": (here, ["-c", WITHOUT_SERVER])}
        modes = modes if args.server == "both" else {args.server: modes[args.server]}
    with contextlib.ExitStack() as stack:
        caches = {mode: stack.enter_context(tempfile.TemporaryDirectory(prefix=f"trainperf-report-time-{mode}-"))
                  for mode in modes}
        walls = build_rounds(args, modes, caches)
    if len(modes) > 1 and all(walls.values()):
        medians = {mode: [statistics.median(v) for v in zip(*found)] for mode, found in walls.items()}
        for mode, (wall, cpu) in medians.items():
            print(f"{mode}: median {wall:.1f} s wall clock, {cpu:.1f} CPU seconds, of {len(walls[mode])} builds")
        first, second = medians.values()
        print(f"{list(modes)[1]} / {list(modes)[0]}: {second[0] / first[0]:.2f} of the wall clock, "
              f"{second[1] / first[1]:.2f} of the CPU seconds")


def build_rounds(args: argparse.Namespace, modes: dict[str, tuple[Path, list[str]]], caches: dict[str, str]
                 ) -> dict[str, list[tuple[float, float]]]:
    """Build ``args.repeat`` rounds of every mode (its checkout and how it starts ``trainperf``), alternating which
    goes first, printing each build; the (wall, CPU) seconds of each mode's builds, all but the first round's where
    several modes alternate."""
    walls: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for attempt in range(1, args.repeat + 1):
        for mode in list(modes) if attempt % 2 else list(modes)[::-1]:
            root, trainperf = modes[mode]
            out = Path(tempfile.mkdtemp(prefix="trainperf-report-time-"))
            command = [sys.executable, *trainperf, "report", "--out", str(out), "--jobs", str(args.jobs)]
            path = os.pathsep.join(filter(None, [str(root / "lib"), os.environ.get("PYTHONPATH")]))
            environment = {**os.environ, "PYTHONPATH": path, "TRAINPERF_CACHE_DIR": caches[mode]}
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            start, cpu = time.perf_counter(), cpu_seconds()
            printed = subprocess.run(command, capture_output=True, text=True, check=True, cwd=root,
                                     env=environment).stdout
            wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
            walls[mode] += [(wall, cpu)] if attempt > 1 or len(modes) == 1 else []
            seconds = {name: float(value) for name, value in REPORT_LINE.findall(printed) if name in REPORTS}
            print(f"\nbuild {attempt}, {mode} ({root}): `trainperf report --jobs {args.jobs}` made "
                  f"{len(seconds)} reports in {out}: {wall:.1f} s wall clock, {cpu:.1f} CPU seconds "
                  f"(load average {load} before)")
            print_table(out, seconds)
            if args.cells:
                print_cells(out, args.min)
    return walls


if __name__ == "__main__":
    main()
