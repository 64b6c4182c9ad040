"""The batch-size page on seed 003 (data/reference/seed_003_batch_size.csv, transcribed from
/work/shared/seeds/003_aa5d9660626bce72.txt), on the CPU sweep and strategy runs committed in data/runs, and on
small tables written here: time to train the same work over the training loop and in all with start-up,
validation outside the training loop, phases that add up to the step, MFU, and what "indistinguishable" could
have detected."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from trainperf.report import batch_size, phases
from trainperf.report.page import InputError, data_steps, open_runs

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "data" / "reference" / "seed_003_batch_size.csv"
RUNS = ROOT / "data" / "runs"
SWEEP = RUNS / "bench-cpu-small-fp32-batch-size"
STRATEGY = RUNS / "bench-cpu-small-fp32-strategy"


def _write(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _seed() -> pd.DataFrame:
    return batch_size.sweeps(open_runs([str(SEED)]))


# --- time to train: the training loop and the total with start-up ---------------------------------------------

def test_seed_003_names_the_best_on_the_training_loop_and_in_all_with_the_reason():
    """Seed 003 prints, for 512 × 2 and 1,024 × 1: training 35.54 s and 33.33 s, total execution 86.43 s and
    102.82 s, train worker 73.23 s and 88.91 s, epoch 38.74 s and 36.43 s; ~15,250 and ~16,150 tokens/s. Its
    conclusion (Key Observations 7) is 512 × 2 on total time; the loop alone is shortest at 1,024 × 1."""
    runs = _seed()
    frame = batch_size.analyse(runs).table.set_index("configuration")
    # the same work for both: the most any configuration measured, 15,250 × 35.54 = 541,985 tokens (512 × 2's)
    work = 15250 * 35.54
    assert frame.loc["512 × 2", "time_to_train_s"] == pytest.approx(35.54)
    assert frame.loc["1,024 × 1", "time_to_train_s"] == pytest.approx(work / 16150)  # 33.56 s
    # in all: the loop plus the time outside it as measured (102.82 - 33.33 = 69.49 s; 86.43 - 35.54 = 50.89 s)
    assert frame.loc["512 × 2", "total_time_s"] == pytest.approx(86.43)
    assert frame.loc["1,024 × 1", "total_time_s"] == pytest.approx(work / 16150 + 69.49)  # 103.05 s
    notes = batch_size.analyse(runs).time_notes
    assert notes == [
        "seed003-batch-size: to train 541,985 tokens, the most any configuration measured, the training loop is "
        "shortest with micro-batch 1,024 × 1 accumulation (33.56 s); in all, start-up included, micro-batch 512 × 2 "
        "accumulation finishes first (86.43 s against 103.05 s): 1,024 × 1 spends 69.49 s outside its training "
        "loop against 50.89 s, more than its faster loop saves; the part that differs most: train worker outside "
        "the epoch, 52.48 s against 34.49 s."]  # 88.91 - 36.43 and 73.23 - 38.74
    text = batch_size.analyse(runs).headline.text
    assert "In all, start-up included, micro-batch 512 × 2 accumulation finishes the same work first" in text


def test_seed_003_total_time_is_made_of_its_timers():
    """Per configuration, the seed's nested timers: the script holds the train worker, which holds the epoch,
    which holds training and validation; the parts add up to the script's total."""
    totals = batch_size.analyse(_seed()).total_time.set_index("configuration")
    row = totals.loc["1,024 × 1"]
    assert row["training loop"] == pytest.approx(33.33) and row["validation"] == pytest.approx(1.78)
    assert row["epoch outside training and validation"] == pytest.approx(36.43 - 33.33 - 1.78)
    assert row["train worker outside the epoch"] == pytest.approx(88.91 - 36.43)
    assert row["script outside the train worker"] == pytest.approx(102.82 - 88.91)
    parts = totals.drop(columns=["experiment", "total_s"])
    assert parts.sum(axis=1).to_numpy() == pytest.approx(totals["total_s"].to_numpy())
    assert totals["total_s"].tolist() == [314.00, 184.91, 118.89, 95.20, 89.86, 86.43, 102.82]


