"""Build the HTML reports: run each report notebook with papermill, export it to HTML, and write an index page,
``reports/index.html``: every report with its headline (or its error, or what it lacks), the data sources each
read, the generation time and the trainperf version. A failing notebook does not stop the others: its page (up to
the failing cell, the error in one line at the top) is still written and the index marks it failed; one that
raises :class:`~trainperf.report.html.NotApplicable` gets a short page saying what it lacks, not a failure.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

import jinja2
import nbformat
import papermill
from papermill.exceptions import PapermillExecutionError

import trainperf
from trainperf.errors import DataError
from trainperf.report.build import REPORTS
from trainperf.reading.loading import PINNED, holds_inputs, holds_steps, pin_inputs
from trainperf.report.build.export import TEMPLATES, notebook_to_html, stylesheet, warm_up
from trainperf.report.html import FACTS_KEY, PROJECT_ROOT, NotApplicable, callout, shown_path
from trainperf.report.build.kernel_fork import die_with_parent
from trainperf.report.build.kernels import (KERNEL, IPCKernelManager, environment, forked_kernels, kernel_command,
                                            read_ahead)
from trainperf.report.build.parameters import PATH_PARAMETERS, ParameterError, declared_parameters, resolve_paths

NOTEBOOKS = PROJECT_ROOT / "notebooks"
"""The report notebooks of this checkout."""

CELL_TIMEOUT_S = 600

ERROR_BANNER_TAG = "papermill-error-cell-tag"
"""Tag of the cells papermill adds to an executed notebook that raised ("An Exception was encountered ...")."""


@dataclass
class ReportResult:
    """What building one report gave (:func:`run_job`; the index and the command line show it)."""

    name: str
    source: str
    executed: str | None
    html: str | None
    seconds: float
    error: str | None = None
    facts: dict[str, object] = field(default_factory=dict)
    not_applicable: str | None = None
    """What the data lacks, when the report raised ``NotApplicable`` (not a failure)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def title(self) -> str:
        return str(self.facts.get("title") or self.name.replace("_", " ").capitalize())


@dataclass(frozen=True)
class Job:
    """One report to build: source notebook, parameters, where the outputs go."""

    name: str
    source: Path
    parameters: Mapping[str, object]
    out_dir: Path
    generated: str


@dataclass
class BuildResult:
    """All reports of one build and the index page."""

    reports: list[ReportResult]
    index: Path
    seconds: float

    @property
    def failed(self) -> list[ReportResult]:
        return [r for r in self.reports if not r.ok]


def plan(names: Sequence[str] | None = None, *, data: Sequence[str | Path] | None = None,
         parameters: Sequence[tuple[str, str]] = (), out_dir: str | Path = "reports",
         notebooks_dir: Path = NOTEBOOKS) -> list[Job]:
    """The jobs for reports ``names`` (default: all). ``data`` (paths, made absolute) replaces every notebook's
    ``data``, its ``steps`` (with the paths that hold run folders or steps tables) and its other path parameters
    (``[]``) unless ``parameters`` gives them. Each ``(NAME, VALUE)`` of ``parameters`` goes, converted to the
    declared type, to every selected notebook that declares ``NAME``; ``ParameterError`` where none does, for a
    value that does not fit, an unknown report or a bad ``data`` path."""
    data_paths = check_data(data or ())
    found = {p.stem for p in notebooks_dir.glob("*.ipynb")}
    known = [n for n in REPORTS if n in found] + sorted(found - set(REPORTS))  # the known ones first, in order
    names = list(names or known)
    if unknown := [n for n in names if n not in known]:
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
        if data_paths:
            values["data"] = [str(p) for p in data_paths]
            if "steps" in declared[name]:
                values["steps"] = [str(p) for p in data_paths if holds_steps(p)]
            for other in (p for p in PATH_PARAMETERS if p in declared[name] and p not in values):
                values[other] = []  # none of the embedded data: the notebook says what it needs
        values.update({p: resolve_paths(p, declared[name][p].convert(text)) for p, text in parameters
                       if p in declared[name]})
        jobs.append(Job(name, notebooks_dir / f"{name}.ipynb", values, Path(out_dir).resolve(), generated))
    return jobs


def check_data(paths: Sequence[str | Path]) -> list[Path]:
    """``paths`` made absolute; ``ParameterError`` (one line), before any kernel starts, for a path that does not
    exist, holds no runs table, run folder or log, or cannot be read
    (:func:`~trainperf.reading.loading.holds_inputs`)."""
    resolved = [Path(p).resolve() for p in paths]
    for given, path in zip(paths, resolved):
        if not path.exists():
            raise ParameterError(f"--data {given}: no such file or folder")
        try:
            holds = holds_inputs(path)
        except DataError as exc:
            raise ParameterError(f"--data {given}: {exc}") from None
        if not holds:
            raise ParameterError(f"--data {given}: the folder holds no runs table, run folder or log")
    return resolved


