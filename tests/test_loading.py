"""load_runs: formats, folders, and a clear DataError for every kind of bad input."""

import json

import pandas as pd
import pytest

from trainperf import DataError, load_runs

GOOD = "run_id,gpus,tokens,elapsed_s\na,1,1000,10\nb,2,2000,11\n"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_json_jsonl_and_parquet_give_the_same_table(tmp_path):
    csv = load_runs(write(tmp_path, "runs.csv", GOOD))
    records = [{"run_id": "a", "gpus": 1, "tokens": 1000, "elapsed_s": 10},
               {"run_id": "b", "gpus": 2, "tokens": 2000, "elapsed_s": 11}]
    as_json = load_runs(write(tmp_path, "runs.json", json.dumps(records)))
    wrapped = load_runs(write(tmp_path, "wrapped.json", json.dumps({"runs": records})))
    lines = load_runs(write(tmp_path, "runs.jsonl", "\n".join(map(json.dumps, records))))
    pd.DataFrame(records).to_parquet(tmp_path / "runs.parquet")
    parquet = load_runs(tmp_path / "runs.parquet")
    for other in (as_json, wrapped, lines, parquet):
        pd.testing.assert_frame_equal(csv[["run_id", "gpus", "tokens", "elapsed_s"]],
                                      other[["run_id", "gpus", "tokens", "elapsed_s"]])
    assert csv["gpus"].tolist() == [1.0, 2.0]
    assert csv["experiment"].tolist() == ["runs", "runs"]  # default: the file's name
    assert csv.attrs["inputs"] == (str(tmp_path / "runs.csv"),)
    sliced = csv[csv["gpus"] > 1].reset_index(drop=True)  # pandas passes attrs on to every frame it makes
    assert sliced.attrs == csv.attrs and sliced.attrs["inputs"] is csv.attrs["inputs"]  # shared, not copied


def test_folder_reads_tables_and_reports_what_it_skips(tmp_path):
    write(tmp_path, "one.csv", GOOD)
    write(tmp_path, "two.csv", "run_id,gpus,tokens_per_s\nc,8,5e5\n")
    write(tmp_path, "README.md", "# notes")
    write(tmp_path, "ranks.csv", "run_id,rank,step,step_s\na,0,0,1.0\n")
    runs = load_runs(tmp_path)
    assert sorted(runs["run_id"]) == ["a", "b", "c"]
    reasons = dict(runs.attrs["skipped"])
    assert reasons[str(tmp_path / "README.md")] == "not a data file"
    assert "steps table" in reasons[str(tmp_path / "ranks.csv")]


@pytest.mark.parametrize("text, message, where", [
    ("run_id,tokens,elapsed_s\na,1000,10\n", "missing required column(s): gpus", "runs.csv"),
    ("run_id,gpus,tokens,elapsd_s\na,1,1000,10\n", "did you mean 'elapsed_s'", "column 'elapsd_s'"),
    ("run_id,gpus,tokens,elapsed_s,mfu\na,1,1000,10,0.4\n", "name it 'reported_mfu'", "column 'mfu'"),
    ("run_id,gpus,tokens,elapsed_s\na,1,1000,10\nb,two,1000,10\n", "'two' is not a number",
     "line 3, row 2, column 'gpus'"),
    ("run_id,gpus,tokens,elapsed_s\na,1,1000,0\n", "0 must be greater than 0", "row 1, column 'elapsed_s'"),
    ("run_id,gpus,tokens,elapsed_s\na,1,1000,-5\n", "-5 must be greater than 0", "column 'elapsed_s'"),
    ("run_id,gpus,tokens,elapsed_s\na,0,1000,5\n", "must be a count of at least 1", "column 'gpus'"),
    ("run_id,gpus,tokens,elapsed_s\na,1.5,1000,5\n", "must be a whole number", "column 'gpus'"),
    ("run_id,gpus,tokens,elapsed_s,data_s\na,1,1000,5,-1\n", "must not be negative", "column 'data_s'"),
    ("run_id,gpus,tokens,elapsed_s\n,1,1000,5\n", "run_id is empty", "row 1"),
    ("run_id,gpus,tokens\na,1,1000\n", "no measure of speed", "line 2, row 1"),
    ("run_id,gpus,tokens,elapsed_s,activation_checkpointing\na,1,1,1,maybe\n", "is not true or false", "row 1"),
    ("run_id,gpus,tokens,elapsed_s,flops_convention\na,1,1,1,kaplan\n", "is not one of 6n, palm, megatron",
     "column 'flops_convention'"),
    ("run_id,gpus,tokens,elapsed_s\n", "empty table", "runs.csv"),
    ("", "empty file", "runs.csv"),
])
def test_bad_input_names_file_row_and_column(tmp_path, text, message, where):
    path = write(tmp_path, "runs.csv", text)
    with pytest.raises(DataError) as error:
        load_runs(path)
    assert message in str(error.value)
    assert where in str(error.value)
    assert str(path) in str(error.value)


