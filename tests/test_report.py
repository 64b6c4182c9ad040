"""The reports: the notebooks (parameters, short cells, seaborn charts), and
the whole pipeline (papermill + nbconvert) on the embedded data and on a tiny
fixture, checked in the HTML and in headless Chromium. The analyses behind
them are tested in test_report_analysis.py.

Expected figures come from the seed reports (../shared/seeds) or from hand
calculations written next to them; the fixture's values are chosen by hand in
tests/data/report_tiny/.
"""

from __future__ import annotations

import ast
import base64
import fcntl
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import seaborn as sns

from trainperf.report import theme
from trainperf.report.build.export import table_of_contents
from trainperf.report.build.parameters import ParameterError, declared_parameters
from trainperf.report.build.pipeline import NOTEBOOKS, REPORTS, build, plan

import browser  # tests/browser.py: headless Chromium

RUNS_REPORTS = [r for r in REPORTS if r != "compare"]  # reports over a runs table (compare: tests/test_compare.py)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "data" / "reference"
TINY = Path(__file__).resolve().parent / "data" / "report_tiny"
SCREENSHOTS = Path(os.environ["TRAINPERF_SCREENSHOTS"]) if os.environ.get("TRAINPERF_SCREENSHOTS") else None
"""Where the browser tests keep their screenshots; default: beside the pages, in pytest's temporary folder."""
XSS_PLATFORM = "<script>alert(1)</script>"
XSS_RUN = "xss-<img src=x onerror=alert(2)>"


# --- notebooks and parameters -----------------------------------------------------

MAX_CELL_LINES = 15
NOTEBOOK_IMPORTS = ("trainperf", "seaborn", "IPython", "pandas", "matplotlib", "numpy")


def _code_cells(name: str) -> list[dict]:
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    return [c for c in notebook["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", RUNS_REPORTS)
def test_notebook_opens_with_a_literal_parameters_cell_and_no_outputs(name):
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    code = _code_cells(name)
    assert code[0]["metadata"].get("tags") == ["parameters"]
    assert not any(c.get("outputs") for c in code), "commit notebooks without outputs"
    assert notebook["metadata"]["kernelspec"]["name"] == "trainperf"
    declared = declared_parameters(NOTEBOOKS / f"{name}.ipynb")
    assert {"data", "experiments", "baseline", "precision", "price_per_gpu_hour", "title"} <= set(declared)


@pytest.mark.parametrize("name", REPORTS)
def test_papermill_finds_every_parameter_with_its_default_and_help(name):
    """What `papermill --help-notebook` lists is every assignment of the parameters cell (read here with ast),
    each with its type: the annotation (`x: "Optional[float]" = None` where the default is None)."""
    import papermill

    cell = ast.parse("".join(_code_cells(name)[0]["source"]))
    assert all(isinstance(s, ast.AnnAssign) for s in cell.body), "annotated `name: type = literal` lines"
    assigned = {s.target.id: ast.literal_eval(s.value) for s in cell.body}
    annotations = {s.target.id: ast.literal_eval(s.annotation) if isinstance(s.annotation, ast.Constant)
                   else s.annotation.id for s in cell.body}
    found = papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    assert list(found) == list(assigned)
    for pname, parameter in found.items():
        assert parameter["help"] and ast.literal_eval(parameter["default"]) == assigned[pname], pname
        assert parameter["inferred_type_name"] == annotations[pname], pname  # what --help-notebook shows
        default = assigned[pname]
        assert annotations[pname] == (type(default).__name__ if default is not None else annotations[pname]), pname
        assert default is not None or annotations[pname].startswith("Optional["), pname
    assert {p: d.default for p, d in declared_parameters(NOTEBOOKS / f"{name}.ipynb").items()} == assigned


def _notebook_with_parameters(folder: Path, source: str) -> Path:
    import nbformat

    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["parameters"]})
    path = folder / "params.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell], metadata={"kernelspec": {
        "name": "python3", "language": "python", "display_name": "Python 3"}}), path)
    return path


