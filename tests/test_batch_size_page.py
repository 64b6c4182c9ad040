"""The batch-size page on seed 003 (data/reference/seed_003_batch_size.csv, transcribed from
/work/shared/seeds/003_aa5d9660626bce72.txt), on the CPU sweep and strategy runs committed in data/runs, and on
small tables written here: validation outside the training loop, phases that add up to the step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainperf.report import batch_size, phases
from trainperf.report.page import open_runs

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "data" / "reference" / "seed_003_batch_size.csv"
RUNS = ROOT / "data" / "runs"
STRATEGY = RUNS / "bench-cpu-small-fp32-strategy"


def _write(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _seed() -> pd.DataFrame:
    return batch_size.sweeps(open_runs([str(SEED)]))


# --- phases: validation outside the loop, communication inside forward and backward -------------------------

def test_validation_is_its_own_part_outside_the_training_loop_of_seed_003():
    """512 × 2: training 35.54 s holds forward 2.68, loss 7.38 and backward 12.13 s, so 13.35 s of the loop is
    in no phase; validation (1.91 s) is a timer beside the training loop, not inside it."""
    runs = _seed()
    seconds, unit = phases.breakdown(runs, per_step=False)
    row = seconds.loc[runs["micro_batch_size"].eq(512).to_numpy()].iloc[0]
    assert unit == "s in the measured window"
    assert row[phases.OTHER] == pytest.approx(35.54 - 2.68 - 7.38 - 12.13)
    assert row["validation"] == pytest.approx(1.91)
    assert row.drop("validation").sum() == pytest.approx(35.54)  # the loop's phases add up to the loop
    assert list(seconds.columns)[-1] == "validation"


def test_validation_timed_inside_the_steps_is_taken_out_of_the_loop(tmp_path):
    """A run measured from its steps (``ranks`` known) times validation inside its window: of 10 s, 2 s
    validation, 5 s forward and backward: 3 s of the loop in no phase, and the bar is the window's 10 s."""
    rows = [{"run_id": "a", "experiment": "x", "gpus": 1, "ranks": 1, "micro_batch_size": 1, "grad_accum_steps": 1,
             "tokens": 100, "elapsed_s": 10.0, "forward_s": 2.0, "backward_s": 3.0, "validation_s": 2.0}]
    seconds, _ = phases.breakdown(open_runs(_write(tmp_path, rows)), per_step=False)
    assert seconds.iloc[0].to_dict() == pytest.approx({"forward": 2.0, "backward": 3.0, phases.OTHER: 3.0,
                                                       "validation": 2.0})
    assert list(seconds.columns) == ["forward", "backward", phases.OTHER, "validation"]  # after the loop's parts
    assert phases.training_loop_s(open_runs(_write(tmp_path, rows))).tolist() == [8.0]


def test_fsdp_exposed_communication_sampled_inside_forward_and_backward_is_not_stacked_again():
    """The committed FSDP runs time their exposed communication with torch.profiler windows, inside forward
    and backward (extra_comm_measurement): stacked on top, the phases of fsdp-p2-r1 made 1.008 s of a
    0.910 s step. DDP's exposed all-reduce, taken out of backward by its hook, stays a slice of its own."""
    runs = open_runs([str(STRATEGY)])
    seconds, unit = phases.breakdown(runs)
    assert unit == "s per step"
    step = (runs["elapsed_s"] / runs["steps"]).to_numpy()
    fsdp = runs["strategy"].eq("fsdp").to_numpy()
    total = seconds.sum(axis=1).to_numpy()
    # the phases, the other time (shown from 0.5 % of the loop) and the wait add up to the job's step
    assert np.all(total <= step * (1 + 1e-9)) and np.all(total >= step * 0.995)
    assert (seconds.loc[fsdp, "communication (exposed)"] == 0).all()
    assert (seconds.loc[~fsdp, "communication (exposed)"] == (runs.loc[~fsdp, "comm_exposed_s"]
                                                              / runs.loc[~fsdp, "steps"])).all()
    (note,) = phases.overlap_notes(runs)
    assert note.startswith("bench-cpu-small-fp32-strategy-fsdp-p2-r1, bench-cpu-small-fp32-strategy-fsdp-p2-r2: "
                           "exposed communication was sampled by torch.profiler windows inside forward and backward")
