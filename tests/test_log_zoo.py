"""The zoo of real logs: public logs nobody here chose, read as they come.

Each group of ``tests/data/zoo`` (``readers``: stacks with a reader of their
own; ``generic``: stacks and loggers without one) has an ``expected.csv``
listing its logs with where each comes from (repository, path or issue,
commit) and its tokens/s (and MFU where the log allows one) computed by hand
from the log's own numbers; the README beside it shows each computation.
Every log must give its figures within its band, read by the reader the table
names, without a ``pattern``.
"""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path

import pytest

from trainperf import derive
from trainperf.errors import DataError, DataWarning
from trainperf.importers import import_path

ZOO = Path(__file__).resolve().parent / "data" / "zoo"
ROWS = [{**row, "group": table.parent.name}
        for table in sorted(ZOO.glob("*/expected.csv")) for row in csv.DictReader(table.open(encoding="utf-8"))]


def read(row: dict[str, str]):
    """The derived run of a zoo log: where a log holds several runs (a restart),
    the one with the most measured steps, the run its expected figures describe."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        result = import_path(ZOO / row["group"] / row["file"])
    runs = derive(result.runs)
    return result, runs.loc[runs["steps"].fillna(0).idxmax()] if "steps" in runs else runs.iloc[0]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['group']}/{r['file']}" for r in ROWS])
def test_a_zoo_log_gives_its_hand_computed_throughput(row):
    result, run = read(row)
    assert result.format == row["reader"]
    expected = float(row["tokens_per_s"])
    assert run["tokens_per_s"] == pytest.approx(expected, rel=float(row["tokens_band"] or 0.03))
    if row["mfu"]:
        assert run["mfu"] == pytest.approx(float(row["mfu"]), rel=float(row["mfu_band"] or 0.05))
        assert 0 < run["mfu"] <= 1


def test_the_zoo_is_as_wide_as_real_logs_are():
    stacks = {row["stack"] for row in ROWS}
    assert len(ROWS) >= 40 and len(stacks) >= 15
    by_reader: dict[str, set[tuple[str, str]]] = {}
    for row in ROWS:
        if row["group"] != "generic" and row["reader"] != "generic":
            by_reader.setdefault(row["reader"], set()).add((row["version"], row["source"]))
    # every stack's reader meets logs of several versions or users (three or more for each but Composer, whose public
    # logs with throughput lines are scarce: tests/data/zoo/readers/README.md)
    assert len(by_reader) >= 9 and all(len(sources) >= 2 for sources in by_reader.values()), by_reader
    assert sum(len(sources) >= 3 for sources in by_reader.values()) >= len(by_reader) - 1, by_reader


def test_the_generic_reader_reads_most_logs_of_stacks_without_a_reader():
    generic = [row for row in ROWS if row["group"] == "generic"]
    assert generic and sum(row["reader"] == "generic" for row in generic) >= math.ceil(0.8 * len(generic))


@pytest.mark.parametrize(("file", "refused"), [("megatron_deepspeed_bigscience_gpt2_2021.log", False),
                                               ("megatron_lm_bigscience_gpt2_2021.log", True)])
def test_a_count_since_the_start_that_goes_down_is_refused_not_counted(tmp_path, file, refused):
    """A damaged copy of a real Megatron log: one line's ``consumed samples`` printed a tenth of its value while
    its iteration goes on. The line is skipped with the reason, and no record takes the difference across it
    (which would count thousands of samples no step processed): the run keeps its hand-computed figure where
    the log still has a steady window, or is refused where it has none."""
    row = next(r for r in ROWS if r["file"] == file)
    lines = (ZOO / row["group"] / file).read_text(encoding="utf-8").splitlines(keepends=True)
    counted = [i for i, line in enumerate(lines) if "consumed samples:" in line]
    damaged = counted[len(counted) // 2]
    cut = lines[damaged].index("consumed samples:") + len("consumed samples:")
    tail = lines[damaged][cut:].lstrip()
    total = int(tail.split()[0])
    lines[damaged] = lines[damaged][:cut] + f" {total // 10}" + tail[len(str(total)):]
    (tmp_path / file).write_text("".join(lines), encoding="utf-8")
    copy = {**row, "group": "", "file": str(tmp_path / file)}
    if refused:  # 4 records: without the damaged one and the next, no steady window is left
        with pytest.raises(DataError, match="went down"):
            read(copy)
        return
    result, run = read(copy)
    assert [line for _, line, _ in result.skipped] == [damaged + 1]
    assert "went down" in result.skipped[0][2]
    assert run["tokens_per_s"] == pytest.approx(float(row["tokens_per_s"]), rel=float(row["tokens_band"] or 0.03))


def test_torchtitans_zero_tflops_and_mfu_for_a_model_it_counts_no_flops_of_are_no_reported_figures():
    # FLUX.1-schnell (README beside the log): "tflops: 0.00  mfu: 0.00%" on every line; with a 12e9 n_params a user
    # might give, 6N over Flux's own tokens is 112,841 TFLOP/s a device, 114 × an H100's dense peak: emptied as such
    path = ZOO / "readers" / "torchtitan_flux_16gpu_tflops_zero_2025_06.log"
    runs = import_path(path, {"n_params": 12e9, "platform": "H100 SXM", "precision": "bf16"}).runs
    assert runs.reindex(columns=["reported_tflops_per_gpu", "reported_mfu"]).isna().all(axis=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        run = derive(runs).iloc[0]
    assert math.isnan(run["tflops_per_gpu"]) and math.isnan(run["mfu"])
    assert "tflops_per_gpu, tflops_total: impossible, emptied: mfu above 1" in run["notes"]
