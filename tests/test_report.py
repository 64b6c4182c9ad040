"""The reports: parameters, HTML pieces, the analyses they show, and the whole
pipeline (papermill + nbconvert) on the embedded data and on a tiny fixture,
checked in the HTML and in headless Chromium.

Expected figures come from the seed reports (../shared/seeds) or from hand
calculations written next to them; the fixture's values are chosen by hand in
tests/data/report_tiny/.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainperf.report import html
from trainperf.report.batch_size import plateau
from trainperf.report.export import table_of_contents
from trainperf.report.page import InputError, open_runs, open_steps
from trainperf.report.parameters import ParameterError, convert_cli_parameters, declared_parameters
from trainperf.report.pipeline import NOTEBOOKS, REPORTS, build, plan

RUNS_REPORTS = [r for r in REPORTS if r != "compare"]  # reports over a runs table (compare: tests/test_compare.py)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "data" / "reference"
TINY = Path(__file__).resolve().parent / "data" / "report_tiny"
SCREENSHOTS = Path(os.environ["TRAINPERF_SCREENSHOTS"]) if os.environ.get("TRAINPERF_SCREENSHOTS") else None
"""Where the browser tests keep their screenshots; default: beside the pages, in pytest's temporary folder."""
XSS_PLATFORM = "<script>alert(1)</script>"
XSS_RUN = "xss-<img src=x onerror=alert(2)>"


# --- notebooks and parameters -----------------------------------------------------

@pytest.mark.parametrize("name", RUNS_REPORTS)
def test_notebook_opens_with_a_literal_parameters_cell_and_no_outputs(name):
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code[0]["metadata"].get("tags") == ["parameters"]
    assert not any(c.get("outputs") for c in code), "commit notebooks without outputs"
    assert notebook["metadata"]["kernelspec"]["name"] == "trainperf"
    declared = declared_parameters(NOTEBOOKS / f"{name}.ipynb")
    assert {"data", "experiments", "baseline", "precision", "price_per_gpu_hour", "title"} <= set(declared)
    for cell in code[1:]:
        source = "".join(cell["source"])
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", source, re.M)
        assert all(m.startswith("trainperf") for m in imports), imports
        assert not re.search(r"[-+*/]\s*\d|\d\s*[-+*/]", source), f"a formula in a notebook cell: {source}"


def test_cli_values_keep_the_declared_type():
    notebook = NOTEBOOKS / "throughput.ipynb"
    values = convert_cli_parameters(notebook, [("title", "1.10"), ("price_per_gpu_hour", "3"),
                                               ("experiments", "a"), ("baseline", "none")])
    assert values == {"title": "1.10", "price_per_gpu_hour": 3.0, "experiments": ["a"], "baseline": None}
    assert convert_cli_parameters(notebook, [("experiments", '["a", "b"]')]) == {"experiments": ["a", "b"]}
    with pytest.raises(ParameterError, match="no parameter 'nope'"):
        convert_cli_parameters(notebook, [("nope", "1")])
    with pytest.raises(ParameterError, match="price_per_gpu_hour"):
        convert_cli_parameters(notebook, [("price_per_gpu_hour", "cheap")])


def test_plan_rejects_unknown_reports_and_parameters(tmp_path):
    with pytest.raises(ParameterError, match="no report named 'nope'"):
        plan(["nope"], out_dir=tmp_path)
    with pytest.raises(ParameterError, match="no selected report has a parameter 'min_gain'"):
        plan(["throughput"], parameters=[("min_gain", "0.2")], out_dir=tmp_path)
    jobs = plan(["throughput", "batch_size"], parameters=[("min_gain", "0.2")], data=[TINY / "runs.csv"],
                out_dir=tmp_path)
    assert [dict(j.parameters) for j in jobs] == [
        {"data": [str(TINY / "runs.csv")]},
        {"data": [str(TINY / "runs.csv")], "min_gain": 0.2}]


# --- HTML pieces -----------------------------------------------------------------

def test_table_and_text_escape_data():
    frame = pd.DataFrame({"platform": [XSS_PLATFORM], "rate": [122_599.14]})
    out = html.table(frame, [html.Col("platform", "Platform"), html.Col("rate", "Tokens/s", "int")]).html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out and "<script" not in out
    assert ">122,599<" in out
    banner = html.headline("{who} wins", who=XSS_PLATFORM)
    assert "<script" not in banner.html and banner.facts == {"headline": f"{XSS_PLATFORM} wins"}