def test_the_profilers_wall_clock_is_the_total_where_a_run_has_it(tmp_path):
    """Two configurations with the profiler's goodput columns: 1 × 2 runs its loop in 10 s of a 40 s wall
    clock (25 s start-up), 2 × 1 in 8 s of a 50 s one (36 s start-up): the loop is shorter at 2 × 1, the whole
    run at 1 × 2."""
    rows = [{"run_id": f"mb{m}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m, "grad_accum_steps": 2 // m,
             "tokens": 1000, "elapsed_s": loop, "wall_s": wall, "startup_s": startup, "after_steps_s": 1.0}
            for m, loop, wall, startup in ((1, 10.0, 40.0, 25.0), (2, 8.0, 50.0, 36.0))]
    runs = batch_size.sweeps(open_runs(_write(tmp_path, rows)))
    frame = batch_size.analyse(runs).table
    assert frame["time_to_train_s"].tolist() == pytest.approx([10.0, 8.0])
    assert frame["total_time_s"].tolist() == pytest.approx([40.0, 50.0])
    (note,) = batch_size.analyse(runs).time_notes
    assert "the training loop is shortest with micro-batch 2 × 1 accumulation (8.00 s)" in note
    assert "micro-batch 1 × 2 accumulation finishes first (40.00 s against 50.00 s)" in note
    assert note.endswith("the part that differs most: start-up, 36.00 s against 25.00 s.")
    totals = batch_size.analyse(runs).total_time.set_index("configuration")
    # 40 = 10 loop + 25 start-up + 1 after the last step + 4 other (warm-up steps, phases outside the steps)
    assert totals.loc["1 × 2", ["training loop", "start-up", "after the last step",
                                "other outside the training loop"]].tolist() == pytest.approx([10, 25, 1, 4])


def test_without_a_total_the_page_says_it_compares_the_training_loop_only():
    runs = batch_size.sweeps(open_runs([str(SWEEP)]))
    (note,) = batch_size.analyse(runs).time_notes
    assert note.endswith("No run recorded its total time with start-up (the profiler's wall clock, wall_s, or a "
                         "script's total): the configurations are compared on the training loop only.")
    assert batch_size.analyse(runs).table["total_time_s"].isna().all()
    assert batch_size.analyse(runs).total_time.empty


def test_time_to_train_is_the_same_work_for_every_configuration():
    """The committed CPU sweep measured 9 to 12 steps of 16 samples × 128 tokens a run (its warm-up found from
    its steps): 1 × 16's two runs did 18,432 tokens in 15.99 s and 24,576 tokens in 21.67 s, so their mean
    elapsed time (18.83 s) is not the time to train what the others trained. Every configuration is timed on
    the most any measured, 24,576 tokens = 12 steps × 16 samples × 128 tokens."""
    runs = batch_size.sweeps(open_runs([str(SWEEP)]))
    one = runs[runs["micro_batch_size"] == 1].sort_values("run_id")
    assert one["tokens"].tolist() == [18432, 24576]
    rate = (18432 / one["elapsed_s"].iloc[0] + 24576 / one["elapsed_s"].iloc[1]) / 2  # the mean of the repeats
    frame = batch_size.analyse(runs).table.set_index("configuration")
    assert frame.loc["1 × 16", "time_to_train_s"] == pytest.approx(24576 / rate)  # 21.50 s
    assert frame["time_to_train_s"].to_numpy() == pytest.approx(24576 / frame["tokens_per_s"].to_numpy())
    # asked for a number of tokens: that work over each rate
    asked = batch_size.analyse(runs, train_tokens=1e6).table
    assert asked["time_to_train_s"].to_numpy() == pytest.approx(1e6 / asked["tokens_per_s"].to_numpy())
    with pytest.raises(InputError, match="train_tokens must be a number of tokens above 0"):
        batch_size.analyse(runs, train_tokens=0)


