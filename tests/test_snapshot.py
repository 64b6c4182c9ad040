"""One snapshot per report build: a run folder whose steps files grow while
the reports are built is read once before the kernels start
(``trainperf.reading.loading.pin_inputs``), and every page reads that snapshot and
says so in its inputs."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from trainperf.cli import main
from trainperf.errors import DataError
from trainperf.reading.loading import PINNED, load_runs, load_summaries, pin_inputs
from trainperf.report.build import pipeline
from trainperf.report.build.kernels import KERNEL

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "data" / "runs" / "bench-cpu-small-fp32-batch-size" / "bench-cpu-small-fp32-batch-size-mb16x1-r1"
"""A one-rank run folder: a header line, then steps 0 to 15, one line each."""
RUN_ID = RUN.name


def _copy(to: Path, step_lines: int) -> Path:
    """The run folder at ``to`` with the header and the first ``step_lines`` step lines of its steps file."""
    to.mkdir(parents=True)
    shutil.copy(RUN / "manifest.json", to)
    lines = (RUN / "steps-rank0.jsonl").read_text().splitlines(keepends=True)
    (to / "steps-rank0.jsonl").write_text("".join(lines[:1 + step_lines]))
    return to


@pytest.mark.filterwarnings("ignore:run .* is incomplete")  # the first twelve steps: not closed
def test_readers_of_a_pinned_run_read_the_steps_of_the_pin_and_say_it_was_still_being_written(tmp_path,
                                                                                              monkeypatch):
    growing = _copy(tmp_path / "growing" / RUN_ID, 12)
    pins = pin_inputs(growing.parent)
    assert list(pins) == [f"run:{growing}"] and pins[f"run:{growing}"]["last_step"] == {RUN_ID: 11}  # steps 0-11
    monkeypatch.setenv(PINNED, json.dumps(pins))
    lines = (RUN / "steps-rank0.jsonl").read_text().splitlines(keepends=True)
    with (growing / "steps-rank0.jsonl").open("a") as rank_file:  # the training goes on: steps 12 to 15
        rank_file.write("".join(lines[13:]))

    pinned = load_runs(growing.parent, cache=True)
    twelve = load_runs(_copy(tmp_path / "twelve" / RUN_ID, 12), cache=False)  # what the pin read, read apart
    columns = ["run_id", "tokens", "elapsed_s", "steps"]
    pd.testing.assert_frame_equal(pinned[columns], twelve[columns])
    assert load_summaries(growing.parent).per_rank["last_step"].tolist() == [11]
    note, = pinned.attrs["snapshots"]
    assert note.startswith(f"{growing} was still being written: every page of this build reads it as it was at ")
    assert note.endswith(f" ({RUN_ID}: up to step 11)")

    monkeypatch.delenv(PINNED)  # another build: the whole file, as read apart
    whole = load_runs(growing.parent, cache=True)
    pd.testing.assert_frame_equal(whole[columns], load_runs(RUN, cache=False)[columns])
    assert whole["tokens"].item() != pinned["tokens"].item() and whole.attrs["snapshots"] == ()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:run .* is incomplete")
def test_every_page_of_a_build_shows_the_same_steps_of_a_run_folder_being_written(tmp_path, monkeypatch):
    """Three pages, two at a time, while a thread appends a step line to the run's steps file every 20 ms."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("first", "second", "third"):
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell("data = []  # runs\ntitle = 'steps'", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("from trainperf.report import page\nruns = page.open_runs(data)\n"
                                      "print(int(runs['tokens'].item()), int(runs['steps'].item()))\n"
                                      "print(page.inputs_read(runs)[-1])")])
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": KERNEL, "language": "python"}
        nbformat.write(nb, notebooks / f"{name}.ipynb")
    growing = _copy(tmp_path / "runs" / RUN_ID, 12)
    stop = threading.Event()
    writer = threading.Thread(target=_append_steps, args=(growing / "steps-rank0.jsonl", stop))
    monkeypatch.setattr(pipeline, "NOTEBOOKS", notebooks)
    writer.start()
    try:
        assert main(["report", "--data", str(growing.parent), "--out", str(tmp_path / "out"), "--jobs", "2"]) == 0
    finally:
        stop.set()
        writer.join()
    shown = [_printed(tmp_path / "out" / f"{name}.ipynb") for name in ("first", "second", "third")]
    assert shown[0] == shown[1] == shown[2], shown
    tokens, steps = map(int, shown[0][0].split())
    assert f"{RUN_ID}: up to step" in shown[0][1] and "was still being written" in shown[0][1]
    after = load_runs(growing.parent, cache=False)  # the file went on growing while the pages were built
    assert after["tokens"].item() > tokens and after["steps"].item() > steps


def _append_steps(rank_file: Path, stop: threading.Event) -> None:
    """Append step lines (the last one's values, the next step number and start time) until ``stop``."""
    last = json.loads(rank_file.read_text().splitlines()[-1])
    while not stop.wait(0.02):
        last = [last[0] + 1, False, last[2] + last[3], *last[3:]]  # step, warm-up, start_s (s), the rest
        with rank_file.open("a") as handle:
            handle.write(json.dumps(last) + "\n")


def _printed(executed: Path) -> list[str]:
    """The lines the notebook's last cell printed (papermill adds a cell of the parameters given before it)."""
    cell = nbformat.read(executed, as_version=4).cells[-1]
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").splitlines()


@pytest.mark.filterwarnings("ignore:run .* is incomplete")
def test_a_run_pinned_before_its_first_measured_step_stays_unmeasured_for_the_whole_build(tmp_path, monkeypatch):
    growing = _copy(tmp_path / "runs" / RUN_ID, 3)  # steps 0-2: the manifest's 3 warm-up steps
    pins = pin_inputs(growing.parent)
    assert pins[f"run:{growing}"]["last_step"] == {RUN_ID: 2}
    monkeypatch.setenv(PINNED, json.dumps(pins))
    lines = (RUN / "steps-rank0.jsonl").read_text().splitlines(keepends=True)
    with (growing / "steps-rank0.jsonl").open("a") as rank_file:
        rank_file.write("".join(lines[4:]))
    with pytest.raises(DataError, match="no measured steps: 3 step line"):
        load_runs(growing, cache=True)  # named: refused, as the pin read it, not the 16 steps there now
    monkeypatch.delenv(PINNED)
    assert load_runs(growing, cache=True)["tokens"].item() == load_runs(RUN, cache=False)["tokens"].item()
