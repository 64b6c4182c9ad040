"""nanoGPT's own training loop, instrumented as the README says (tests/data/clients/nanogpt_ddp, README there):
its gradient accumulation through ``require_backward_grad_sync``, its evaluation and checkpoint on rank 0 alone.
Every expected figure is worked out from the model's configuration or read from the files the ranks wrote, not
through trainperf."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf import derive, load_runs

RUNS = Path(__file__).parent / "data" / "clients" / "nanogpt_ddp"
PARAMETERS = 50_304 * 64 + 64 * 64 + 2 * (12 * 64**2 + 2 * 64) + 64
"""nanoGPT's GPT of cfg_tiny.py: tied token embedding, position embedding, per layer two LayerNorm weights
(no biases), the attention's c_attn (3d²) and c_proj (d²), the MLP's c_fc and c_proj (4d² each); the last
LayerNorm: 3,322,176."""


def _steps(run: str) -> dict[int, list[dict]]:
    """Each rank's steps as written, by rank."""
    ranks = {}
    for path in sorted((RUNS / run).glob("steps-rank*.jsonl")):
        header, *lines = path.read_text().splitlines()
        columns = json.loads(header)["columns"]
        ranks[json.loads(header)["rank"]] = [dict(zip(columns, row)) for row in map(json.loads, lines)
                                             if isinstance(row, list)]
    return ranks


def _outside(run: str, after: float, before: float) -> float:
    """Seconds rank 0 spent in its phases outside the steps between ``after`` and ``before`` (its clock, s)."""
    events = [json.loads(line) for line in (RUNS / run / "events-rank0.jsonl").read_text().splitlines()[1:]]
    return sum(e["seconds"] for e in events if after <= e["start_s"] and e["start_s"] + e["seconds"] <= before)


@pytest.fixture(scope="module")
def runs():
    return derive(load_runs(RUNS)).set_index("run_id")


@pytest.mark.parametrize("run, ranks, micro_batch, micro_steps", [
    ("mb4-p2", 2, 4, 2), ("mb8-p2", 2, 8, 2), ("mb16-p2", 2, 16, 2), ("mb8-p1", 1, 8, 4)])
def test_tokens_batch_and_elapsed_time_are_those_the_loop_ran(runs, run, ranks, micro_batch, micro_steps):
    """39 measured steps (41 less 2 warm-up) of ``micro_steps`` micro-batches of ``micro_batch`` sequences of 64
    tokens on each rank; the elapsed time from each rank's first measured step to its last, the slowest rank's."""
    row = runs.loc[run]
    assert row["steps"] == 39
    assert row["tokens"] == ranks * 39 * micro_steps * micro_batch * 64
    assert row["samples"] == ranks * 39 * micro_steps * micro_batch
    assert (row["micro_batch_size"], row["grad_accum_steps"]) == (micro_batch, micro_steps)
    assert row["global_batch_size"] == ranks * micro_steps * micro_batch
    windows = []
    for steps in _steps(run).values():
        measured = [s for s in steps if not s["warmup"]]
        windows.append(measured[-1]["start_s"] + measured[-1]["step_s"] - measured[0]["start_s"])
    assert row["elapsed_s"] == pytest.approx(max(windows), abs=1e-6)
    assert row["tokens_per_s"] == pytest.approx(row["tokens"] / max(windows), rel=1e-9)


def test_the_model_is_counted_as_nanogpt_builds_it(runs):
    """``watch`` counts the tied embedding once: the parameters nanoGPT's configuration gives, and 6 of them a
    token (nanoGPT's own estimate_mfu adds 12 · L · T · d = 98,304 for attention and leaves out the position
    embedding: 20,006,784, 0.4 % more)."""
    assert (runs["n_params"] == PARAMETERS).all()
    assert (runs["flops_per_token"] == 6 * PARAMETERS).all()


@pytest.mark.parametrize("run", ["mb4-p2", "mb8-p2", "mb16-p2"])
def test_the_other_ranks_wait_for_rank_0s_evaluation_is_that_wait_not_communication(runs, run):
    """Rank 0 evaluates and saves before steps 20 and 40; rank 1 waits for it in those steps' all-reduce. Its
    wait: its exposed communication there, at most rank 0's time outside the steps just before (rank 1 spent
    none); the run's figure is the mean over the two ranks."""
    steps = _steps(run)
    waits = []
    for k in (20, 40):
        before, at = (next(s for s in steps[0] if s["step"] == n) for n in (k - 1, k))
        exposed_1 = next(s["comm_exposed_s"] for s in steps[1] if s["step"] == k)
        waits.append(min(exposed_1, _outside(run, before["start_s"] + before["step_s"], at["start_s"])))
    row = runs.loc[run]
    assert row["wait_outside_s"] == pytest.approx(sum(waits) / 2, abs=1e-6)
    assert row["wait_outside_for"] == "rank 0's checkpoint, rank 0's validation"
    assert sum(waits) > 0.1 * row["elapsed_s"]  # an evaluation that long would otherwise read as communication


def test_scaling_pairs_the_runs_that_train_alike(runs):
    """The same global batch of 32 on one and two devices is strong scaling; 32 samples per device per step
    (micro-batch 8 × 4 on one, 16 × 2 on each of two) weak scaling. The multiplier is the throughput ratio."""
    strong, weak, base = runs.loc["mb8-p2"], runs.loc["mb16-p2"], runs.loc["mb8-p1"]
    assert (strong["scaling_type"], weak["scaling_type"]) == ("strong", "weak")
    assert strong["baseline_run_id"] == weak["baseline_run_id"] == "mb8-p1"
    assert strong["scaling_multiplier"] == pytest.approx(strong["tokens_per_s"] / base["tokens_per_s"], rel=1e-9)
    assert weak["scaling_multiplier"] == pytest.approx(weak["tokens_per_s"] / base["tokens_per_s"], rel=1e-9)
