"""The index page of a report build, ``reports/index.html``: every report with its
headline (or its error, or what it lacks), the generation time, the data sources
each report read and the trainperf version; Jinja2 autoescapes every string."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import jinja2

from trainperf.report.build.export import TEMPLATES, stylesheet
from trainperf.report.html import shown_path
from trainperf.report.build.result import ReportResult


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

