"""The trainperf command: summarize in every format, and one-line errors with exit code 2."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from trainperf.cli import main
from trainperf.table_rules import spreadsheet_safe

SEED_000 = Path(__file__).resolve().parents[1] / "data" / "reference" / "seed_000_throughput.csv"


def test_summarize_csv_has_every_derived_column(capsys):
    assert main(["summarize", str(SEED_000), "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert {"tokens_per_s_per_gpu", "scaling_efficiency", "mfu", "notes"} <= set(table.columns)
    assert round(table.loc[table["gpus"] == 4, "tokens_per_s"].item()) == 122_599  # seed 000's 4-GPU row


def test_summarize_json_and_markdown(capsys):
    assert main(["summarize", str(SEED_000), "--format", "json", "--experiment", "seed000-scaling"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["gpus"] for r in records] == [1, 4, 8, 16, 32]
    assert main(["summarize", str(SEED_000)]) == 0
    table, basis = capsys.readouterr().out.strip().split("\n\n")  # the table, then what its throughput is
    lines = table.splitlines()
    assert basis.startswith("tokens_per_s and samples_per_s: the work over elapsed_s")
    assert lines[0].startswith("| run_id | experiment |") and len(lines) == 2 + 5
    assert "| 700,970 |" in lines[-1]  # 32 GPUs: 1,081,344,000 tokens / 1542.64 s


def test_bad_input_is_one_line_on_stderr_with_exit_code_2(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("run_id,gpus,elapsed_s\na,1,-3\n")
    done = subprocess.run([sys.executable, "-m", "trainperf", "summarize", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == f"trainperf: error: {bad}, line 2, row 1, column 'elapsed_s': -3 must be greater than 0"


def test_unknown_experiment_lists_the_known_ones(capsys):
    assert main(["summarize", str(SEED_000), "--experiment", "nope"]) == 2
    assert "no runs in experiment 'nope'; experiments: seed000-scaling" in capsys.readouterr().err


def test_summarize_json_keeps_small_numbers(tmp_path, capsys):
    # a CPU run: 10 tokens/s * 6e3 FLOPs = 6e4 FLOP/s = 6e-8 TFLOP/s (pandas' to_json rounds it to 0.0000001)
    runs = tmp_path / "cpu.csv"
    runs.write_text("run_id,gpus,tokens_per_s,n_params,platform,precision,peak_tflops_per_gpu\n"
                    "a,1,10,1000,cpu,fp32,0.05\n")
    assert main(["summarize", str(runs), "--format", "json"]) == 0
    record, = json.loads(capsys.readouterr().out)
    assert record["tflops_per_gpu"] == pytest.approx(6e-8, rel=1e-12)
    assert record["mfu"] == pytest.approx(6e-8 / 0.05, rel=1e-12)
    assert record["platform"] == "cpu" and record["activation_checkpointing"] is None


def test_the_report_command_starts_its_kernel_server_before_pandas_is_loaded():
    """``trainperf report`` imports only its own command's module up to the server's start (pandas,
    scipy and the analysis load while the server imports too); the package's names still load on use."""
    code = ("import sys, trainperf.cli, trainperf.report.build.cli, trainperf.report.build.kernels; "
            "trainperf.cli.build_parser(['report']); print('pandas' in sys.modules); import trainperf; "
            "from trainperf.derived import derive; print(trainperf.derive is derive, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "True"]


def test_help_lists_every_command_and_a_command_alone_parses_its_own_options(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("summarize", "report", "bench", "compare", "import", "trace"))
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "--jobs N" in capsys.readouterr().out


def test_summarize_csv_escapes_cells_a_spreadsheet_would_run_and_keeps_negative_numbers(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,experiment,model,gpus,tokens_per_s,extra_offset_s\n"
                    '"=cmd|\' /C calc\'!A0",@SUM(1+1),+x,1,10,-1.5\n'
                    "-2+3,plain,m,2,20,2\n")
    assert main(["summarize", str(runs), "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"run_id": str})
    # OWASP: a text cell starting with = + - @ or a tab gets a ' in front; the numbers stay numbers
    assert table["run_id"].tolist() == ["'=cmd|' /C calc'!A0", "'-2+3"]
    assert table["experiment"].tolist() == ["'@SUM(1+1)", "plain"]
    assert table["model"].tolist() == ["'+x", "m"]
    assert table["extra_offset_s"].tolist() == [-1.5, 2.0] and table["tokens_per_s"].tolist() == [10, 20]


def test_a_leading_tab_or_carriage_return_is_escaped_too_and_column_names_are():
    # the runs readers strip cells, so these come only from a frame built in Python
    table = pd.DataFrame({"=name": ["\tx", "\ry", None], "n": [-1, 0, 1]})
    safe = spreadsheet_safe(table)
    assert safe.columns.tolist() == ["'=name", "n"] and safe["n"].tolist() == [-1, 0, 1]
    assert safe["'=name"].tolist()[:2] == ["'\tx", "'\ry"] and safe["'=name"].isna().tolist() == [False, False, True]