def test_number_formats():
    assert html.fmt_int(700_969.77) == "700,970"
    assert html.fmt_pct(0.4544) == "45.4 %"
    assert html.fmt_times(1384.64 / 806.75) == "1.72×"
    assert html.fmt_seconds(2_592_000) == "2,592,000 s (720.0 h)"
    assert html.fmt_big(7.6e9) == "7.60 billion"
    assert html.fmt_short(1.76e12) == "1.76 T"
    assert html.fmt_int(float("nan")) == "–"


def test_table_of_contents_nests_h3_under_h2():
    page = ('<h2 id="A">A<a class="anchor-link" href="#A"></a></h2><h3 id="a1">a &amp; 1</h3>'
            '<h2 id="B">B</h2>')
    assert table_of_contents(page) == ('<ol>\n<li><a href="#A">A</a>\n<ol>\n<li><a href="#a1">a &amp; 1</a></li>\n'
                                       '</ol></li>\n<li><a href="#B">B</a></li>\n</ol>')


# --- analyses -----------------------------------------------------------------------

def test_plateau_of_seed_003():
    # tokens/s printed by seed 003, micro-batch 16 ... 1024; gains 93 %, 92 %, 46 %, 22 %, 9.7 %, 5.9 %
    found = plateau(np.array([2090, 4040, 7760, 11360, 13900, 15250, 16150]), 0.10)
    assert found.index == 4  # micro-batch 256: every later step gains < 10 %
    assert found.gains[-1] == pytest.approx(16150 / 15250 - 1)


def test_sparse_peaks_and_winner_of_seed_001():
    from trainperf.report.platforms import comparable, sparse_peak_runs, winners

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv")]))
    assert sorted(sparse_peak_runs(runs)["platform"]) == ["NVIDIA H100 SXM", "NVIDIA H100 SXM"]
    qwen = winners(runs).set_index("model").loc["Qwen 2.5 7B"]
    assert qwen["winner"] == "AMD MI300X"
    assert qwen["margin"] == pytest.approx(87_933 / 78_877 - 1)  # same 8 GPUs: per device = total


def test_one_device_at_two_precisions_is_not_its_own_runner_up():
    """MPT-3B ran on H100 at fp8 and at bf16 and on A100 at bf16 (published MPT
    table): the contest is H100 against A100, H100 at its faster precision."""
    from trainperf.report.platforms import comparable, winners

    runs = comparable(open_runs([str(REFERENCE / "llmfoundry_mpt.csv")]))
    mpt3b = winners(runs).set_index("model").loc["MPT-3B"]
    assert mpt3b["winner"] == "NVIDIA H100 SXM 80GB · fp8"
    assert mpt3b["runner_up"].startswith("NVIDIA A100")


def test_highest_mfu_tile_compares_datasheet_peaks_only():
    """A CPU run's MFU against its own measured peak (data/runs, ~70-80 %) is
    not 'the highest MFU' next to GPU MFUs against datasheet peaks."""
    from trainperf.report.platforms import comparable, headline, own_peak_platforms

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv"), str(ROOT / "data" / "runs")],
                                experiments=["seed001-peak", "bench-cpu-small-fp32-batch-size"]))
    assert own_peak_platforms(runs) == ["cpu"]
    tile = re.search(r"<b>([^<]+)</b><span>highest MFU ([^<]+)</span>", headline(runs).html)
    # seed 001, H100 + Qwen: 78,877 tokens/s x 6 x 7.6e9 FLOPs / 8 GPUs = 449.6 TFLOP/s; / 989.5 dense = 45.4 %
    assert tile.groups() == ("45.4 %", "(datasheet dense peak): NVIDIA H100 SXM, Qwen 2.5 7B")


def test_karp_flatt_trend_of_seed_000_moves_both_ways():
    from trainperf.report.scaling import serial_trend

    # seed 000 tokens/s at 1, 4, 8, 16, 32 GPUs; e = (1/S - 1/p) / (1 - 1/p):
    # 0.0374, 0.0463, 0.0304, 0.0179 -- up, then down: no single trend
    rates, gpus = np.array([34_086, 122_599, 205_908, 374_571, 700_972]), np.array([1, 4, 8, 16, 32])
    speedup = rates[1:] / rates[0]
    e = (1 / speedup - 1 / gpus[1:]) / (1 - 1 / gpus[1:])
    assert e[1] > e[0] and e[3] < e[2]
    assert serial_trend(e) == "moves both ways"
    assert serial_trend(np.array([0.02, 0.03, 0.05])) == "grows"
    assert serial_trend(np.array([0.0111, 0.00889, 0.00645, 0.0067])) == "falls"  # seed 002, 8-64 GPUs
    assert serial_trend(np.array([0.142, 0.119])) == "stays about constant"  # within 1.2x


