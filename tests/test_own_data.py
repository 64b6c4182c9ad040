"""A user's own data: a log no importer recognises, and the warnings a user sees."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import trainperf
from trainperf import DataError, DataWarning
from trainperf.importers import FORMATS, import_path

ROOT = Path(__file__).resolve().parents[1]

# a Keras-style epoch log: commas on every line, but not a table
PROSE_WITH_COMMAS = ("Epoch 1/3, loss: 2.31, took 12.0s\n"
                     "Epoch 2/3, loss: 2.05, took 11.8s\n"
                     "Epoch 3/3, loss: 1.93, took 11.9s\n")


def test_unrecognised_log_lists_every_format_and_is_not_called_a_csv_table(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(PROSE_WITH_COMMAS)
    with pytest.raises(DataError) as caught:
        trainperf.load_runs(log)
    message = str(caught.value)
    assert message.startswith(f"{log}: not a log trainperf can read")
    assert "runs tables (CSV, JSON, JSON lines or Parquet" in message and "profiler run folders" in message
    for fmt in FORMATS:
        assert f"{fmt.name} ({fmt.title})" in message
    assert "CSV table: map its columns" not in message


def test_a_table_without_a_mapping_is_pointed_at_the_sidecar(tmp_path):
    log = tmp_path / "timings.log"
    log.write_text("iteration,seconds,tokens\n1,0.52,8192\n2,0.50,8192\n")
    with pytest.raises(DataError, match=r"it parses as a CSV table: map its columns in timings\.log\.trainperf\.yaml"):
        import_path(log)


def test_data_warning_is_one_line_without_source():
    text = warnings.formatwarning(DataWarning("rank 1 stopped early"), DataWarning, "/x/steps.py", 265,
                                  "rows = [_aggregate_run(...)]")
    assert text == "DataWarning: rank 1 stopped early\n"
    other = warnings.formatwarning(UserWarning("u"), UserWarning, "/x/y.py", 3, "line")
    assert other.startswith("/x/y.py:3: UserWarning: u")


def test_data_warning_on_the_command_line_is_one_line(tmp_path):
    table = tmp_path / "runs.csv"
    table.write_text("run_id,platform,precision,gpus,tokens,elapsed_s,n_params\na,Mystery X9,bf16,1,1000,10,1e6\n")
    done = subprocess.run([sys.executable, "-m", "trainperf", "summarize", str(table)], capture_output=True,
                          text=True, cwd=tmp_path, check=True)
    assert done.stderr == ("DataWarning: platform 'Mystery X9' is not in the peak table: its runs get no MFU "
                           "(give peak_tflops_per_gpu to set the peak)\n")
