"""load_runs(..., cache=True): an input unchanged since it was read comes
from the cache; a changed, added or removed file is read again."""

import warnings
from dataclasses import replace

import pandas as pd
import pytest

import trainperf.reading.loading as loading
from trainperf import load_runs
from trainperf.errors import DataWarning
from trainperf.reading.input_cache import input_key

RUNS = "run_id,gpus,tokens,elapsed_s\na,1,1000,10\nb,2,2000,11\n"


@pytest.fixture
def reads(monkeypatch, tmp_path):
    """The inputs loading reads from their files (not from the cache), in a cache of this test."""
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINPERF_INPUT_CACHE", raising=False)
    done = []

    def counting(read):
        def counted(path, *engine):
            done.append(path.name)
            return read(path, *engine)
        return counted

    for name, kind in loading.KINDS.items():
        if kind.runs is not None:
            monkeypatch.setitem(loading.KINDS, name, replace(kind, runs=counting(kind.runs)))
    return done


def test_unchanged_inputs_come_from_the_cache_as_first_read(tmp_path, reads):
    data = tmp_path / "data"
    data.mkdir()
    (data / "one.csv").write_text(RUNS)
    (data / "two.csv").write_text("run_id,gpus,tokens_per_s\nc,8,5e5\n")
    first = load_runs(data, cache=True)
    again = load_runs(data, cache=True)
    assert reads == ["one.csv", "two.csv"]
    pd.testing.assert_frame_equal(first, again)
    assert first.attrs == again.attrs
    pd.testing.assert_frame_equal(first, load_runs(data, cache=False))  # the same as without the cache


def test_a_changed_added_or_removed_file_is_read_again(tmp_path, reads):
    data = tmp_path / "data"
    data.mkdir()
    table = data / "one.csv"
    table.write_text(RUNS)
    assert load_runs(data, cache=True)["tokens"].tolist() == [1000, 2000]
    table.write_text(RUNS.replace("1000", "3000"))  # same size, same second: only the content differs
    assert load_runs(data, cache=True)["tokens"].tolist() == [3000, 2000]
    (data / "two.csv").write_text("run_id,gpus,tokens_per_s\nc,8,5e5\n")
    assert load_runs(data, cache=True)["run_id"].tolist() == ["a", "b", "c"]
    (data / "two.csv").unlink()
    assert load_runs(data, cache=True)["run_id"].tolist() == ["a", "b"]
    assert reads == ["one.csv", "one.csv", "two.csv"]  # one.csv unchanged by the last two steps


def test_a_run_folder_is_keyed_by_every_file_in_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "steps-rank0.jsonl").write_text('{"step": 0}\n')
    before = input_key(run, "run")
    (run / "steps-rank1.jsonl").write_text('{"step": 0}\n')
    assert input_key(run, "run") != before
    assert input_key(run, "run") != input_key(run, "table")


def test_a_sidecar_is_part_of_its_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    before = input_key(log, "log")
    (tmp_path / "train.log.trainperf.yaml").write_text("gpus: 8\n")
    assert input_key(log, "log") != before


def test_warnings_of_a_read_are_raised_again_from_the_cache(tmp_path, reads, monkeypatch):
    (tmp_path / "one.csv").write_text(RUNS)
    real = loading.KINDS["table"].runs

    def warning(path):
        warnings.warn("a doubtful value", DataWarning)
        return real(path)

    monkeypatch.setitem(loading.KINDS, "table", replace(loading.KINDS["table"], runs=warning))
    for _ in range(2):
        with pytest.warns(DataWarning, match="a doubtful value"):
            load_runs(tmp_path / "one.csv", cache=True)


def test_off_reads_every_time_and_errors_are_not_stored(tmp_path, reads, monkeypatch):
    (tmp_path / "bad.csv").write_text("run_id,gpus,tokens,elapsed_s\na,one,1000,10\n")
    for _ in range(2):
        with pytest.raises(loading.DataError, match="'one' is not a number"):
            load_runs(tmp_path / "bad.csv", cache=True)
    assert reads == ["bad.csv", "bad.csv"]
    (tmp_path / "one.csv").write_text(RUNS)
    monkeypatch.setenv("TRAINPERF_INPUT_CACHE", "off")
    load_runs(tmp_path / "one.csv", cache=True)
    load_runs(tmp_path / "one.csv", cache=True)
    assert reads[2:] == ["one.csv", "one.csv"]
    assert not (tmp_path / "cache" / "inputs").exists() or not any((tmp_path / "cache" / "inputs").iterdir())


def test_the_compare_report_reads_its_sides_through_the_cache(tmp_path, reads):
    from trainperf.report.page import open_side

    side = tmp_path / "side.csv"
    side.write_text("run_id,gpus,tokens,elapsed_s,model\nr1,1,1000,10,m\nr2,1,1000,11,m\n")
    first = open_side([str(side)], "baseline_runs")
    again = open_side([str(side)], "baseline_runs")
    assert reads == ["side.csv"]
    pd.testing.assert_frame_equal(first.runs, again.runs)
