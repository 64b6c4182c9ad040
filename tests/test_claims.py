"""Claims checked: the seeds' conclusions (data/reference/claims.csv) against trainperf's figures, a user's own
claims file, and claims files among the data."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

import trainperf
from trainperf import DataError
from trainperf.report import claims
from trainperf.report.build.pipeline import plan

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "data" / "reference"


@pytest.fixture(scope="module")
def reference_runs() -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trainperf.derive(trainperf.load_runs(REFERENCE, cache=False))


def verdicts(runs: pd.DataFrame, report: str) -> dict[str, tuple[str, str]]:
    table, _ = claims.checked(runs, claims.read_claims(REFERENCE / "claims.csv"), report)
    return {row.claim: (row.trainperf_figure, row.verdict) for row in table.itertuples()}


def test_the_seeds_claims_hold_or_not_as_the_seeds_own_figures_show(reference_runs):
    platforms = verdicts(reference_runs, "platforms")
    # seed 001 divided the H100's figure by its 2:4-sparse peak: 78,877 x 6 x 7.6e9 / 8 = 449.6 TFLOP/s per GPU,
    # 449.6 / 989.5 (dense) = 45.4 %, not 22.7 %; the MI300X's 38.3 % is against its dense 1,307.4
    assert platforms["Hardware utilization of H100 with Qwen 2.5 7B: 22.7 %"] == ("0.4544", "does not hold")
    assert platforms["Hardware utilization of MI300X with Qwen 2.5 7B: 38.3 %"] == ("0.3834", "holds")
    # seed 001's table: 87,933 / 78,877 tokens/s = 1.1148, printed 1.11x: within its last digit
    assert platforms["AMD MI300X is 1.11x faster than NVIDIA H100 at peak throughput"] == ("1.115", "holds")
    assert platforms["MI300X uses its hardware better than H100 (Qwen 2.5 7B: 38.3 % against 22.7 %)"][1] == \
        "does not hold"
    scaling = verdicts(reference_runs, "scaling")
    # seed 004 averaged its ranks' epoch times: the slowest rank gives 2233.50 / 1384.64 = 1.613x, not 2.04x
    assert scaling["For batch size 64, scaling from 1 to 2 GPUs gives nearly linear speedup (2.04x)"] == \
        ("1.613", "does not hold")
    assert scaling["For batch size 128, 4 GPUs give a 4.25x speedup"] == ("2.948", "does not hold")  # 2082.29/706.41
    # seed 002: 16,240 / (16 x 1,150) = 88.26 % against the printed 88.7 %; its cost table is a projection
    assert scaling["89 % scaling efficiency at 16 GPUs (target: >85 %)"] == ("0.8826", "holds")
    assert scaling["Optimal configuration: 16 GPUs for the best cost/performance ratio"][1] == "cannot be checked"
    assert scaling["Communication overhead 12.3 % at 16 GPUs (target: <15 %)"][1] == "cannot be checked"
    batch = verdicts(reference_runs, "batch_size")
    # seed 003: total execution 86.43 s at 512 x 2 (the lowest), but the training loop is shortest at 1024 x 1
    assert batch["Batch size 512 with 2 accumulation steps is the most efficient configuration (total execution "
                 "time)"] == ("seed003-bs512-acc2 (extra_total_exec_s 86.4)", "holds")
    assert batch["Batch size 512 with 2 accumulation steps is the most efficient configuration (training "
                 "time)"] == ("seed003-bs1024-acc1 (elapsed_s 33.3)", "does not hold")
    assert batch["Training time decreases from BS=16 (253.84 s) to BS=1024 (33.33 s), a ~7.6x improvement"] == \
        ("7.616", "holds")  # 253.84 / 33.33


def test_a_users_claims_file_and_claims_about_runs_not_shown(tmp_path):
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "experiment": ["e", "e", "e"],
                         "tokens_per_s": [1000.0, 1900.0, 2600.0], "measured": [True, True, True]})
    path = tmp_path / "mine.csv"
    pd.DataFrame([
        ("throughput", "b is twice a", "me", "ratio", "b", "a", "tokens_per_s", "2.0"),
        ("throughput", "b is nearly twice a", "me", "ratio", "b", "a", "tokens_per_s", "1.9"),
        ("throughput", "c is the fastest", "me", "highest", "c", "", "tokens_per_s", ""),
        ("throughput", "a beats c", "me", "greater", "a", "c", "tokens_per_s", ""),
        ("throughput", "z runs 5 tokens/s", "me", "value", "z", "", "tokens_per_s", "5"),
        ("scaling", "another page's", "me", "value", "a", "", "tokens_per_s", "1000"),
    ], columns=claims.COLUMNS).to_csv(path, index=False)
    table, left_out = claims.checked(runs, claims.read_claims(path), "throughput")
    # 1900 / 1000 = 1.9: 2.0 is 5 % off (beyond 2 % and the rounding of its last digit), 1.9 holds
    assert table["verdict"].tolist() == ["does not hold", "holds", "holds", "does not hold"]
    assert left_out == "1 claim about runs this page does not show is left out."
    assert claims.verdict_counts(table) == "4 claims checked — holds: 2, does not hold: 2."


@pytest.mark.parametrize("row, message", [
    ("throughput,x,me,bigger,a,,tokens_per_s,", "line 2, column 'kind': 'bigger' is not one of"),
    ("throughput,x,me,ratio,a,,tokens_per_s,2", "line 2, column 'reference_run_id': a ratio claim compares"),
    ("throughput,x,me,value,a,,tokens_per_s,many", "line 2, column 'printed': 'many' is not a number"),
])
def test_a_claim_that_cannot_be_checked_as_written_is_refused_where_it_is(tmp_path, row, message):
    path = tmp_path / "claims.csv"
    path.write_text(",".join(claims.COLUMNS) + "\n" + row + "\n")
    with pytest.raises(DataError, match=message):
        claims.read_claims(path)


def test_a_claims_file_in_a_data_folder_is_listed_not_read_as_runs(tmp_path):
    (tmp_path / "runs.csv").write_text("run_id,gpus,tokens,elapsed_s\nr1,1,1000,10\n")
    (tmp_path / "claims.csv").write_text((REFERENCE / "claims.csv").read_text())
    runs = trainperf.load_runs(tmp_path, cache=False)
    assert runs["run_id"].tolist() == ["r1"]
    assert [why for where, why in runs.attrs["skipped"] if where.endswith("claims.csv")] == [
        "a claims file (what a report concluded, not runs): give it to the reports as -p claims PATH"]
    with pytest.raises(DataError, match="claims.csv: a claims file"):
        trainperf.load_runs(tmp_path / "claims.csv")


def test_the_claims_parameter_takes_a_users_file_and_data_of_ones_own_drops_the_embedded_claims(tmp_path):
    (tmp_path / "runs.csv").write_text("run_id,gpus,tokens,elapsed_s\nr1,1,1000,10\n")
    given = plan(["throughput"], parameters=[("claims", str(tmp_path / "mine.csv"))], out_dir=tmp_path)
    assert given[0].parameters["claims"] == [str(tmp_path / "mine.csv")]
    own = plan(["throughput"], data=[tmp_path / "runs.csv"], out_dir=tmp_path)
    assert own[0].parameters["claims"] == []  # the seeds' claims are about the embedded data