def test_batch_sweep_does_not_say_throughput_stops_improving():
    from trainperf.report.batch_size import headline, sweeps, throughput_chart

    runs = sweeps(open_runs([str(REFERENCE / "seed_003_batch_size.csv")]))
    shown = headline(runs).html + "".join(getattr(p, "html", "") for p in throughput_chart(runs).parts)
    assert "stops improving" not in shown
    assert "no step of the sweep gains 10 % or more" in shown
    # after micro-batch 256 (13,900 tokens/s) the sweep still reaches 16,150 at 1,024: 16.2 % more
    assert "the fastest later configuration, micro-batch 1,024 × 1 accumulation, is 16.2 % faster in all" in shown


def test_efficiency_column_only_for_experiments_at_several_device_counts():
    from trainperf.report.throughput import measured, summary_table

    runs = measured(open_runs([str(REFERENCE / "seed_000_throughput.csv"), str(ROOT / "data" / "runs")],
                              experiments=["seed000-scaling", "bench-cpu-small-fp32-batch-size"]))
    tables = [p.html for p in summary_table(runs).parts if "<table" in p.html]
    assert len(tables) == 2
    assert "Per-device rate vs. baseline" in tables[0] and "89.9 %" in tables[0]  # 30,650 / 34,086, seed 000
    assert "Per-device rate vs. baseline" not in tables[1]  # one device count: nothing was scaled


def test_unknown_experiment_error_names_a_few_experiments_only():
    with pytest.raises(InputError) as caught:
        open_runs([str(REFERENCE / "llmfoundry_mpt.csv")], experiments=["nope"])
    message = str(caught.value)
    assert re.search(r", … \(\d+ in all\) \(parameter experiments\)$", message), message
    assert message.count("mpt-") == 12


def test_charts_keep_labels_readable():
    from trainperf.report import plots

    stacked = plots.stacked_bars(["1 GPU", "2 GPUs"], {"compute": [10.0, 5.0], "waiting": [0.0, 3.0]},
                                 title="t", ylabel="s")
    assert stacked.figure.axes[0].get_ylim()[1] >= 10.0 * 1.05  # room for the total above the tallest bar
    long = [f"1 process\n1 node\nmicro-batch {m} × {16 // m} accum." for m in (1, 2, 4, 8, 16)]
    bars = plots.bars_with_line(long, [1.0] * 5, [1.0] * 5, bar_label="b", line_label="l", title="t",
                                bar_unit="u", line_unit="v")
    assert bars.figure.axes[0].get_xticklabels()[0].get_rotation() == 30
    short = plots.bars_with_line(["1 GPU", "4 GPUs"], [1.0, 2.0], [1.0, 0.5], bar_label="b", line_label="l",
                                 title="t", bar_unit="u", line_unit="v")
    assert short.figure.axes[0].get_xticklabels()[0].get_rotation() == 0


def test_rank_times_of_seed_004():
    from trainperf.report.scaling import rank_times

    runs = open_runs([str(REFERENCE / "seed_004_scaling.csv")])
    steps = open_steps([str(REFERENCE / "seed_004_ranks.csv")], runs)
    times = rank_times(steps).set_index(["run_id", "rank"])["elapsed_s"]
    assert times[("seed004-b64-g2", 0)] == pytest.approx(1384.64)
    assert times[("seed004-b64-g2", 1)] == pytest.approx(806.75)


