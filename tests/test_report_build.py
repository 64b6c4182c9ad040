"""Building reports: what a report the data cannot answer and a failing one
give (pages, index, exit status, messages), how ``--data`` and ``-p`` paths
are taken, and input refused before any kernel starts.

The notebooks here are small fixtures (tests/data/report_fixtures): one that
raises ``NotApplicable`` and one that divides by zero in its fifth cell.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from trainperf.cli import main
from trainperf.report.build import pipeline
from trainperf.report.build.parameters import ParameterError
from trainperf.report.build.pipeline import plan

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "data" / "report_fixtures"
TINY = Path(__file__).resolve().parent / "data" / "report_tiny"
RUN_FOLDERS = ROOT / "data" / "runs" / "bench-cpu-small-fp32-strong-scaling"
MISSING = "no run has micro_batch_size: give the column, or profile with prof.step(samples=...)"


def _visible(page: str) -> str:
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both fixture notebooks built with the command line; (exit status, stdout, stderr, out dir)."""
    out = tmp_path_factory.mktemp("fixture-reports")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "NOTEBOOKS", FIXTURES)
        mp.chdir(ROOT)
        capture = _Capture()
        with capture:
            status = main(["report", "--out", str(out)])
    return status, capture.out, capture.err, out


class _Capture:
    """stdout and stderr of a block, as text (the module fixture cannot use capsys)."""

    def __enter__(self):
        import contextlib
        import io

        self._out, self._err = io.StringIO(), io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._out))
        self._stack.enter_context(contextlib.redirect_stderr(self._err))

    def __exit__(self, *exc):
        self._stack.close()
        self.out, self.err = self._out.getvalue(), self._err.getvalue()


@pytest.mark.slow
def test_failure_exits_1_and_names_notebook_cell_and_error(built):
    status, out, err, _ = built
    assert status == 1
    assert err.strip().splitlines() == [
        "trainperf report: broken failed: tests/data/report_fixtures/broken.ipynb, cell 5 (`ratio = 1 / 0`): "
        "ZeroDivisionError: division by zero"]
    assert re.search(r"broken\s+FAILED", out) and re.search(r"not_applicable\s+n/a", out)
    assert "building 2 reports" in out and "(2 reports in" in out


@pytest.mark.slow
def test_failed_page_has_one_error_line_and_no_empty_sections(built):
    out_dir = built[3]
    page = (out_dir / "broken.html").read_text()
    text = _visible(page)
    assert text.count("This report failed: tests/data/report_fixtures/broken.ipynb, cell 5") == 1
    assert "An Exception was encountered" not in text and "Traceback" not in text
    assert "read 3 runs" in text and "Inputs" in text  # what ran before the error stays
    body = _visible(page.partition("<body")[2])
    assert body.index("This report failed") < body.index("read 3 runs")  # the error line comes first
    assert "Summary" not in text and "Details" not in text and "never shown" not in text


@pytest.mark.slow
def test_not_applicable_report_is_a_short_page_marked_in_the_index(built):
    _, out, _, out_dir = built
    assert f"not_applicable is not applicable to this data: {MISSING}" in out
    page = (out_dir / "not_applicable.html").read_text()
    text = _visible(page)
    assert f"Not applicable: {MISSING}" in text
    assert "Summary" not in text and "The sweep" not in text and "Traceback" not in text
    assert "<title>Sweep of a fixture" in page  # the title parameter, though the notebook stopped before its header
    assert 'class="tp-toc"' not in page  # no contents box without sections
    index = (out_dir / "index.html").read_text()
    card = re.search(r'<section class="tp-card" id="report-not_applicable">(.*?)</section>', index, re.S)
    assert card and "not applicable" in card.group(1) and MISSING in _visible(card.group(1))
    assert "Sweep of a fixture" in _visible(card.group(1))
    assert "1 failed" in _visible(index) and "1 not applicable" in _visible(index)