def test_equal_data_per_optimizer_step_is_claimed_only_where_the_global_batch_is_equal(tmp_path):
    """Seed 003: batch × accumulation = 1,024 on each of 4 GPUs, 4,096 samples a step in every row. A sweep
    of micro-batch 16 and 32 with 1 accumulation step takes 16 and 32 samples a step: not the same training."""
    (seed,) = batch_size.work_notes(_seed())
    assert seed.startswith("seed003-batch-size: every configuration takes the same 4,096 samples per optimizer step")
    rows = [{"run_id": f"mb{m}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m, "grad_accum_steps": 1,
             "tokens": 1000 * m, "elapsed_s": 10.0} for m in (16, 32)]
    (note,) = batch_size.work_notes(batch_size.sweeps(open_runs(_write(tmp_path, rows))))
    assert note.startswith("sweep: the configurations take different numbers of samples per optimizer step "
                           "(16 to 32)") and "same data per optimizer step" not in note


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


# --- MFU and what "indistinguishable" could have detected ----------------------------------------------------

def test_mfu_per_configuration_is_the_mean_of_its_repeats_and_empty_where_unknown():
    runs = batch_size.sweeps(open_runs([str(SWEEP)]))
    frame = batch_size.analyse(runs).table.set_index("configuration")
    for (m, a), group in runs.groupby(["micro_batch_size", "grad_accum_steps"]):
        assert frame.loc[f"{m:.0f} × {a:.0f}", "mfu"] == pytest.approx(group["mfu"].mean())
    assert batch_size.analyse(_seed()).table["mfu"].isna().all()  # seed 003 names neither model nor platform