def check_out(out_dir: str | Path) -> None:
    """Create ``out_dir``; ``ParameterError`` (one line), before any kernel
    starts, when it cannot be created or written to."""
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as exc:
        raise ParameterError(f"--out {out_dir}: cannot write there ({exc.strerror or exc})") from None


def build(jobs: Sequence[Job], *, workers: int = 2,
          on_done: Callable[[ReportResult], None] | None = None) -> BuildResult:
    """Run ``jobs`` (``workers`` at a time, each notebook in a kernel of its own:
    :func:`~trainperf.report.build.kernels.forked_kernels`; the workers die with this process, even killed
    outright), export each to HTML and write the index; ``on_done`` gets each result as it finishes. Every page
    reads the inputs as :func:`pinned` read them, so the pages of a build agree on a run folder still being written."""
    if not jobs:
        raise ParameterError("no reports to build")
    kernel = kernel_command()
    if kernel is None:
        raise ParameterError(f"the Jupyter kernel {KERNEL!r} is not registered: run `make setup` "
                             f"(it runs `python -m ipykernel install --sys-prefix --name {KERNEL}`)")
    start = time.perf_counter()
    out_dir = jobs[0].out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, ReportResult] = {}
    # the exporter compiled once here, while the kernel server reads the inputs, instead of once in each worker
    meanwhile = warm_up if multiprocessing.get_start_method() == "fork" else None
    direct = multiprocessing.get_start_method() != "forkserver"  # the workers' parent is this process
    with forked_kernels(kernel, NOTEBOOKS), pinned(data_paths(jobs), meanwhile), ProcessPoolExecutor(
            max_workers=max(1, min(workers, len(jobs))), initializer=die_with_parent if direct else None,
            initargs=(signal.SIGKILL, os.getpid()) if direct else ()) as pool:
        for future in as_completed([pool.submit(run_job, job) for job in jobs]):
            result = future.result()
            results[result.name] = result
            if on_done:
                on_done(result)
    ordered = [results[j.name] for j in jobs]
    index = write_index(ordered, out_dir / "index.html", version=trainperf.__version__,
                        generated=jobs[0].generated)
    return BuildResult(ordered, index, time.perf_counter() - start)


@contextmanager
def pinned(paths: Sequence[str], meanwhile: Callable[[], None] | None = None) -> Iterator[None]:
    """While inside, this process and the kernels it starts read the inputs at or below ``paths`` as they are now
    (:data:`trainperf.reading.loading.PINNED`): read by the kernel server, where one runs, while this process runs
    ``meanwhile`` (its kernels find them in its memory: :func:`~trainperf.report.build.kernels.read_ahead`)."""
    with ThreadPoolExecutor(max_workers=1) as asking:  # its thread ends before the workers are forked
        ahead = asking.submit(read_ahead, list(paths))
        if meanwhile:
            meanwhile()
        pins = ahead.result()
    with environment(PINNED, json.dumps(pin_inputs(*paths) if pins is None else pins)):
        yield


def data_paths(jobs: Sequence[Job]) -> list[str]:
    """Every path the ``jobs`` read data from: their path parameters but the claims, as given, else their
    notebook's defaults (relative to the notebook's folder, where it runs)."""
    paths: list[str] = []
    for job in jobs:
        declared = declared_parameters(job.source)
        for name in (n for n in PATH_PARAMETERS if n in declared and n != "claims"):
            value = job.parameters.get(name, declared[name].default)
            paths += [str(job.source.parent / p) for p in ([value] if isinstance(value, str) else value or [])]
    return list(dict.fromkeys(paths))