@pytest.mark.slow
def test_not_applicable_alone_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "NOTEBOOKS", FIXTURES)
    assert main(["report", "--only", "not_applicable", "--out", str(tmp_path)]) == 0
    assert "building 1 report into" in capsys.readouterr().out


@pytest.mark.parametrize("given, message", [
    ("no/such/runs.csv", "--data no/such/runs.csv: no such file or folder"),
    ("empty", "--data empty: the folder holds no runs table, run folder or log"),
])
def test_bad_data_is_refused_in_one_line_before_any_kernel(given, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not data\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: pytest.fail("a kernel was started"))
    start = time.perf_counter()
    assert main(["report", "--data", given, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"trainperf report: error: {message}\n"
    assert time.perf_counter() - start < 5


def test_an_out_folder_that_cannot_be_written_is_refused_in_one_line_before_any_kernel(tmp_path, monkeypatch,
                                                                                     capsys):
    (tmp_path / "a-file").write_text("not a folder\n")  # no folder can be made inside a file, not even by root
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: pytest.fail("a kernel was started"))
    assert main(["report", "--out", str(tmp_path / "a-file" / "reports")]) == 2
    assert capsys.readouterr().err == (f"trainperf report: error: --out {tmp_path / 'a-file' / 'reports'}: "
                                       "cannot write there (Not a directory)\n")


def test_data_replaces_the_per_rank_steps_too():
    table = TINY / "runs.csv"
    (scaling,) = plan(["scaling"], data=[table, RUN_FOLDERS])
    assert scaling.parameters["data"] == [str(table), str(RUN_FOLDERS)]
    assert scaling.parameters["steps"] == [str(RUN_FOLDERS)]  # the runs table holds no steps
    (scaling,) = plan(["scaling"], data=[table])
    assert scaling.parameters["steps"] == []  # never the embedded seed ranks
    (throughput,) = plan(["throughput"], data=[table])
    assert "steps" not in throughput.parameters


def test_path_parameters_resolve_against_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (scaling,) = plan(["scaling"], parameters=[("steps", "ranks.csv"), ("data", '["a.csv", "/abs/b.csv"]'),
                                               ("title", "a/b")])
    assert scaling.parameters["steps"] == [str(tmp_path / "ranks.csv")]
    assert scaling.parameters["data"] == [str(tmp_path / "a.csv"), "/abs/b.csv"]
    assert scaling.parameters["title"] == "a/b"  # not a path parameter


def test_data_given_explicitly_wins_over_steps_from_data():
    (scaling,) = plan(["scaling"], data=[RUN_FOLDERS], parameters=[("steps", str(TINY / "ranks.csv"))])
    assert scaling.parameters["steps"] == [str(TINY / "ranks.csv")]
    with pytest.raises(ParameterError, match="no such file"):
        plan(["scaling"], data=[RUN_FOLDERS / "nope"])


def test_data_that_cannot_be_read_is_refused_before_any_kernel_starts(tmp_path):
    """A CSV with column names of its own (it needs a mapping, and says where) and a run folder whose
    manifest.json is missing: one line each, from plan(), before a notebook runs."""
    table = tmp_path / "mine.csv"
    table.write_text("name,devices,secs,toks\na,8,100,1e9\n")
    with pytest.raises(ParameterError, match=r"column 'name': unknown column.*column mapping in "
                                             r"mine\.csv\.trainperf\.yaml"):
        plan(["throughput"], data=[table])
    folder = tmp_path / "copied-run"
    folder.mkdir()
    (folder / "steps-rank0.jsonl").write_text('{"format": "trainperf-steps", "version": 1, "rank": 0}\n')
    with pytest.raises(ParameterError, match="a run folder without manifest.json"):
        plan(["throughput"], data=[folder])
    assert load_runs_skips(tmp_path) == {str(folder): "a run folder without manifest.json"}


def test_a_table_of_its_own_inside_a_data_folder_gets_the_mapping_hint_before_any_kernel_starts(tmp_path, capsys):
    """Its first column is close to a canonical name ('Tokens'): the hint was only "did you mean 'tokens'?", and
    a folder holding the table was taken as data, to fail in every kernel."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "mine.csv").write_text("Tokens,gpus,run_id,Elapsed\n1e9,8,a,100\n")
    hint = r"column 'Tokens': unknown column: did you mean 'tokens'\?.*column mapping in mine\.csv\.trainperf\.yaml"
    with pytest.raises(ParameterError, match=hint):
        plan(["throughput"], data=[folder])
    assert main(["summarize", str(folder / "mine.csv")]) == 2
    assert re.search(hint, capsys.readouterr().err)


def load_runs_skips(parent: Path) -> dict[str, str]:
    """What load_runs of ``parent`` (with a runs table of its own added) skipped, each reason's start."""
    from trainperf import load_runs

    (parent / "mine.csv").unlink()
    (parent / "runs.csv").write_text("run_id,gpus,tokens,elapsed_s\nr,1,100,1\n")
    skipped = load_runs(parent, cache=False).attrs["skipped"]
    return {path: reason.split(":")[0] for path, reason in skipped}


@pytest.mark.slow
def test_data_warnings_in_a_notebook_are_one_line(built):
    import nbformat

    executed = nbformat.read(str(built[3] / "broken.ipynb"), as_version=4)
    streams = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", [])
                      if o.get("output_type") == "stream" and o.get("name") == "stderr")
    assert streams == "DataWarning: rank 1 stopped early\n"