def test_declared_types_come_from_the_default_the_help_or_a_type_comment(tmp_path):
    notebook = _notebook_with_parameters(tmp_path, "price = None  # float: USD per hour\n"
                                                   "scale = 3  # type: float\nname = None  # anything\n")
    declared = declared_parameters(notebook)
    assert {p: d.types for p, d in declared.items()} == {
        "price": ("None", "float"), "scale": ("float",), "name": ("None",)}
    assert [declared[p].convert(text) for p, text in [("price", "2.5"), ("scale", "1.5"), ("name", "none")]] == [
        2.5, 1.5, None]
    with pytest.raises(ParameterError, match="'name' takes None"):
        declared["name"].convert("x")


def test_a_parameters_cell_without_literals_is_refused(tmp_path):
    with pytest.raises(ParameterError, match="parameter root must be a literal"):
        declared_parameters(_notebook_with_parameters(tmp_path, "root = os.getcwd()  # str: where\n"))
    with pytest.raises(ParameterError, match="no parameters"):
        declared_parameters(_notebook_with_parameters(tmp_path, "# nothing here\n"))


@pytest.mark.parametrize("name", REPORTS)
def test_notebook_cells_are_short_and_draw_with_seaborn(name):
    code = _code_cells(name)
    charts = 0
    for cell in code[1:]:
        source = "".join(cell["source"])
        assert len(source.splitlines()) <= MAX_CELL_LINES, source
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", source, re.M)
        assert all(m.split(".")[0] in NOTEBOOK_IMPORTS for m in imports), imports
        draws = re.findall(r"\bsns\.(\w+plot|catplot|displot|relplot)\(", source)
        if re.search(r"\bplt\.|\.subplots\(|Figure\(", source):
            assert draws, f"a chart drawn without seaborn: {source}"
        charts += len(draws)
    assert charts >= 2, f"{name} draws {charts} seaborn chart(s)"


def test_cli_values_keep_the_declared_type():
    def values(*pairs: tuple[str, str]) -> dict[str, object]:
        return dict(plan(["throughput"], parameters=pairs)[0].parameters)

    assert values(("title", "1.10"), ("price_per_gpu_hour", "3"), ("experiments", "a"), ("baseline", "none")) == {
        "title": "1.10", "price_per_gpu_hour": 3.0, "experiments": ["a"], "baseline": None}
    assert values(("experiments", '["a", "b"]')) == {"experiments": ["a", "b"]}
    # a list of bare words, as a shell leaves [seed003-batch-size, x] once the quotes are gone
    assert values(("experiments", "[seed003-batch-size, x]")) == {"experiments": ["seed003-batch-size", "x"]}
    with pytest.raises(ParameterError, match=r"parameter 'data' takes paths, not \[1, 2\]"):
        values(("data", "[1, 2]"))
    with pytest.raises(ParameterError, match="has a parameter 'nope'"):
        values(("nope", "1"))
    with pytest.raises(ParameterError, match="price_per_gpu_hour"):
        values(("price_per_gpu_hour", "cheap"))