def run_job(job: Job) -> ReportResult:
    """Execute one notebook with papermill and export it; never raises for a
    failing notebook (the result carries the error)."""
    # plan() checked the parameters and the result carries any error: papermill's log would repeat it
    logging.getLogger("papermill").setLevel(logging.ERROR)
    start = time.perf_counter()
    executed = job.out_dir / f"{job.name}.ipynb"
    page = job.out_dir / f"{job.name}.html"
    error = not_applicable = None
    try:
        papermill.execute_notebook(
            str(job.source), str(executed), parameters=dict(job.parameters), kernel_name=KERNEL,
            cwd=str(job.source.parent), progress_bar=False, log_output=False,
            request_save_on_cell_execute=False, execution_timeout=CELL_TIMEOUT_S,
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"], kernel_manager_class=IPCKernelManager)
    except PapermillExecutionError as exc:
        if exc.ename == NotApplicable.__name__:
            not_applicable = exc.evalue
        else:
            error = describe_failure(job.source, executed, f"{exc.ename}: {exc.evalue}")
    except Exception as exc:  # noqa: BLE001 -- a report that cannot start is reported, not raised
        error = f"{shown_path(job.source)}: {type(exc).__name__}: {exc}"
    if not executed.exists():
        return ReportResult(job.name, str(job.source), None, None, time.perf_counter() - start, error)
    nb = nbformat.read(str(executed), as_version=4)
    facts = {key: value for cell in nb.cells for output in cell.get("outputs", [])  # recorded: title, headline, inputs
             for key, value in output.get("metadata", {}).get(FACTS_KEY, {}).items()}
    if "title" not in facts:  # stopped before its header: the title it was given
        facts["title"] = job.parameters.get("title") or getattr(declared_parameters(job.source).get("title"),
                                                                "default", None)
    title = str(facts["title"] or job.name)
    if not_applicable is not None:
        nb = cut_at_error(nb, f"Not applicable: {not_applicable}", "warn")
    elif error is not None:
        nb = cut_at_error(nb, f"This report failed: {error}", "bad")
    page.write_text(notebook_to_html(nb, title, trainperf.__version__, job.generated))
    return ReportResult(job.name, str(job.source), str(executed), str(page), time.perf_counter() - start, error,
                        facts, not_applicable)


def cut_at_error(nb: nbformat.NotebookNode, notice: str, kind: str) -> nbformat.NotebookNode:
    """The executed ``nb``, cut in place for the page of a report that stopped: ``notice`` (a callout of
    ``kind``: ``warn``, ``bad``) first, then the cells before the one that raised, without papermill's error
    banner and without headings that no output follows."""
    cells, headings = [], []
    for cell in nb.cells:
        if ERROR_BANNER_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            break
        if cell.cell_type == "markdown":
            headings.append(cell)
        elif cell.get("outputs"):
            cells += [*headings, cell]
            headings = []
    note = callout(notice, kind)
    banner = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "display_data", {"text/html": note.html, "text/plain": note.text})])
    nb.cells = [banner, *cells]
    return nb


def describe_failure(source: Path, executed: Path, error: str) -> str:
    """``notebooks/x.ipynb, cell N (`first line of code`): Error: message`` for the first cell of the executed
    notebook that holds an error output; N counts the source notebook's cells as JupyterLab does (from 1)."""
    ids = [c.get("id") for c in nbformat.read(str(source), as_version=4).cells]
    for cell in nbformat.read(str(executed), as_version=4).cells:
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            where = f"cell {ids.index(cell.get('id')) + 1}" if cell.get("id") in ids else "injected parameters cell"
            return f"{shown_path(source)}, {where} (`{first.strip()}`): {error}"
    return f"{shown_path(source)}: {error}"


def write_index(results: Sequence[ReportResult], path: Path, *, version: str, generated: str) -> Path:
    """Write the index page for ``results`` to ``path`` and return ``path``."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    reports = [{
        "name": r.name, "title": r.title, "ok": r.ok, "error": r.error, "seconds": r.seconds,
        "not_applicable": r.not_applicable,
        "headline": r.facts.get("headline", ""),
        "page": _relative(r.html, path.parent), "executed": _relative(r.executed, path.parent),
    } for r in results]
    sources: dict[str, list[str]] = {}
    for r in results:
        for source in r.facts.get("inputs", []) or []:
            sources.setdefault(shown_path(str(source)), []).append(r.title)
    sources = _under_folders(sources)
    page = env.get_template("index.html.j2").render(
        reports=reports, failed=sum(not r.ok for r in results),
        not_applicable=sum(r.not_applicable is not None for r in results), version=version, generated=generated,
        css=stylesheet(), sources=[{"path": p, "reports": rs} for p, rs in sorted(sources.items())])
    path.write_text(page)
    return path


def _under_folders(sources: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each path's reports moved to the outermost listed folder that holds it (``data/runs`` for
    the run folders found in it), so that a folder given as data is one line, not one per run."""
    out: dict[str, list[str]] = {}
    for path, reports in sources.items():
        holder = min((folder for folder in sources if PurePosixPath(path).is_relative_to(folder)), key=len)
        out[holder] = list(dict.fromkeys([*out.get(holder, []), *reports]))
    return out


def _relative(target: str | None, base: Path) -> str | None:
    return None if target is None else Path(os.path.relpath(target, base)).as_posix()