@pytest.mark.slow
def test_kernels_started_together_share_no_address():
    """The build's kernels listen on Unix sockets of their own (IPC), not on TCP
    ports picked and released before the kernel binds them; the sockets are
    removed at shutdown. benchmarks/kernel_start.py is the stress version."""
    import asyncio
    import glob

    from trainperf.report.build.kernels import IPCKernelManager

    async def start_run_stop() -> tuple[str, str, list[str], str]:
        km = IPCKernelManager(kernel_name=pipeline.KERNEL)
        await km.start_kernel(extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
        try:
            client = km.client()
            client.start_channels()
            await client.wait_for_ready(timeout=120)
            reply = await client.execute_interactive("6 * 7", timeout=120, output_hook=lambda msg: None)
            client.stop_channels()
            return km.transport, km.ip, sorted(glob.glob(f"{km.ip}-*")), reply["content"]["status"]
        finally:
            await km.shutdown_kernel(now=True)

    async def together():
        return await asyncio.gather(*(start_run_stop() for _ in range(4)))

    results = asyncio.run(together())
    assert [r[0] for r in results] == ["ipc"] * 4 and [r[3] for r in results] == ["ok"] * 4
    assert len({r[1] for r in results}) == 4  # one socket path per kernel
    assert all(len(r[2]) == 5 for r in results)  # shell, iopub, stdin, control, heartbeat
    assert not [p for r in results for p in glob.glob(f"{r[1]}-*")]  # removed at shutdown
    run_job_source = Path(pipeline.__file__).read_text()
    assert "kernel_manager_class=IPCKernelManager" in run_job_source


def test_a_runs_table_checked_before_the_build_is_not_read_again_by_its_kernels(tmp_path, monkeypatch):
    """``--data runs.csv`` is read once: the check before any kernel starts leaves it in the input cache, where
    the reports' ``load_runs`` finds it."""
    from trainperf.reading import loading

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    table = tmp_path / "runs.csv"
    table.write_bytes((TINY / "runs.csv").read_bytes())
    assert pipeline.check_data([table]) == [table.resolve()]
    monkeypatch.setitem(loading.KINDS, "table", replace(loading.KINDS["table"],
                                                         runs=lambda path: pytest.fail(f"{path} read a second time")))
    assert len(loading.load_runs(table, cache=True)) > 0
