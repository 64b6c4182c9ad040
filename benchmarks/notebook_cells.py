"""CPU seconds of each code cell of a report notebook, run in this process
with its default parameters (no kernel, no export), each repeat in a fresh
process (nothing remembered between them), the least of the repeats kept:
the work of the cells themselves, which a loaded machine's wall clock hides.
A cell's seconds include its charts' images: after each cell every open
figure is saved as the report's kernel saves it (SVG, cropped to what is
drawn: ``bbox_inches="tight"``) and closed; ``--no-images`` leaves them out.
Cells are grouped as ``benchmarks/report_time.py`` groups them (data loading,
charts, imports, analysis). Usage, from the repository root::

    PYTHONPATH=lib .venv/bin/python benchmarks/notebook_cells.py notebooks/scaling.ipynb --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.pylabtools import print_figure
from report_time import kind_of


def save_figures() -> None:
    """Make the image of every open figure as the inline backend does after a cell (SVG, ``bbox_inches="tight"``,
    :func:`IPython.core.pylabtools.print_figure`), then close them."""
    for number in plt.get_fignums():
        print_figure(plt.figure(number), "svg", bbox_inches="tight")
    plt.close("all")


def run_cells(notebook: Path, images: bool = True) -> list[tuple[str, float, str]]:
    """(part, CPU seconds, first line) of each code cell, run in order in this process; with ``images``, a cell's
    seconds include making its figures' images (:func:`save_figures`)."""
    matplotlib.use("agg")
    shell = InteractiveShell.instance()
    os.chdir(notebook.parent)  # the notebook's relative data paths
    out = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        start = time.process_time()
        result = shell.run_cell(source, silent=True)
        if images:
            save_figures()
        seconds = time.process_time() - start
        if not result.success:
            raise SystemExit(f"{notebook}: cell failed: {source.splitlines()[0]}: {result.error_in_exec!r}")
        out.append(("parameters" if "parameters" in cell["metadata"].get("tags", []) else kind_of(source),
                    seconds, source.splitlines()[0][:70] if source else ""))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes to run it in (the least is kept)")
    parser.add_argument("--no-images", action="store_true", help="leave out making the charts' images")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one run, for the parent process
    args = parser.parse_args()
    if args.json:
        print(json.dumps(run_cells(args.notebook.resolve(), images=not args.no_images)))
        return
    command = [sys.executable, __file__, str(args.notebook), "--json", *(["--no-images"] if args.no_images else [])]
    runs = [json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(args.repeat)]
    cells = [(part, min(run[i][1] for run in runs), line) for i, (part, _, line) in enumerate(runs[0])]
    print(f"{args.notebook}: CPU seconds per code cell, least of {args.repeat} fresh processes\n")
    print("| part | s | cell |\n|---|---:|---|")
    for part, seconds, line in cells:
        print(f"| {part} | {seconds:.2f} | `{line}` |")
    print("\n| part | s |\n|---|---:|")
    for part in dict.fromkeys(part for part, _, _ in cells):
        print(f"| {part} | {sum(s for p, s, _ in cells if p == part):.2f} |")


if __name__ == "__main__":
    main()