def test_duplicate_run_id_across_files_names_both(tmp_path):
    first = write(tmp_path, "first.csv", GOOD)
    second = write(tmp_path, "second.csv", "run_id,gpus,tokens_per_s\nb,4,100\n")
    with pytest.raises(DataError, match=r"run_id 'b' appears more than once \(in .*first.csv and .*second.csv\)"):
        load_runs(first, second)


def test_missing_path_and_bad_json(tmp_path):
    with pytest.raises(DataError, match="no such file or folder"):
        load_runs(tmp_path / "nowhere.csv")
    bad = write(tmp_path, "runs.jsonl", '{"run_id": "a", "gpus": 1, "elapsed_s": 1}\n{"run_id": \n')
    with pytest.raises(DataError, match=r"runs.jsonl, line 2: not JSON"):
        load_runs(bad)
    with pytest.raises(DataError, match="empty file"):
        load_runs(write(tmp_path, "empty.json", "  \n"))


def test_reported_and_extra_columns_are_kept(tmp_path):
    runs = load_runs(write(tmp_path, "r.csv", "run_id,gpus,tokens_per_s,reported_mfu,extra_config\n"
                                              "a,8,1000,0.383,01-output\n"))
    assert runs["reported_mfu"].iloc[0] == 0.383
    assert runs["extra_config"].iloc[0] == "01-output"


def test_folder_reads_logs_and_skips_text_that_is_no_log(tmp_path):
    write(tmp_path, "runs.csv", GOOD)
    write(tmp_path, "notes.txt", "nothing to see here\n")
    log = write(tmp_path, "train.log", "".join(
        f"iter {i}: loss {3.0 - i / 100:.4f}, time 120.00ms, mfu 30.00%\n" for i in range(1, 30)))
    write(tmp_path, "train.log.trainperf.yaml", "run_id: nano\ngpus: 1\nn_params: 1.2e8\nseq_len: 1024\n"
                                               "global_batch_size: 12\nplatform: A100\nprecision: bf16\n")
    runs = load_runs(tmp_path)
    assert sorted(runs["run_id"]) == ["a", "b", "nano"]
    reasons = dict(runs.attrs["skipped"])
    assert reasons[str(tmp_path / "notes.txt")].startswith("not a log trainperf can read")
    assert str(log) in runs.attrs["inputs"]
    with pytest.raises(DataError, match="notes.txt"):
        load_runs(tmp_path / "notes.txt")  # named explicitly: an error, not a skip


@pytest.mark.parametrize("text, where", [
    # one field too many: pandas would take the first column as an index and shift every value
    ("run_id,gpus,tokens,elapsed_s\na,1,1000,10,5\n", "line 2: 5 fields, but the header has 4"),
    ("run_id,gpus,tokens,elapsed_s\na,1,1000,10\nb,2,10\n", "line 3: 3 fields, but the header has 4"),
])
def test_a_csv_row_whose_fields_do_not_match_the_header_is_refused(tmp_path, text, where):
    path = write(tmp_path, "runs.csv", text)
    with pytest.raises(DataError, match=where):
        load_runs(path)


def test_csv_line_numbers_count_blank_lines_and_multi_line_cells(tmp_path):
    # line 1 header, 2 a, 3 blank, 4-5 a quoted cell over two lines, 6 the bad row
    path = write(tmp_path, "runs.csv", 'run_id,gpus,tokens,elapsed_s,extra_note\na,1,1000,10,x\n\n'
                                       'b,2,1000,10,"two\nlines"\nc,two,1000,10,y\n')
    with pytest.raises(DataError, match=r"line 6, row 3, column 'gpus': 'two' is not a number"):
        load_runs(path)


def test_a_column_named_twice_and_a_run_id_twice_in_one_file_are_refused(tmp_path):
    with pytest.raises(DataError, match="column 'gpus': column named more than once"):
        load_runs(write(tmp_path, "cols.csv", "run_id,gpus,gpus,elapsed_s\na,1,1,10\n"))
    with pytest.raises(DataError, match=r"line 4, row 3, column 'run_id': run_id 'a' appears more than once "
                                        r"\(first in row 1\)"):
        load_runs(write(tmp_path, "ids.csv", "run_id,gpus,elapsed_s\na,1,10\nb,1,10\na,2,10\n"))


def test_json_booleans_and_numbers_are_not_confused(tmp_path):
    # a JSON column of 1 / 0 with a null becomes 1.0 / NaN in pandas: still true / unknown
    records = [{"run_id": "a", "gpus": 1, "elapsed_s": 1, "activation_checkpointing": 1},
               {"run_id": "b", "gpus": 2, "elapsed_s": 1, "activation_checkpointing": None}]
    runs = load_runs(write(tmp_path, "ok.json", json.dumps(records)))
    flags = runs["activation_checkpointing"]
    assert str(flags.dtype) == "boolean" and flags.iloc[0] and flags.isna().iloc[1]
    # true is no device count
    with pytest.raises(DataError, match=r"row 1, column 'gpus': 'True' is not a number"):
        load_runs(write(tmp_path, "bad.json", json.dumps([{"run_id": "a", "gpus": True, "elapsed_s": 1}])))