def test_the_docs_examples_of_editing_the_scaling_notebook_run(monkeypatch):
    """docs/reports.md shows cells a user edits or adds; they run after the scaling notebook's own, in order."""
    import matplotlib
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    matplotlib.use("agg")
    examples = re.findall(r"```python\n(# scaling\.ipynb.*?)```", (ROOT / "docs" / "reports.md").read_text(), re.S)
    assert len(examples) == 2
    cells = [c for c in json.loads((NOTEBOOKS / "scaling.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    monkeypatch.chdir(NOTEBOOKS)
    shell = InteractiveShell.instance()
    for source in ["".join(c["source"]) for c in cells] + examples:
        plt.close("all")  # as the inline backend does after each cell
        result = shell.run_cell(source, silent=True)
        assert result.success, (source.splitlines()[0], result.error_in_exec)
    shares = plt.figure(plt.get_fignums()[-1])  # the last example's grid
    shares.canvas.draw()
    ticks = [t.get_text() for t in shares.axes[0].get_yticklabels()]
    plt.close("all")
    assert "100 %" in ticks and ticks[0] in ("0 %", "")

def test_plan_rejects_unknown_reports_and_parameters(tmp_path):
    with pytest.raises(ParameterError, match="no report named 'nope'"):
        plan(["nope"], out_dir=tmp_path)
    with pytest.raises(ParameterError, match="no selected report has a parameter 'min_gain'"):
        plan(["throughput"], parameters=[("min_gain", "0.2")], out_dir=tmp_path)
    jobs = plan(["throughput", "batch_size"], parameters=[("min_gain", "0.2")], data=[TINY / "runs.csv"],
                out_dir=tmp_path)
    assert [dict(j.parameters) for j in jobs] == [
        {"data": [str(TINY / "runs.csv")], "claims": []},
        {"data": [str(TINY / "runs.csv")], "claims": [], "min_gain": 0.2}]


def test_table_of_contents_nests_h3_under_h2():
    page = ('<h2 id="A">A<a class="anchor-link" href="#A"></a></h2><h3 id="a1">a &amp; 1</h3>'
            '<h2 id="B">B</h2>')
    assert table_of_contents(page) == ('<ol>\n<li><a href="#A">A</a>\n<ol>\n<li><a href="#a1">a &amp; 1</a></li>\n'
                                       '</ol></li>\n<li><a href="#B">B</a></li>\n</ol>')


# --- the pipeline ----------------------------------------------------------------------

def _shared_dir(tmp_path_factory, name: str) -> Path:
    """A folder shared by every pytest-xdist worker of this session."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


def _built_once(tmp_path_factory, name: str, **plan_args) -> Path:
    """Build the reports into a shared folder once per session (the first
    worker builds, the others wait for it) and return the folder."""
    out = _shared_dir(tmp_path_factory, name)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.html").exists():
            build(plan(out_dir=out, **plan_args), workers=2)
    return out


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> Path:
    return _built_once(tmp_path_factory, "reports-embedded")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _built_once(tmp_path_factory, "reports-tiny", data=[TINY / "runs.csv"],
                       parameters=[("steps", str(TINY / "ranks.csv"))])


def _page(folder: Path, name: str) -> str:
    return (folder / f"{name}.html").read_text()


def _visible(page: str) -> str:
    """The page's text, tags removed, entities decoded, spaces collapsed."""
    import html as stdlib_html

    return re.sub(r"\s+", " ", stdlib_html.unescape(re.sub(r"<[^>]+>", " ", page)))


EXPECTED_EMBEDDED = {
    # seed 000: 135,168,000 tokens / 1102.52 s = 122,599 tokens/s at 4 GPUs; 30,650 per GPU
    "throughput": ["122,599", "30,650", "4 GPUs across 1 node"],
    # seed 004: 2233.50 s / 1384.64 s (slowest rank) = 1.61x, not the 2.04x of averaged ranks;
    # rank 0 / rank 1 = 1384.64 / 806.75 = 1.72x; seed 002: 184,320 / 1,150 = 160.28x at 256 GPUs (shown with
    # its warning: DDP at micro-batch 32 becomes FSDP at 64 on the way), and its 64-GPU job costs $3,072 (the seed's cost table: 64 GPUs x 16 h x $3.00 per GPU-hour)
    "scaling": ["1.61×", "1.72×", "160.28×", "Amdahl", "USL", "Straight line", "$3,072.00",
                "seed002-throughput (weak scaling) changes more than the device count",
                # seed 004 averaged over ranks: 1 - 1095.70 s / 1384.64 s = 20.9 % less than the slowest rank's
                "Mean over ranks understates elapsed by", "20.9 %"],
    # seed 003: 16,150 tokens/s at micro-batch 1024, 16,150 / 15,250 - 1 = 5.9 % ahead of 512; the measured
    # CPU sweep's configurations at micro-batch 2 or more lie within each other's intervals (docs/bench.md)
    "batch_size": ["16,150", "5.9 %", "seed003-batch-size: fastest micro-batch 1,024 × 1 accumulation",
                   "are indistinguishable at the top"],
    # seed 001: 78,877 tokens/s x 6 x 7.6e9 / 1e12 / 8 = 449.6 TFLOP/s per H100 / 989.5 dense = 45.4 %
    # (the seed printed 22.7 % against the sparse 1979); 87,933 / 78,877 - 1 = 11.5 %
    "platforms": ["45.4 %", "989.5", "Sparse peaks in the source", "11.5 %", "AMD MI300X"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS_REPORTS)
def test_embedded_report_shows_its_figures(embedded, name):
    page = _page(embedded, name)
    text = _visible(page)
    for expected in EXPECTED_EMBEDDED[name]:
        assert expected in text, f"{name}: {expected!r} missing"
    assert len(re.findall(r'<table [^>]*class="tp-table', page)) >= 2
    images = re.findall(r"<img [^>]+>", page)
    assert len(images) >= 2 and all('src="data:image/svg+xml;base64,' in i and ' alt="' in i for i in images)
    chart = base64.b64decode(re.search(r'base64,([^"]+)"', images[0]).group(1)).decode()
    assert chart.lstrip().startswith("<?xml") and "<text " in chart  # its letters as text, drawn by the browser
    assert "Data quality" in text and "Conventions" in text and "Inputs read" in text
    assert re.search(r'<nav[^>]*class="tp-toc"[^>]*>.*?<a href="#Summary">Summary</a>', page, re.S)
    assert re.search(r"Claims checked\s+What a report written by hand concluded", text)
    assert re.search(r"\d claims? checked — holds: \d", text)  # the seeds' claims about this page's runs
    assert (embedded / f"{name}.ipynb").exists()


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["embedded", "tiny"])
def test_pages_are_self_contained_and_show_no_code(request, folder):
    out = request.getfixturevalue(folder)
    for page_path in [out / "index.html", *(out / f"{n}.html" for n in REPORTS)]:
        page = page_path.read_text()
        links = re.findall(r'\b(?:src|href)\s*=\s*["\']?([^"\'\s>]+)', page)
        assert links, page_path
        assert not [u for u in links if re.match(r"(?i)(https?:)?//", u)], page_path
        assert "http://" not in page and "https://" not in page, page_path
        assert "<script" not in page.lower()
        assert "jp-InputArea-editor" not in page and "In&nbsp;[" not in page
        assert "import trainperf" not in page and "from trainperf" not in page


PYTHON_WARNING = re.compile(r"\.py:\d+: \w*Warning\b.{0,120}")
"""A warning as Python prints it (``file.py:123: UserWarning: ...``): never on a page."""


@pytest.mark.slow
def test_no_python_warning_text_reaches_a_built_page(embedded):
    """A warning a cell raises is the library's to say in words (data quality), never a traceback on a page."""
    pages = sorted(embedded.glob("*.html"))
    assert len(pages) >= 6  # the five reports and the index
    for path in pages:
        found = PYTHON_WARNING.findall(path.read_text())
        assert not found, (path.name, found[:3])


@pytest.mark.slow
def test_a_scaling_page_of_one_and_two_processes_has_no_python_warning(tmp_path):
    """A profiled run on 1 process and one on 2 (weak scaling: 8 then 16 samples a step, so no Karp–Flatt
    fraction): the serial-fraction chart had no data and seaborn's "Ignoring `palette`" UserWarning reached
    the page. It now says there is nothing to plot."""
    from test_one_answer import _one_rank
    from test_wait_outside import _run

    _one_rank(tmp_path / "data" / "exp" / "p1", 0.040)
    _run(tmp_path / "data" / "exp" / "p2", {0: 0.040})
    out = tmp_path / "out"
    build(plan(["scaling"], data=[tmp_path / "data" / "exp"], out_dir=out), workers=1)
    text = (out / "scaling.html").read_text()
    assert not PYTHON_WARNING.findall(text)
    assert "No Karp–Flatt serial fraction to plot." in text


def test_index_links_every_report_with_its_headline(embedded):
    index = (embedded / "index.html").read_text()
    text = _visible(index)
    for name in REPORTS:
        assert f'href="{name}.html"' in index
    assert "Peak throughput 700,970 tokens/s" in text  # 1,081,344,000 / 1542.64 s, seed 000 at 32 GPUs
    # the scaling card: the largest measured scale of an experiment that changes only the device count
    # (seed 000, 700,970 / 34,086 = 20.6x on 32 GPUs, each GPU doing 22,528 tokens per step: weak scaling),
    # never seed 002's projected cost table (45.0x on 64) nor the confounded seed002-throughput's 160.28x
    assert "seed000-scaling (weak scaling): 32 devices process 20.6× as much per second as 1" in text
    assert "45.0×" not in text and "160" not in text
    assert "data/reference/seed_000_throughput.csv" in text
    # data/runs is one line for the reports that read it, not one line per run folder found in it
    sources = re.findall(r"<li><code>([^<]+)</code> &mdash; ([^<]+)</li>", index)
    runs_line = [reports for path, reports in sources if path == "data/runs"]
    assert runs_line and "Batch size" in runs_line[0] and "Scaling" in runs_line[0]
    assert not [path for path, _ in sources if path.startswith("data/runs/")]
    assert "trainperf 0.1.0" in text and re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d", text)
    assert "FAILED" not in text


EXPECTED_TINY = {
    # 819,200 tokens / 40 s = 20,480; 6,553,600 / 52 s = 126,031
    "throughput": ["20,480", "126,031"],
    # 8 GPUs: (6,553,600 / 52) / (819,200 / 40) = 6.15x; rank spread of ts-g4: 45.0 / 43.5 = 1.03x;
    # the fixture's price of $2.00 per device-hour in the cost table
    "scaling": ["6.15×", "1.03×", "$2.00"],
    # 1,048,576 tokens / 57 s = 18,396; 60 / 57 - 1 = 5.3 % ahead of micro-batch 16 x 2
    "batch_size": ["18,396", "5.3 %", "tiny-sweep: fastest micro-batch 32 × 1 accumulation",
                   "micro-batch 16 × 2 accumulation"],
    # H100: 100,000 / 8 = 12,500 tokens/s per device, twice the 6,250 of the unknown platform:
    # a 100.0 % margin
    "platforms": ["12,500", "100.0 %", "Sparse peaks in the source", XSS_PLATFORM],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS_REPORTS)
def test_tiny_fixture_report(tiny, name):
    text = _visible(_page(tiny, name))
    for expected in EXPECTED_TINY[name]:
        assert expected in text, f"{name}: {expected!r} missing"


@pytest.mark.slow
def test_strings_from_data_are_escaped_in_the_html(tiny):
    for name in ("throughput", "platforms"):
        page = _page(tiny, name)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<script" not in page.lower() and "<img src=x" not in page
    assert "xss-&lt;img src=x onerror=alert(2)&gt;" in _page(tiny, "throughput")


@pytest.mark.slow
def test_strings_from_data_are_escaped_in_the_charts(tiny):
    """The charts are SVG (XML) drawn by matplotlib: a platform name from the data is text in them, escaped."""
    charts = [base64.b64decode(data).decode() for data in
              re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', _page(tiny, "platforms"))]
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in chart for chart in charts)
    assert not any("<script" in chart.lower() for chart in charts)


@pytest.mark.slow
def test_the_charts_carry_no_build_time(embedded):
    """The same chart is the same SVG in every build: matplotlib writes no date into it (theme.apply)."""
    charts = [base64.b64decode(data).decode() for name in REPORTS for data in
              re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', _page(embedded, name))]
    assert charts and not any("<dc:date>" in chart for chart in charts)


def test_a_strip_plot_is_drawn_alike_in_every_build():
    """theme.apply seeds the generator seaborn draws a strip plot's jitter from and salts the SVG's ids: the
    points land in the same places, and the image is the same text."""
    drawn = []
    for _ in range(2):
        np.random.seed(None)  # each kernel starts from a fresh state
        theme.apply()
        figure, ax = plt.subplots()
        sns.stripplot(x=[1.0] * 30 + [2.0] * 30, y=["a"] * 30 + ["b"] * 30, ax=ax)
        svg = io.StringIO()
        figure.savefig(svg, format="svg", metadata={"Date": None})
        plt.close(figure)
        drawn.append(svg.getvalue())
    assert drawn[0] == drawn[1]


@pytest.mark.slow
def test_only_the_reports_that_show_scaling_state_its_conventions_and_notes(embedded):
    """The batch-size and platforms data hold runs that share the fewest devices (derive notes "scaling:
    several runs share the fewest devices: set baseline_run_id"): their pages show neither that note nor the
    multiplier's convention, which the throughput and scaling pages show."""
    for name in RUNS_REPORTS:
        text = _visible(_page(embedded, name))
        shows_scaling = name in ("throughput", "scaling")
        assert ("Scaling multiplier = throughput / baseline throughput" in text) == shows_scaling, name
        if not shows_scaling:
            assert "set baseline_run_id" not in text and "scaling:" not in text, name


@pytest.mark.slow
def test_a_report_the_data_cannot_answer_is_not_applicable_and_the_others_build(tmp_path):
    """batch_size gets an experiment with no micro-batch sizes: its page says
    what is missing and what would supply it, the index marks it not
    applicable, throughput is built, and the build does not fail (a notebook
    that really fails is tested in test_report_build.py)."""
    result = subprocess.run(
        [sys.executable, "-m", "trainperf", "report", "--only", "throughput", "batch_size",
         "--data", str(TINY / "runs.csv"), "-p", "experiments", "tiny-scaling", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "batch_size is not applicable to this data: none of the 4 selected runs has a micro-batch size" \
        in result.stdout + result.stderr
    page = (tmp_path / "batch_size.html").read_text()
    assert "micro_batch_size" in page and "StepProfiler" in page and "Traceback" not in page
    assert "not applicable" in (tmp_path / "index.html").read_text()
    assert (tmp_path / "throughput.html").exists()


# --- in the browser ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    if browser.find_chromium() is None:
        pytest.fail("headless Chromium is needed: apt-get install chromium (.ci/run installs it)")


@pytest.mark.slow
def test_reports_render_in_chromium(embedded, chromium):
    shots = SCREENSHOTS or embedded / "screenshots"
    for name in ["index", *REPORTS]:
        found = browser.check_page(embedded / f"{name}.html", screenshot=shots / f"{name}.png")
        assert found.console_errors == [], (name, found.console_errors)
        assert found.broken_images == [] and found.dialogs == [] and found.external_urls == []
        assert found.wide_tables == [], (name, found.wide_tables)
        assert found.scripts == 0
        assert found.images >= (0 if name == "index" else 2)
        assert found.screenshot is not None and found.screenshot.stat().st_size > 10_000


@pytest.mark.slow
def test_escaped_strings_run_no_script_in_chromium(tiny, chromium):
    for name in ("platforms", "throughput"):
        found = browser.check_page(tiny / f"{name}.html", screenshot=(SCREENSHOTS or tiny / "screenshots") / f"tiny-{name}.png")
        assert found.dialogs == [] and found.scripts == 0 and found.console_errors == []
        assert XSS_PLATFORM in found.text
    assert XSS_RUN in browser.check_page(tiny / "throughput.html").text


@pytest.mark.slow
def test_a_run_without_mfu_gets_a_platforms_page_that_says_so(tmp_path):
    """A CPU run folder without a measured peak has no MFU: the page draws what it can and says why
    the MFU chart is missing (it failed on the empty MFU column before)."""
    from test_store import write_run

    run = write_run(tmp_path / "data" / "cpu-run", ranks=2, steps=10)
    result = build(plan(["platforms"], data=[run], out_dir=tmp_path / "out"), workers=1)
    assert not result.failed, result.failed[0].error
    text = _visible(_page(tmp_path / "out", "platforms"))
    assert "No configuration has an MFU" in text and "No platform and model has two or more configurations" in text


@pytest.mark.slow
def test_a_sweep_of_two_micro_batch_sizes_at_one_and_two_processes_builds_every_page(tmp_path):
    """A user's natural sweep in one experiment (the scaling and platforms pages failed on it): scaling
    studies each work per device and the constant global batch, the batch-size page each device count; no phase
    times, said so."""
    rates = {(8, 1): 4096.0, (8, 2): 7447.0, (16, 1): 4551.0, (16, 2): 8402.0}
    rows = [{"run_id": f"mb{b}-p{g}", "experiment": "my-sweep", "platform": "cpu", "gpus": g,
             "micro_batch_size": b, "global_batch_size": b * g, "tokens": rate * 10, "elapsed_s": 10.0}
            for (b, g), rate in rates.items()]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep.csv", index=False)
    result = build(plan(RUNS_REPORTS, data=[str(tmp_path / "sweep.csv")], out_dir=tmp_path / "out"), workers=2)
    assert not result.failed, result.failed[0].error
    scaling_page = _visible(_page(tmp_path / "out", "scaling"))
    # micro-batch 8 on each process, 8 then 16 samples a step: weak scaling; 7,447 / 4,096 = 1.8x; 16 samples a
    # step on one process (micro-batch 16) and on two (micro-batch 8): strong scaling
    assert ("my-sweep (8 per device; weak scaling): 2 devices process 1.8× as much per second as 1"
            in scaling_page)
    assert "my-sweep (16 per device; weak scaling)" in scaling_page
    assert "my-sweep (global batch 16; strong scaling)" in scaling_page
    batch_page = _visible(_page(tmp_path / "out", "batch_size"))
    for devices in ("1 device", "2 devices"):
        assert f"my-sweep ({devices}): fastest micro-batch 16" in batch_page
    assert "The data of my-sweep (1 device) holds no phase times" in batch_page
    # what to change: 4,551 / 4,096 − 1 = 11.1 % for the larger micro-batch on one process; no phase times,
    # nodes or oversubscription for the throughput page to read a change from
    assert "Use micro-batches of 16 or more" in batch_page and "11.1 %" in batch_page[batch_page.rindex("What to change"):]
    assert "What to change" in _visible(_page(tmp_path / "out", "throughput")).split("Claims checked")[-1]
    assert "The data supports no change: " in _visible(_page(tmp_path / "out", "throughput"))


def test_the_throughput_page_shows_goodput_and_the_warm_up_found(tmp_path):
    """A profiled run of a compiled model (100 steps, warm-up found from the step times) that saved a checkpoint
    after its last step: the page shows its goodput and the checkpoint's part of the wall clock, and its warm-up
    rule; the committed runs beside it, which record no wall clock, are in the steady-state table only."""
    from test_steady_state import compiled, write_profiled

    import trainperf
    from trainperf.report.html import fmt_pct

    (tmp_path / "data").mkdir()
    run = write_profiled(tmp_path / "data" / "compiled", compiled(100), 1)
    total = float(compiled(100).sum())
    (run / "events-rank0.jsonl").write_text('{"format": "trainperf-events", "version": 1, "rank": 0}\n'
                                            f'{{"phase": "checkpoint", "start_s": {total}, "seconds": 0.5}}\n')
    row = trainperf.load_runs(run, cache=False).iloc[0]
    assert row["outside_checkpoint_s"] == pytest.approx(0.5) and row["after_steps_s"] == pytest.approx(0.5, abs=1e-5)
    result = build(plan(["throughput"], data=[run, Path("data/runs").resolve()], out_dir=tmp_path / "out"), workers=1)
    assert not result.failed, result.failed[0].error
    text = _visible(_page(tmp_path / "out", "throughput"))
    assert "checkpoint (outside the steps)" in text and fmt_pct(row["goodput"]) in text
    assert "Warm-up rule" in text and "bench-cpu-small-fp32-weak-scaling-p2-r1" in text
