"""Export an executed report notebook to one self-contained HTML page with the ``trainperf`` template of
nbconvert (``templates/trainperf``): no code cells or prompts, figures as data URIs, one inline stylesheet, no
scripts and no external URL (it opens offline), a table of contents of its ``h2``/``h3`` headings.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

TEMPLATES = Path(__file__).with_name("templates")
CSS = TEMPLATES / "report.css"
TOC_MARK = "<!--trainperf:toc-->"
_TOC_NAV = re.compile(r'<nav\b[^>]*class="tp-toc"[^>]*>.*?</nav>\s*', re.S)
_HEADING = re.compile(r'<h([23])\s+id="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def stylesheet() -> str:
    """The stylesheet shared by report pages and the index."""
    return CSS.read_text()


@cache
def _exporter() -> HTMLExporter:
    """The page exporter, made once per process (it compiles its templates on first use)."""
    return HTMLExporter(template_name="trainperf", extra_template_basedirs=[str(TEMPLATES)], exclude_input=True,
                        exclude_input_prompt=True, exclude_output_prompt=True, anchor_link_text="")


def notebook_to_html(nb: nbformat.NotebookNode, title: str, version: str, generated: str) -> str:
    """The executed notebook ``nb`` as a self-contained HTML page, its header and footer showing ``title``, the
    trainperf ``version`` and the time it was ``generated``."""
    resources = {"trainperf": {"title": title, "version": version, "generated": generated, "css": stylesheet()}}
    body, _ = _exporter().from_notebook_node(nb, resources=resources)
    toc = table_of_contents(body)
    # a page without sections (a report that stopped early): no contents box
    return _TOC_NAV.sub("", body, count=1) if "<li>" not in toc else body.replace(TOC_MARK, toc, 1)


def warm_up() -> None:
    """Compile the exporter's templates and CSS selectors now (half a second of CPU), for the processes forked after."""
    notebook_to_html(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## a")]), "", "", "")


def table_of_contents(page: str) -> str:
    """A nested list linking the ``h2`` and ``h3`` headings (those with an ``id``) of ``page``."""
    out, open_sub = ["<ol>"], False
    for level, anchor, inner in _HEADING.findall(page):
        text = re.sub(r"<[^>]+>", "", inner).strip()
        if not text:
            continue
        if level == "3" and not open_sub and len(out) > 1:
            out[-1] = out[-1].removesuffix("</li>")
            out.append("<ol>")
            open_sub = True
        elif level == "2" and open_sub:
            out.append("</ol></li>")
            open_sub = False
        # anchor and text are taken from the page, where they are already escaped
        out.append(f'<li><a href="#{anchor}">{text}</a></li>')
    if open_sub:
        out.append("</ol></li>")
    out.append("</ol>")
    return "\n".join(out)