@pytest.mark.parametrize("kwargs, message", [
    ({"data": ["/no/such/file.csv"]}, "no such file or folder"),
    ({"experiments": ["nope"]}, "experiment 'nope' has no runs"),
    ({"platforms": ["NVIDIA X"]}, "platform 'NVIDIA X' has no runs"),
    ({"precision": "fp9"}, "unknown precision 'fp9'"),
    ({"baseline": "nope"}, "baseline run 'nope'"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    args = {"data": [str(TINY / "runs.csv")], **kwargs}
    with pytest.raises(InputError, match=message) as caught:
        open_runs(args.pop("data"), **args)
    assert caught.value._render_traceback_() == [f"InputError: {caught.value}"]


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
    # rank 0 / rank 1 = 1384.64 / 806.75 = 1.72x; seed 002: 184,320 / 1,150 = 160.3x at 256 GPUs,
    # and its 64-GPU job costs $3,072 (the seed's cost table: 64 GPUs x 16 h x $3.00 per GPU-hour)
    "scaling": ["1.61×", "1.72×", "160.3×", "Amdahl", "USL", "Straight line", "$3,072.00"],
    # seed 003: 16,150 tokens/s at micro-batch 1024, 16,150 / 15,250 - 1 = 5.9 % ahead of 512
    "batch_size": ["16,150", "5.9 %", "micro-batch 1,024 × 1 accumulation"],
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
    assert page.count('<table class="tp-table"') >= 2
    images = re.findall(r"<img [^>]+>", page)
    assert len(images) >= 2 and all('src="data:image/png;base64,' in i and ' alt="' in i for i in images)
    assert "Data quality" in text and "Conventions" in text and "Inputs read" in text
    assert re.search(r'<nav[^>]*class="tp-toc"[^>]*>.*?<a href="#Summary">Summary</a>', page, re.S)
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


@pytest.mark.slow
def test_index_links_every_report_with_its_headline(embedded):
    index = (embedded / "index.html").read_text()
    text = _visible(index)
    for name in REPORTS:
        assert f'href="{name}.html"' in index
    assert "Peak throughput 700,970 tokens/s" in text  # 1,081,344,000 / 1542.64 s, seed 000 at 32 GPUs
    assert "data/reference/seed_000_throughput.csv" in text
    assert "trainperf 0.1.0" in text and re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d", text)
    assert "FAILED" not in text


EXPECTED_TINY = {
    # 819,200 tokens / 40 s = 20,480; 6,553,600 / 52 s = 126,031
    "throughput": ["20,480", "126,031"],
    # 8 GPUs: (6,553,600 / 52) / (819,200 / 40) = 6.15x; rank spread of ts-g4: 45.0 / 43.5 = 1.03x;
    # the fixture's price of $2.00 per device-hour in the cost table
    "scaling": ["6.15×", "1.03×", "$2.00"],
    # 1,048,576 tokens / 57 s = 18,396; 60 / 57 - 1 = 5.3 % ahead of micro-batch 16 x 2
    "batch_size": ["18,396", "5.3 %", "micro-batch 16 × 2 accumulation"],
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
def test_failing_notebook_leaves_the_others_built(tmp_path):
    """batch_size gets an experiment with no micro-batch sizes and fails in its
    first cells; throughput is still built; the exit status and the message
    name the notebook, the cell and the error."""
    result = subprocess.run(
        [sys.executable, "-m", "trainperf", "report", "--only", "throughput", "batch_size",
         "--data", str(TINY / "runs.csv"), "-p", "experiments", "tiny-scaling", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 1, result.stderr
    assert re.search(r"batch_size failed: notebooks/batch_size\.ipynb, cell 2 \(`.+`\): InputError: none of the "
                     r"4 selected run\(s\) has a micro-batch size", result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    assert (tmp_path / "throughput.html").exists() and (tmp_path / "batch_size.html").exists()
    index = _visible((tmp_path / "index.html").read_text())
    assert "FAILED" in index and "InputError: none of the 4 selected run(s) has a micro-batch size" in index
    assert re.search(r"throughput\s+ok", result.stdout) and re.search(r"batch_size\s+FAILED", result.stdout)


# --- in the browser ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    from trainperf.report.browser import find_chromium

    if find_chromium() is None:
        pytest.fail("headless Chromium is needed: apt-get install chromium (.ci/run installs it)")


@pytest.mark.slow
def test_reports_render_in_chromium(embedded, chromium):
    from trainperf.report.browser import check_page

    shots = SCREENSHOTS or embedded / "screenshots"
    for name in ["index", *REPORTS]:
        found = check_page(embedded / f"{name}.html", screenshot=shots / f"{name}.png")
        assert found.console_errors == [], (name, found.console_errors)
        assert found.broken_images == [] and found.dialogs == [] and found.external_urls == []
        assert found.wide_tables == [], (name, found.wide_tables)
        assert found.scripts == 0
        assert found.images >= (0 if name == "index" else 2)
        assert found.screenshot is not None and found.screenshot.stat().st_size > 10_000


@pytest.mark.slow
def test_escaped_strings_run_no_script_in_chromium(tiny, chromium):
    from trainperf.report.browser import check_page

    for name in ("platforms", "throughput"):
        found = check_page(tiny / f"{name}.html", screenshot=(SCREENSHOTS or tiny / "screenshots") / f"tiny-{name}.png")
        assert found.dialogs == [] and found.scripts == 0 and found.console_errors == []
        assert XSS_PLATFORM in found.text
    assert XSS_RUN in check_page(tiny / "throughput.html").text
