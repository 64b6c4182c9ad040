"""Damaged and hostile input: every value bounded and typed, duplicate step
records caught, hostile text (a regular expression, a YAML document) bounded
in time and memory. Each case is one a user or an attacker reported, with
its symptom before the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf import DataError, DataWarning, aggregate_steps, derive, load_runs, load_steps
from trainperf.aggregate import find_warmup
from trainperf.importers import import_path
from trainperf.importers.settings import MAX_YAML_BYTES, read_yaml
from trainperf.report import page
from trainperf.runfolder import eventfile, rankfile
from trainperf.runfolder.reader import model_parallel, open_run_folder, oversubscribed
from trainperf.schema import MOST_RANKS, out_of_bounds

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (the repository's), ended after ``timeout`` seconds: a generous bound,
    far above what the guarded code takes, that only a read without bound reaches."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def import_in_a_fresh_interpreter(log: Path) -> subprocess.CompletedProcess:
    """``import_path(log)`` under :func:`run_python`; a DataError is printed as ``DataError: <message>``."""
    return run_python(f"""
        from trainperf import DataError
        from trainperf.importers import import_path
        try:
            import_path({str(log)!r})
        except DataError as exc:
            print("DataError:", exc)
    """)


# --- hostile text -------------------------------------------------------------------------------------------------

def test_a_backtracking_pattern_ends_in_seconds_with_an_error_naming_the_sidecar(tmp_path):
    """``(a|aa)+$`` backtracks through every split of a run of a's: with Python's ``re`` the time doubles about
    every 1.4 characters (60 a's: years). The read stops at the first line with a DataError naming the sidecar."""
    log = tmp_path / "train.log"
    log.write_text("step 1 " + "a" * 60 + "b\n")
    (tmp_path / "train.log.trainperf.yaml").write_text("pattern: '(?P<step_time_s>a|aa)+$'\n")
    done = import_in_a_fresh_interpreter(log)
    assert done.returncode == 0, done.stderr
    assert "DataError: " + str(tmp_path / "train.log.trainperf.yaml") + ", column 'pattern'" in done.stdout
    assert "line 1 of" in done.stdout and "backtracks" in done.stdout


def test_the_nested_quantifier_of_the_report_ends_in_seconds(tmp_path):
    """``(a+)+$`` took 37 s at 30 characters with ``re``, doubling with each one: at 40, about ten hours. The
    log is read: its line does not match (a DataError saying no line did), not a wait."""
    log = tmp_path / "train.log"
    log.write_text("a" * 40 + "b\n")
    (tmp_path / "train.log.trainperf.yaml").write_text("pattern: '(?P<step_time_s>a+)+$'\n")
    done = import_in_a_fresh_interpreter(log)
    assert done.returncode == 0, done.stderr
    assert "DataError:" in done.stdout and "backtracks" not in done.stdout


def test_a_yaml_alias_bomb_is_refused_before_it_is_built(tmp_path):
    """383 bytes of nested aliases stand for 9^9 strings (4.9 GB when PyYAML built them): refused at the first
    anchor, naming the file and line."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for name, before in zip("bcdefghi", "abcdefgh"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{before}"] * 9) + "]")
    sidecar = tmp_path / "train.log.trainperf.yaml"
    sidecar.write_text("\n".join(lines) + "\n")
    assert len(sidecar.read_bytes()) < 400
    with pytest.raises(DataError, match=r"train.log.trainperf.yaml, line 1: not valid YAML: anchors and aliases"):
        read_yaml(sidecar)


def test_an_alias_alone_is_refused_too(tmp_path):
    sidecar = tmp_path / "s.yaml"
    sidecar.write_text("model: m\nruns:\n  a: &cfg {gpus: 8}\n  b: *cfg\n")
    with pytest.raises(DataError, match=r"line 3: not valid YAML: anchors and aliases"):
        read_yaml(sidecar)


def test_a_sidecar_over_the_size_bound_is_refused_and_one_under_it_read(tmp_path):
    sidecar = tmp_path / "s.yaml"
    sidecar.write_text("model: m\n" + "# padding\n" * (MAX_YAML_BYTES // 10))
    with pytest.raises(DataError, match=r"s.yaml: larger than 1 MiB"):
        read_yaml(sidecar)
    sidecar.write_text("model: m\n" + "# padding\n" * (MAX_YAML_BYTES // 10 - 1))
    assert read_yaml(sidecar) == {"model": "m"}


# --- bounds and types ---------------------------------------------------------------------------------------------

def write_run(folder: Path, ranks: dict[int, list[bytes]], environment: dict | None = None, **manifest) -> Path:
    """A run folder: ``ranks`` maps a rank to its step lines (bytes, each ending in a newline), each file closed
    with an end line."""
    folder.mkdir(parents=True)
    content = {"format": "trainperf-run", "version": 1, "config": {"model": "m"}, "warmup_steps": 1,
               "environment": {"world_size": len(ranks), "device": "cpu", "strategy": "ddp", **(environment or {})},
               **manifest}
    (folder / "manifest.json").write_text(json.dumps(content))
    for rank, lines in ranks.items():
        body = rankfile.header_line(rank, "a", None, "a") + b"".join(lines) + rankfile.end_line(len(lines), {})
        (folder / f"steps-rank{rank}.jsonl").write_bytes(body)
    return folder


def step(i: int, seconds: float = 1.0, forward: float = 0.5, tokens: float = 100.0) -> bytes:
    """A step line as the profiler writes it: step ``i`` starts at ``i`` s and takes ``seconds``; step 0 is
    warm-up. Values the profiler could never write (NaN, infinities) are written as Python's json does."""
    values = dict.fromkeys(rankfile.LINE_COLUMNS)
    values.update(step=i, warmup=i == 0, start_s=float(i), step_s=seconds, forward_s=forward, tokens=tokens,
                  samples=1.0, micro_steps=1, out_of_memory=False)
    return (json.dumps([values[c] for c in rankfile.LINE_COLUMNS]) + "\n").encode()


def test_a_world_size_of_a_billion_is_refused_at_once_in_bounded_memory(tmp_path):
    """It took 19 GB and two minutes (a billion ranks listed as having recorded nothing): now a DataError naming
    the manifest and the key, with the reader's memory growing by less than 20 MB (tracemalloc's peak)."""
    folder = write_run(tmp_path / "r", {0: [step(i) for i in range(4)]}, {"world_size": 1_000_000_000})
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=r"manifest.json, column 'environment.world_size': 1e\+09 is more than "
                                             r"1,048,576"):
            load_runs(folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6


def test_a_steps_file_beyond_the_world_size_is_refused_naming_it(tmp_path):
    folder = write_run(tmp_path / "r", {r: [step(i) for i in range(4)] for r in range(3)}, {"world_size": 2})
    with pytest.raises(DataError, match=r"steps-rank2.jsonl: rank 2 is beyond the manifest's world_size, 2"):
        load_runs(folder)




def test_steps_files_renamed_across_ranks_are_refused_naming_the_file(tmp_path):
    """Two ranks' files swapped: read by their names, rank 0's evaluation was set against the wrong rank's
    steps and the other rank's wait for it read as 0.08 s instead of 4.41 s (the nanoGPT run mb8-p2 of
    tests/data/clients, its files swapped). Each file's header names the rank that wrote it."""
    folder = write_run(tmp_path / "r", {r: [step(i) for i in range(4)] for r in range(2)})
    first, second = (folder / f"steps-rank{r}.jsonl" for r in range(2))
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(first_bytes)
    with pytest.raises(DataError, match=r"steps-rank0.jsonl: cannot read steps file: line 1: written by rank 1, "
                                        r"not by rank 0 as the file's name says"):
        load_runs(folder)
@pytest.mark.parametrize("manifest, key, problem", [
    ({"environment": {"world_size": "2"}}, "environment.world_size", "'2' is not a number"),
    ({"environment": {"world_size": 0}}, "environment.world_size", "0 must be a count of at least 1"),
    ({"environment": {"world_size": 1.5}}, "environment.world_size", "1.5 must be a whole number"),
    ({"environment": {"host": ["cores", 8]}}, "environment.host", "['cores', 8] is not of type dict"),
    ({"environment": {"host": {"cores": "many"}}}, "environment.host.cores", "'many' is not a number"),
    ({"environment": {"ranks": [{"rank": 0, "node": 3}]}}, "environment.ranks[0].node", "3 is not of type str"),
    ({"environment": {"cpu_peak": {"tflops": -1}}}, "environment.cpu_peak.tflops", "-1 must be greater than 0"),
    ({"environment": "cpu"}, "environment", "not an object"),
    ({"config": {"model": "m", "tensor_parallel": "abc"}}, "config.tensor_parallel", "'abc' is not a number"),
    ({"config": {"model": "m", "seq_len": float("nan")}}, "config.seq_len", "nan must be a finite number"),
    ({"warmup_steps": -1}, "warmup_steps", "-1 must not be negative"),
    ({"warmup_rule": 3}, "warmup_rule", "warmup_rule 3 is not one of mser, fixed"),
])
def test_a_manifest_value_of_the_wrong_type_or_out_of_bounds_names_the_file_and_key(tmp_path, manifest, key,
                                                                                      problem):
    """Each gave a raw traceback naming no file (``int('2')`` of a dict, ``float('abc')``) or passed."""
    environment = manifest.pop("environment", None)
    folder = write_run(tmp_path / "r", {0: [step(i) for i in range(4)]}, **manifest)
    if environment is not None:
        content = json.loads((folder / "manifest.json").read_text())
        content["environment"] = environment if not isinstance(environment, dict) else \
            {**content["environment"], **environment}
        (folder / "manifest.json").write_text(json.dumps(content))
    with pytest.raises(DataError) as caught:
        load_runs(folder)
    assert str(caught.value).startswith(f"{folder / 'manifest.json'}, column '{key}': {problem}")


@pytest.mark.parametrize("bad, reason", [
    (step(3, seconds=1e300), "step_s 1e+300 is more than 2,592,000"),
    (step(3, seconds=float("nan")), "step_s missing (null or NaN)"),
    (step(3, seconds=float("inf")), "step_s inf must be a finite number"),
    (step(3, seconds=-1.0), "step_s -1 must be greater than 0"),
    (step(3, seconds=0.0), "step_s 0 must be greater than 0"),
    (step(3, forward=-0.5), "forward_s -0.5 must not be negative"),
    (step(3, forward=float("nan")), None),  # a phase not timed: the line is good
])
def test_an_impossible_value_on_a_step_line_skips_the_line_naming_file_line_and_key(tmp_path, bad, reason):
    """A step time of 1e300 s gave "0 tokens/s" marked ok; NaN, negative and zero times were accepted. Steps 0-5
    of 1 s and 100 tokens each, step 0 warm-up, step 3's line (line 5 of the file) damaged: the line is skipped
    and named, and the run is measured from steps 1, 2, 4, 5: 400 tokens from the start of step 1 (1 s) to the
    end of step 5 (6 s), 80 tokens/s; the skipped step's wall time stays in the window."""
    lines = [step(i) for i in range(6)]
    lines[3] = bad
    folder = write_run(tmp_path / "r", {0: lines})
    if reason is None:
        row = load_runs(folder).iloc[0]
        assert row["steps"] == 5 and row["tokens"] == 500
        return
    with pytest.warns(DataWarning, match=re.escape(f"steps-rank0.jsonl:5: {reason}")):
        row = derive(load_runs(folder)).iloc[0]
    assert row["steps"] == 4 and row["tokens"] == 400 and row["elapsed_s"] == pytest.approx(5.0)
    assert row["tokens_per_s"] == pytest.approx(80.0)


def test_impossible_values_in_a_steps_table_name_the_row_line_and_column(tmp_path):
    table = tmp_path / "steps.csv"
    rows = "".join(f"r,0,{i},{s}\n" for i, s in enumerate([1.0, 1.0, 1e300, 1.0]))
    table.write_text("run_id,rank,step,step_s\n" + rows)
    with pytest.raises(DataError, match=r"steps.csv, line 4, row 3, column 'step_s': is more than 2,592,000"):
        load_steps(table)
    table.write_text("run_id,rank,step,step_s,forward_s\nr,0,0,1.0,0.5\nr,0,1,1.0,-0.5\n")
    with pytest.raises(DataError, match=r"line 3, row 2, column 'forward_s': must not be negative: -0.5"):
        load_steps(table)


def test_impossible_values_in_a_runs_table_and_a_sidecar_are_refused(tmp_path):
    table = tmp_path / "runs.csv"
    table.write_text("run_id,gpus,tokens,elapsed_s\na,8,1000,1e300\n")
    with pytest.raises(DataError, match=r"runs.csv, line 2, row 1, column 'elapsed_s': 1e\+300 is more than"):
        load_runs(table)
    table.write_text("run_id,gpus,tokens,elapsed_s\na,1000000000,1000,10\n")
    with pytest.raises(DataError, match=r"column 'gpus': 1e\+09 is more than 1,048,576"):
        load_runs(table)
    log = tmp_path / "train.log"
    log.write_text("it 1 | 0.5 s\nit 2 | 0.5 s\n")
    (tmp_path / "train.log.trainperf.yaml").write_text(
        "pattern: 'it (?P<step>\\d+) \\| (?P<step_time_s>\\S+) s'\ngpus: 1e9\n")
    with pytest.raises(DataError, match=r"train.log.trainperf.yaml, column 'gpus': 1e\+09 is more than 1,048,576"):
        import_path(log)


def test_an_impossible_step_time_in_a_log_is_set_aside_and_said(tmp_path):
    """Steps 1-6 of 0.5 s and 1,000 tokens, step 4 printed as 1e300 s: step 1 is warm-up, step 4 set aside with
    a note; the window is steps 2, 3, 5, 6: 4,000 tokens in 2.0 s, 2,000 tokens/s (not 0)."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"it {i} | {1e300 if i == 4 else 0.5} s | 1000 tokens\n" for i in range(1, 7)))
    (tmp_path / "train.log.trainperf.yaml").write_text(
        "pattern: 'it (?P<step>\\d+) \\| (?P<step_time_s>\\S+) s \\| (?P<tokens>\\d+) tokens'\n")
    run = derive(import_path(log).runs).iloc[0]
    assert run["tokens_per_s"] == pytest.approx(2000.0) and run["steps"] == 4
    assert "step 4: a step time of 1e+300 s is impossible" in run["notes"]


def test_missing_or_impossible_step_times_leave_the_warm_up_as_it_is():
    """Six steps of 2 s, then 40 of 1 s (1 % noise): MSER finds the steady state at step 6. A NaN and a negative
    time among the steps (damage that got past a reader) are left out of the judgement: the warm-up found is
    the same. Left in, the -50 s time near the end made every truncation's spread alike, and MSER, dividing it
    by the steps kept, then dropped none: no warm-up at all."""
    rng = np.random.default_rng(1)
    seconds = np.r_[np.full(6, 2.0), 1.0 + 0.01 * rng.standard_normal(40)]

    def first_step(times: np.ndarray) -> float:
        frame = pd.DataFrame({"run_id": pd.array(["r"] * len(times), dtype="string"), "step": np.arange(len(times)),
                              "step_s_max": times, "n_steps": 1.0, "warmup": 0.0})
        return float(find_warmup(frame)[1]["first_step"].iloc[0])

    assert first_step(seconds) == 6
    damaged = seconds.copy()
    damaged[[44, 20]] = [-50.0, np.nan]
    assert first_step(damaged) == 6


# --- duplicate step records ---------------------------------------------------------------------------------------

def test_step_lines_written_twice_are_read_once_with_a_warning(tmp_path):
    """Steps 0-10 of 1 s and 100 tokens (step 0 warm-up) with the lines of steps 3-7 written again at the end:
    they read as 15 measured steps and 1,500 tokens, +50 % tokens/s, without a word. Now the copies are read
    once and named: 10 steps, 1,000 tokens from 1 s to 11 s, 100 tokens/s."""
    lines = [step(i) for i in range(11)]
    folder = write_run(tmp_path / "r", {0: lines + lines[3:8]})
    with pytest.warns(DataWarning, match=r"skipped 5 malformed or repeated line\(s\).*steps-rank0.jsonl:13: step 3 "
                                         r"again, the same as line 5: read once"):
        row = derive(load_runs(folder)).iloc[0]
    assert (row["steps"], row["tokens"], row["elapsed_s"]) == (10, 1000, pytest.approx(10.0))
    assert row["tokens_per_s"] == pytest.approx(100.0)


def test_the_data_quality_section_counts_the_repeated_lines(tmp_path):
    """The report's "Skipped and why" lists the reader's warning: the 5 repeated lines, counted and named."""
    lines = [step(i) for i in range(11)]
    write_run(tmp_path / "data" / "r", {0: lines + lines[3:8]})
    runs = page.open_runs(str(tmp_path / "data"))
    reasons = page.skipped(runs)["reason"].tolist()
    assert [r for r in reasons if r.startswith("skipped 5 malformed or repeated line(s)") and "read once" in r]
    assert runs["steps"].tolist() == [10]


def test_a_step_line_written_twice_with_different_values_is_refused_naming_file_step_and_lines(tmp_path):
    lines = [step(i) for i in range(6)]
    lines.insert(4, step(3, seconds=0.5))  # step 3 again (line 6), its first record on line 5
    folder = write_run(tmp_path / "r", {0: lines})
    with pytest.raises(DataError, match=r"steps-rank0.jsonl: step 3 is recorded twice with different values "
                                        r"\(lines 5 and 6\)"):
        load_runs(folder)


def steps_table(path: Path, rows: list[tuple[int, float]]) -> Path:
    """A steps table of run r, rank 0: ``(step, step_s)`` rows, 100 tokens each, step 0 warm-up."""
    path.write_text("run_id,rank,step,step_s,tokens,warmup\n"
                    + "".join(f"r,0,{s},{t},100,{str(s == 0).lower()}\n" for s, t in rows))
    return path


def test_steps_table_rows_repeated_exactly_are_read_once(tmp_path):
    """Steps 0-10 of 1 s, rows of steps 3-7 repeated: 10 measured steps, 1,000 tokens in 10 s (step_s summed:
    the table has no start times), 100 tokens/s."""
    rows = [(i, 1.0) for i in range(11)]
    table = steps_table(tmp_path / "steps.csv", rows + rows[3:8])
    with pytest.warns(DataWarning, match=r"steps.csv: 5 row\(s\) repeat an earlier row exactly, read once \(run r, "
                                         r"rank 0, step 3 in row 12 \(line 13\), the same as row 4 \(line 5\)"):
        row = derive(aggregate_steps(load_steps(table))).iloc[0]
    assert (row["steps"], row["tokens"]) == (10, 1000) and row["tokens_per_s"] == pytest.approx(100.0)


def test_a_restart_keeps_the_latest_attempt_of_the_steps_it_ran_again(tmp_path):
    """Steps 0-7, those from 5 on slow (2 s: the trouble before a crash), then the job restarted from step 5's
    checkpoint and ran steps 5-10 in 1 s each: steps 5-7 keep their second attempt (a warning says so). The run
    is steps 1-10 of 1 s: 10 steps, 1,000 tokens in 10 s, 100 tokens/s (read twice, 13 steps, 1,300 tokens in
    16 s)."""
    rows = [(i, 1.0) for i in range(5)] + [(i, 2.0) for i in range(5, 8)] + [(i, 1.0) for i in range(5, 11)]
    table = steps_table(tmp_path / "steps.csv", rows)
    with pytest.warns(DataWarning, match=r"3 step\(s\) recorded again after a restart: the latest attempt kept"):
        row = derive(aggregate_steps(load_steps(table))).iloc[0]
    assert (row["steps"], row["tokens"], row["elapsed_s"]) == (10, 1000, pytest.approx(10.0))
    assert row["tokens_per_s"] == pytest.approx(100.0)


def test_a_steps_table_with_one_step_twice_and_different_is_refused(tmp_path):
    rows = [(0, 1.0), (1, 1.0), (2, 1.0), (2, 1.5), (3, 1.0)]
    table = steps_table(tmp_path / "steps.csv", rows)
    with pytest.raises(DataError, match=r"steps.csv: run r, rank 0, step 2 is recorded twice with different values, "
                                        r"in row 3 \(line 4\) and row 4 \(line 5\)"):
        load_steps(table)


TWICE = sorted(p.name for p in (ROOT / "tests" / "data" / "importers").glob("*.log"))


@pytest.mark.parametrize("name", TWICE)
def test_a_log_printed_twice_reads_as_the_log(tmp_path, name):
    """Every sample log of the zoo with every line printed twice (a wrapper's echo): the same runs, every figure
    alike, and a note that the echoed lines were read once (they read as a second rank, and a wrapped record
    lost its continuation)."""
    source = ROOT / "tests" / "data" / "importers" / name
    sidecar = source.with_name(name + ".trainperf.yaml")
    read = {}
    for kind, text in (("once", source.read_text()),
                       ("twice", "".join(line + line for line in source.read_text().splitlines(keepends=True)))):
        log = tmp_path / kind / name
        log.parent.mkdir()
        log.write_text(text)
        if sidecar.exists():
            log.with_name(sidecar.name).write_text(sidecar.read_text())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read[kind] = derive(import_path(log).runs).drop(columns=["source"])
        read[f"{kind} notes"] = [str(w.message) for w in caught]
    pd.testing.assert_frame_equal(read["once"], read["twice"])
    assert any("line(s) the same as the line just before them" in w for w in read["twice notes"])


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.sampled_from([2**63, -2**63 - 1, 10**400]),
                   st.text(max_size=3),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -0.0, 0.0, 1e-300]))


@settings(max_examples=150, deadline=None, derandomize=True,  # the same examples in every run: CI never fails by chance
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(1, 8), st.integers(0, len(rankfile.LINE_COLUMNS) - 1), VALUES),
                       max_size=6))
def test_fuzzed_step_lines_are_read_or_skipped_never_used_out_of_bounds(tmp_path_factory, damage):
    """Step lines with any value of any JSON type put in any column: the file is read (never a traceback), every
    step kept has its values within their columns' bounds and a step time, and every line left out is named."""
    lines = [json.loads(step(i)) for i in range(10)]
    for at, column, value in damage:
        lines[at][column] = value
    path = tmp_path_factory.mktemp("fuzz") / "steps-rank0.jsonl"
    path.write_bytes(rankfile.header_line(0, "a", None, "a")
                     + b"".join((json.dumps(line) + "\n").encode() for line in lines))
    read = rankfile.read_rank_file(path)
    kept = read.columns
    assert len(kept["step"]) + len(read.bad_lines) == 10
    assert np.isfinite(kept["step_s"]).all() and (kept["step_s"] > 0).all()
    for column in rankfile.BOUNDED:
        assert not out_of_bounds(column, kept[column.name]).any(), column.name
    assert {b.line for b in read.bad_lines} == set(range(2, 12)) - set(read.lines.tolist())


def test_a_whole_number_past_64_bits_in_a_step_line_is_a_bad_line(tmp_path):
    """The fuzz test's find: JSON's integers have no bound, numpy's int64 stops at 2**63 - 1 (an OverflowError
    stopped the read); a float column's integer past a double (10**400) cannot be a number either."""
    lines = [json.loads(step(i)) for i in range(3)]
    lines[1][0] = 2**63  # the step counter
    lines[2][rankfile.LINE_COLUMNS.index("step_s")] = 10**400
    path = tmp_path / "steps-rank0.jsonl"
    path.write_bytes(rankfile.header_line(0, "a", None, "a")
                     + b"".join((json.dumps(line) + "\n").encode() for line in lines))
    read = rankfile.read_rank_file(path)
    assert read.lines.tolist() == [2] and [b.line for b in read.bad_lines] == [3, 4]
    assert "9223372036854775808" in read.bad_lines[0].reason


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(), st.text(max_size=4)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=6)
KEYS = st.sampled_from(["environment.world_size", "environment.nodes", "environment.device", "environment.ranks",
                        "environment.host", "environment.host.cores", "environment.host.load_average",
                        "environment.host.threads_per_process", "environment.cpu_peak", "environment.cpu_peak.tflops",
                        "environment.device_memory_gb", "config.tensor_parallel", "config.gpus", "warmup_steps",
                        "warmup_rule", "environment"])


@settings(max_examples=150, deadline=None, derandomize=True,  # the same examples in every run: CI never fails by chance
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(KEYS, JSON), max_size=4))
def test_fuzzed_manifests_are_read_or_refused_naming_the_file(tmp_path_factory, changes):
    """A manifest with any JSON value at the keys a reader uses: opened (and its values used as the runs row uses
    them), or a DataError naming the manifest; never another exception."""
    folder = tmp_path_factory.mktemp("fuzz") / "r"
    manifest = {"config": {"model": "m"}, "warmup_steps": 1,
                "environment": {"world_size": 1, "device": "cpu", "host": {"cores": 4}, "ranks": [{"rank": 0}]}}
    for key, value in changes:
        *parents, last = key.split(".")
        holder = manifest
        for name in parents:
            holder = holder[name] if isinstance(holder.get(name), dict) else holder.setdefault(name, {})
            if not isinstance(holder, dict):
                break
        else:
            holder[last] = value
    write_run(folder, {0: [step(i) for i in range(3)]})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    try:
        opened = open_run_folder(folder)
    except DataError as exc:
        assert str(exc).startswith(str(folder / "manifest.json"))
        return
    assert opened.world_size is None or 1 <= opened.world_size <= MOST_RANKS
    model_parallel(opened.config), oversubscribed(opened.environment)


def test_an_events_file_renamed_to_another_rank_is_refused_naming_it(tmp_path):
    """Rank 0's evaluation in a file named for rank 1 would be read as rank 1's: the header names its rank."""
    folder = write_run(tmp_path / "r", {r: [step(i) for i in range(4)] for r in range(2)})
    (folder / "events-rank1.jsonl").write_bytes(eventfile.header_line(0) + eventfile.phase_line("validation", 2.0, 0.5))
    with pytest.raises(DataError, match=r"events-rank1.jsonl, line 1: written by rank 0, not by rank 1 as the "
                                        r"file's name says"):
        load_runs(folder)