def test_indistinguishable_states_the_smallest_detectable_difference_and_the_repeats_for_5_percent(tmp_path):
    """Two configurations of three repeats each, 100, 110, 90 and 101, 111, 91 tokens/s: each mean's
    se of log ≈ sd / (√3 · mean) = 5.77 % and 5.72 %, Welch ν ≈ 4. A t test detects with 80 % power a shift of
    about t(0.975, 4) + t(0.8, 4) = 3.72 standard errors of the difference (8.13 %), about 35 %; one run's spread
    (≈ 10 % of its mean) needs 2 (z(0.975) + z(0.8))² (0.0995 / log 1.05)² ≈ 65.3 runs a side, a little more with
    the t test, to detect 5 %."""
    rows = [{"run_id": f"mb{m}-r{i}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m,
             "grad_accum_steps": 2 // m, "tokens": rate * 10, "elapsed_s": 10.0}
            for m, rates in ((1, (100, 110, 90)), (2, (101, 111, 91))) for i, rate in enumerate(rates)]
    runs = batch_size.sweeps(open_runs(_write(tmp_path, rows)))
    text = batch_size.analyse(runs).tops["sweep"]
    assert "are indistinguishable at the top" in text
    detectable = float(text.partition("could detect is ")[2].partition(" %")[0]) / 100
    se = math.hypot(10 / (math.sqrt(3) * 100), 10 / (math.sqrt(3) * 101))
    approx = math.expm1((scipy_stats.t.ppf(0.975, 4) + scipy_stats.t.ppf(0.8, 4)) * se)
    assert detectable == pytest.approx(approx, rel=0.02)
    repeats = int(text.partition("; ")[2].rpartition(" runs of each would detect 5 %")[0].split()[-1])
    assert 66 <= repeats <= 70


def test_the_committed_sweeps_ties_say_what_they_could_have_detected():
    """The committed CPU sweep, two runs per configuration with steps: the top sentence and the plateau note
    that call configurations indistinguishable give the smallest difference detectable and the runs for 5 %."""
    runs = batch_size.sweeps(open_runs([str(SWEEP)]))
    steps = data_steps([str(SWEEP)], runs)
    name = "bench-cpu-small-fp32-batch-size"
    text = batch_size.analyse(runs, steps).tops[name]
    assert "indistinguishable at the top" in text and "the smallest difference these data could detect is " in text
    assert "runs of each would detect 5 %" in text
    (note,) = batch_size.analyse(runs, steps, min_gain=0.10).plateau_notes
    assert "is indistinguishable from it" in note and "could detect is " in note


def test_without_an_interval_a_tie_says_no_difference_can_be_detected(tmp_path):
    rows = [{"run_id": f"mb{m}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m, "grad_accum_steps": 4 // m,
             "tokens": t, "elapsed_s": 1.0} for m, t in ((1, 1000), (2, 1500), (4, 1510))]
    text = batch_size.analyse(batch_size.sweeps(open_runs(_write(tmp_path, rows)))).tops["sweep"]
    # one row each: no interval; at the assumed 8 % run-to-run variation, repeats_to_detect(0.08, 0.05) runs
    assert text.endswith("without an interval (a configuration has one run without steps) these data detect no "
                         "difference; at the assumed run-to-run variation of 8 %, 44 runs of each would detect 5 %)")


# --- a public script's sweep: the figures it shows, and runs it must not headline --------------------------------

MINGPT = ROOT / "tests" / "data" / "clients" / "mingpt_ddp"
"""The minGPT DDP example of pytorch/examples on two ranks, micro-batches 8 and 32 (README there); measured on a
loaded machine, so every run is oversubscribed."""


def measured_window(folder: Path) -> float:
    """A run's elapsed time read from its steps files, not through trainperf: per rank, from the start of its
    first measured (not warm-up) step to the end of its last, in seconds; the slowest rank's."""
    windows = []
    for path in sorted(folder.glob("steps-rank*.jsonl")):
        header, *lines = path.read_text().splitlines()
        columns = json.loads(header)["columns"]
        steps = [dict(zip(columns, row)) for row in map(json.loads, lines) if isinstance(row, list)]
        measured = [step for step in steps if not step["warmup"]]
        windows.append(measured[-1]["start_s"] + measured[-1]["step_s"] - measured[0]["start_s"])
    return max(windows)


def _mingpt(oversubscribed: bool) -> batch_size.BatchSizePage:
    paths = [str(MINGPT / "batch-8"), str(MINGPT / "batch-32")]
    runs = batch_size.sweeps(open_runs(paths).assign(oversubscribed=oversubscribed))
    return batch_size.analyse(runs, data_steps(paths, runs))


def test_the_margin_the_sentence_gives_is_the_gain_the_table_shows():
    """Tokens by hand (README): 133,376 and 127,232, over each run's elapsed time read from its steps files
    (6.907577 s and 10.492767 s): micro-batch 32 is (127,232 / 6.907577) / (133,376 / 10.492767) − 1 = 44.9 %
    faster, in the table, the figure beside the headline and its sentence alike (its steps' own mean rates would
    say 49.7 %; the interval is around the rates shown). As if the machine had been quiet (oversubscribed
    cleared)."""
    found = _mingpt(oversubscribed=False)
    margin = (127_232 / measured_window(MINGPT / "batch-32")) / (133_376 / measured_window(MINGPT / "batch-8")) - 1
    assert found.table["gain"].iloc[1] == pytest.approx(margin, rel=1e-6)
    assert "44.9 % ahead of micro-batch 8 × 1 accumulation (95 % interval" in found.headline.text
    assert found.table["at_top"].tolist() == [False, True]


def test_a_sweep_of_oversubscribed_runs_is_shown_but_not_headlined():
    """Every run is oversubscribed: the headline names the highest figure as no measurement of the hardware and
    no configuration is highlighted as the fastest."""
    found = _mingpt(oversubscribed=True)
    assert found.headline.text.startswith("mingpt-batch: no configuration measures throughput without doubt")
    assert "the highest figure, 18,419 tokens/s with micro-batch 32 × 1 accumulation (oversubscribed)" \
        in found.headline.text
    assert not found.table["at_top"].any()
