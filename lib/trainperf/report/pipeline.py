"""Build the HTML reports: run each report notebook with papermill, export it
to HTML, and write an index page linking them.

Notebooks run in parallel (``jobs`` at a time, each in its own process and
kernel). A notebook that fails does not stop the others: its executed copy
and its page (up to the failing cell) are still written, the index marks it
failed with the error, and :class:`BuildResult` names the notebook, the cell
and the error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat

import trainperf
from trainperf.report.export import PageInfo, notebook_to_html
from trainperf.report.html import FACTS_KEY
from trainperf.report.index import write_index
from trainperf.report.parameters import ParameterError, declared_parameters

KERNEL = "trainperf"
"""Jupyter kernel the notebooks run in: the project's venv, registered by ``make setup``."""

NOTEBOOKS = Path(trainperf.__file__).resolve().parents[2] / "notebooks"
"""The report notebooks of this checkout."""

REPORTS: tuple[str, ...] = ("throughput", "scaling", "batch_size", "platforms", "compare")
"""The reports, in the order the index lists them."""

CELL_TIMEOUT_S = 600


@dataclass(frozen=True)
class Job:
    """One report to build: source notebook, parameters, where the outputs go."""

    name: str
    source: Path
    parameters: Mapping[str, object]
    out_dir: Path
    generated: str


@dataclass
class ReportResult:
    """What building one report gave."""

    name: str
    source: str
    executed: str | None
    html: str | None
    seconds: float
    error: str | None = None
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def title(self) -> str:
        return str(self.facts.get("title") or self.name.replace("_", " ").capitalize())


@dataclass
class BuildResult:
    """All reports of one build and the index page."""

    reports: list[ReportResult]
    index: Path
    seconds: float

    @property
    def failed(self) -> list[ReportResult]:
        return [r for r in self.reports if not r.ok]


def available_reports(notebooks_dir: Path = NOTEBOOKS) -> list[str]:
    """Report names found in ``notebooks_dir``: the known ones in order, then any other notebook."""
    found = {p.stem for p in notebooks_dir.glob("*.ipynb")}
    return [n for n in REPORTS if n in found] + sorted(found - set(REPORTS))


def plan(names: Sequence[str] | None = None, *, data: Sequence[str | Path] | None = None,
         parameters: Sequence[tuple[str, str]] = (), out_dir: str | Path = "reports",
         notebooks_dir: Path = NOTEBOOKS) -> list[Job]:
    """The jobs for reports ``names`` (default: all), with typed parameters.

    ``data`` (paths, made absolute) replaces every notebook's ``data``
    parameter; each ``(NAME, VALUE)`` in ``parameters`` goes, converted to the
    declared type, to every selected notebook that declares ``NAME``. Raises
    ``ParameterError`` for an unknown report, or a parameter no selected
    notebook declares or whose value does not fit.
    """
    known = available_reports(notebooks_dir)
    names = list(names or known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ParameterError(f"no report named {', '.join(map(repr, unknown))}; reports: {', '.join(known)}")
    declared = {n: declared_parameters(notebooks_dir / f"{n}.ipynb") for n in names}
    for pname, _ in parameters:
        if not any(pname in d for d in declared.values()):
            every = sorted({p for d in declared.values() for p in d})
            raise ParameterError(f"no selected report has a parameter {pname!r}; parameters: {', '.join(every)}")
    generated = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    jobs = []
    for name in names:
        values: dict[str, object] = {}
        if data:
            values["data"] = [str(Path(p).resolve()) for p in data]
        for pname, text in parameters:
            if pname in declared[name]:
                values[pname] = declared[name][pname].convert(text)
        jobs.append(Job(name, notebooks_dir / f"{name}.ipynb", values, Path(out_dir).resolve(), generated))
    return jobs


def build(jobs: Sequence[Job], *, workers: int = 2,
          on_done: Callable[[ReportResult], None] | None = None) -> BuildResult:
    """Run ``jobs`` (``workers`` at a time), export each to HTML and write the
    index. ``on_done`` is called with each result as it finishes."""
    if not jobs:
        raise ParameterError("no reports to build")
    _check_kernel()
    start = time.perf_counter()
    out_dir = jobs[0].out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, ReportResult] = {}
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        futures = [pool.submit(run_job, job) for job in jobs]
        for future in as_completed(futures):
            result = future.result()
            results[result.name] = result
            if on_done:
                on_done(result)
    ordered = [results[j.name] for j in jobs]
    index = write_index(ordered, out_dir / "index.html", version=trainperf.__version__,
                        generated=jobs[0].generated)
    return BuildResult(ordered, index, time.perf_counter() - start)


def run_job(job: Job) -> ReportResult:
    """Execute one notebook with papermill and export it; never raises for a
    failing notebook (the result carries the error)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    # parameters were checked against the notebook's declarations by plan(); papermill's
    # own check cannot read annotations such as `str | None` and would warn about them
    logging.getLogger("papermill").setLevel(logging.ERROR)
    start = time.perf_counter()
    executed = job.out_dir / f"{job.name}.ipynb"
    page = job.out_dir / f"{job.name}.html"
    error = None
    try:
        papermill.execute_notebook(
            str(job.source), str(executed), parameters=dict(job.parameters), kernel_name=KERNEL,
            cwd=str(job.source.parent), progress_bar=False, log_output=False,
            request_save_on_cell_execute=False, execution_timeout=CELL_TIMEOUT_S,
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
    except PapermillExecutionError as exc:
        error = describe_failure(job.source, executed, f"{exc.ename}: {exc.evalue}")
    except Exception as exc:  # noqa: BLE001 -- a report that cannot start is reported, not raised
        error = f"{_display(job.source)}: {type(exc).__name__}: {exc}"
    if not executed.exists():
        return ReportResult(job.name, str(job.source), None, None, time.perf_counter() - start, error)
    nb = nbformat.read(str(executed), as_version=4)
    facts = collect_facts(nb)
    title = str(facts.get("title") or job.name)
    page.write_text(notebook_to_html(nb, PageInfo(title, trainperf.__version__, job.generated)))
    return ReportResult(job.name, str(job.source), str(executed), str(page),
                        time.perf_counter() - start, error, facts)


def collect_facts(nb: nbformat.NotebookNode) -> dict[str, object]:
    """Facts the report recorded in its outputs' metadata (title, headline, inputs)."""
    facts: dict[str, object] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            facts.update(output.get("metadata", {}).get(FACTS_KEY, {}))
    return facts


def describe_failure(source: Path, executed: Path, error: str) -> str:
    """``notebooks/x.ipynb, cell N (`first line of code`): Error: message`` for
    the first cell of the executed notebook that holds an error output; N counts
    the cells of the source notebook as JupyterLab shows them (from 1)."""
    nb = nbformat.read(str(executed), as_version=4)
    original = nbformat.read(str(source), as_version=4)
    ids = [c.get("id") for c in original.cells]
    for cell in nb.cells:
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            where = f"cell {ids.index(cell.get('id')) + 1}" if cell.get("id") in ids else "injected parameters cell"
            return f"{_display(source)}, {where} (`{first.strip()}`): {error}"
    return f"{_display(source)}: {error}"


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _check_kernel() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL not in KernelSpecManager().find_kernel_specs():
        raise ParameterError(f"the Jupyter kernel {KERNEL!r} is not registered: run `make setup` "
                             f"(it runs `python -m ipykernel install --sys-prefix --name {KERNEL}`)")
