"""A rank's wait, in its next all-reduce, for another rank's evaluation outside the steps is booked as that
wait (``wait_outside_s``), not as communication: in the runs row, the summary, the phase breakdown, compare and
"What to change". Synthetic two-rank run folders whose figures are computed by hand in each test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from trainperf import load_runs
from trainperf.compare import compare, read_side
from trainperf.report import page, phases, throughput, what_to_change
from trainperf.runfolder import eventfile, rankfile

STEP = {"step_s": 0.050, "forward_s": 0.010, "backward_s": 0.030, "optimizer_s": 0.005, "comm_exposed_s": 0.005,
        "comm_s": 0.020}
"""An ordinary step (s): forward + backward + optimizer + exposed communication = 0.050 s; all of its
communication (0.020 s) overlaps the backward pass but for the exposed 0.005 s."""


def _run(folder: Path, evaluations: dict[int, float], steps: int = 8, wall: bool = False) -> Path:
    """Two DDP ranks of ``steps`` steps (the first warm-up, fixed rule); rank R in ``evaluations`` validates
    for that many seconds between its steps 3 and 4. The other rank's step 4 then waits in its all-reduce
    for the difference: its step and its exposed and total communication are that much longer. With ``wall``,
    each rank's wall clock runs from its first step's start to its last one's end."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "config": {"experiment": "eval", "seq_len": 16, "global_batch_size": 16}, "warmup_steps": 1,
        "warmup_rule": "fixed", "environment": {"world_size": 2, "device": "cpu", "strategy": "ddp",
                                                "ranks": [{"rank": r, "node": "h"} for r in (0, 1)]}}))
    longest = max(evaluations.values())
    for rank in (0, 1):
        own = evaluations.get(rank, 0.0)
        lines, start = [rankfile.header_line(rank, "h", 0, "h")], 0.0
        for step in range(steps):
            values = dict.fromkeys(rankfile.LINE_COLUMNS)
            waited = longest - own if step == 4 else 0.0
            values.update(STEP, step=step, warmup=step == 0, start_s=start, samples=8, tokens=128, micro_steps=1,
                          out_of_memory=False, step_s=STEP["step_s"] + waited,
                          comm_exposed_s=STEP["comm_exposed_s"] + waited, comm_s=STEP["comm_s"] + waited)
            lines.append(rankfile.step_line([values[c] for c in rankfile.LINE_COLUMNS]))
            start += values["step_s"]
            if step == 3 and own:
                (folder / f"events-rank{rank}.jsonl").write_bytes(
                    eventfile.header_line(rank) + eventfile.phase_line("validation", start, own))
                start += own
        lines.append(rankfile.end_line(steps, {}, start if wall else None))
        (folder / f"steps-rank{rank}.jsonl").write_bytes(b"".join(lines))
    return folder


def test_the_wait_for_rank_0s_evaluation_is_not_communication(tmp_path):
    # rank 0 validates 0.040 s after step 3; rank 1's step 4 lasts 0.090 s, 0.045 s of it exposed communication.
    # Measured window: steps 1-7. Rank 1's exposed communication: 7 x 0.005 + 0.040 = 0.075 s, of which
    # min(0.045, 0.040) = 0.040 s waits for rank 0: 0.035 s is communication; its total communication
    # 7 x 0.020 + 0.040 = 0.180 s -> 0.140 s. Rank 0 waits for nobody: 0.035 s and 0.140 s.
    # Means over the ranks: comm_exposed_s 0.035, comm_s 0.140, wait_outside_s (0 + 0.040) / 2 = 0.020.
    # Each rank's window runs from step 1's start (0.05 s) to step 7's end (0.44 s): 0.39 s, so
    # comm_overhead = 0.035 / 0.39 = 0.0897 (it was (0.035 + 0.075) / 2 / 0.39 = 0.141 with the wait in it).
    run = _run(tmp_path / "runs" / "eval0", {0: 0.040})
    row = page.open_runs([str(run)]).iloc[0]
    assert row["comm_exposed_s"] == pytest.approx(0.035)
    assert row["comm_s"] == pytest.approx(0.140)
    assert row["wait_outside_s"] == pytest.approx(0.020)
    assert row["wait_outside_for"] == "rank 0's validation"
    assert row["mean_rank_elapsed_s"] == pytest.approx(0.39)
    assert row["comm_overhead"] == pytest.approx(0.035 / 0.39)


def test_the_wait_for_rank_0s_evaluation_is_no_productive_time_in_the_goodput(tmp_path):
    # rank 0: 8 steps of 0.050 s and its 0.040 s validation, wall 0.440 s; rank 1: 7 steps of 0.050 s and step 4 of
    # 0.090 s, 0.040 s of it waiting for rank 0, wall 0.440 s. Productive: 0.400 s on each rank (no warm-up excess:
    # step 0 is no slower than the window's mean), so goodput 0.800 / 0.880 = 0.909 (with rank 1's wait counted
    # productive, 0.840 / 0.880 = 0.955); means over ranks: validation 0.020 s, the wait 0.020 s, adding up to 0.440.
    row = load_runs(str(_run(tmp_path / "runs" / "eval0", {0: 0.040}, wall=True))).iloc[0]
    assert row["goodput"] == pytest.approx(0.800 / 0.880) and row["productive_s"] == pytest.approx(0.400)
    assert row["wait_outside_s"] == pytest.approx(0.020) and row["outside_validation_s"] == pytest.approx(0.020)
    table, parts = throughput.goodput(pd.DataFrame([row]))
    assert "wait_outside_s" in table and parts["seconds"].sum() == pytest.approx(row["wall_s"])


def test_ranks_that_both_evaluate_wait_only_for_the_difference(tmp_path):
    # rank 0 validates 0.040 s, rank 1 0.010 s: rank 1 waits 0.030 s in step 4, rank 0 none;
    # wait_outside_s = (0 + 0.030) / 2 = 0.015; exposed communication 7 x 0.005 = 0.035 s on both ranks
    run = _run(tmp_path / "runs" / "both", {0: 0.040, 1: 0.010})
    row = load_runs(str(run)).iloc[0]
    assert row["wait_outside_s"] == pytest.approx(0.015) and row["comm_exposed_s"] == pytest.approx(0.035)


def test_pages_and_what_to_change_name_the_wait_for_the_evaluation_not_communication(tmp_path):
    run = _run(tmp_path / "runs" / "eval0", {0: 0.040})
    runs = throughput.measured(page.open_runs([str(run)]))
    seconds, unit = phases.breakdown(runs)
    # per step (7 measured): 0.020 / 7 s of waiting for rank 0's validation, 0.035 / 7 s of exposed communication
    assert unit == "s per step"
    assert seconds["waiting for another rank's work outside the steps"].iloc[0] == pytest.approx(0.020 / 7)
    assert seconds["communication (exposed)"].iloc[0] == pytest.approx(0.035 / 7)
    # one evaluation in 7 steps: its share's interval may include 0, so it is a candidate, maybe not listed
    found, _ = what_to_change.candidates(throughput.RULES, throughput.analyse(runs, page.data_steps([str(run)], runs)))
    advice = found[found["change"].str.startswith("Spread the evaluation or checkpoint")]
    # 0.020 s of a 0.39 s window: 5.1 % of a step
    assert advice["expected_gain"].tolist() == pytest.approx([0.020 / 0.39])
    assert advice["evidence"].iloc[0].startswith("rank 0's validation: ")
    hide = found[found["change"].str.startswith("Hide more of the communication")]
    # exposed communication 0.035 / 0.39 = 9.0 % of the step, not the (0.035 + 0.075) / 2 / 0.39 = 14.1 % booked before
    assert hide["expected_gain"].tolist() == pytest.approx([0.035 / 0.39])


def test_compare_shows_the_wait_as_a_slice_of_the_step(tmp_path):
    quiet = _run(tmp_path / "a" / "quiet", {0: 0.0001})
    evaluating = _run(tmp_path / "b" / "evaluating", {0: 0.040})
    result = compare(read_side(str(quiet)), read_side(str(evaluating)))
    table = result.phases.set_index("phase")
    # per step of the typical rank: 0.0001 / 2 / 7 s against 0.040 / 2 / 7 = 0.00286 s
    assert table.loc["wait_outside", "candidate_s"] == pytest.approx(0.040 / 2 / 7, rel=1e-3)
    assert table.loc["wait_outside", "baseline_s"] == pytest.approx(0.0001 / 2 / 7, rel=1e-2)


def test_summarize_shows_the_wait_among_its_key_columns(tmp_path, capsys):
    from trainperf.cli import main
    run = _run(tmp_path / "runs" / "eval0", {0: 0.040})
    assert main(["summarize", str(run)]) == 0
    header, _, row = capsys.readouterr().out.splitlines()[:3]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["wait_outside_s"] == "0.02"
    assert pd.notna(cells["comm_overhead"])


def test_a_public_ddp_scripts_wait_for_rank_0s_snapshot_and_evaluation_is_booked_as_that_wait():
    """The minGPT DDP example of pytorch/examples, instrumented, on two ranks (tests/data/clients/mingpt_ddp,
    README there): rank 0 alone saves its snapshot (0.056883 s) and evaluates (0.199297 s) after the first
    epoch's last step, 33 (its events file). Rank 1 waits for that in its step 34, in DDP's broadcast of the
    model's buffers at the start of the forward: its forward stays that of any step, and its exposed
    communication, 0.310947 s as written, holds the wait, min(0.310947, 0.056883 + 0.199297) = 0.256180 s.
    The second epoch's snapshot and evaluation come after the last step: no rank waits for them. Mean over the
    two ranks: 0.128090 s."""
    folder = Path(__file__).parent / "data" / "clients" / "mingpt_ddp" / "scale-p2"
    row = load_runs(folder).iloc[0]
    assert row["wait_outside_s"] == pytest.approx((0.056883 + 0.199297) / 2, abs=1e-6)
    assert row["wait_outside_for"] == "rank 0's checkpoint, rank 0's validation"
    header, *lines = (folder / "steps-rank1.jsonl").read_text().splitlines()
    written = {line[0]: dict(zip(json.loads(header)["columns"], line))
               for line in map(json.loads, lines) if isinstance(line, list)}
    assert written[34]["forward_s"] < 0.1 < 0.256180 < written[34]["comm_exposed_s"]
    assert written[34]["forward_s"] < 2 * written[35]["forward_s"]


def test_a_gain_of_a_run_whose_window_holds_an_evaluation_lies_inside_its_own_interval():
    # the minGPT DDP sweep (tests/data/clients/mingpt_ddp_sweep): ddp2-bs8's window holds rank 0's evaluations, so
    # its exposed communication is 18.5 % of the window; the interval from its steps alone was 19.0 % to 21.9 %
    sweep = Path(__file__).resolve().parent / "data" / "clients" / "mingpt_ddp_sweep"
    runs = throughput.measured(page.open_runs([str(sweep)]))
    result = throughput.analyse(runs, page.data_steps([str(sweep)], runs))
    found, _ = what_to_change.candidates(throughput.RULES, result)
    bounded = 0
    for gain, evidence in zip(found["expected_gain"], found["evidence"]):
        if interval := re.search(r"95 % interval of the gain (-?[\d.]+) % to (-?[\d.]+) %", evidence):
            low, high = (float(x) / 100 for x in interval.groups())
            assert low - 0.0005 <= gain <= high + 0.0005, evidence
            bounded += 1
    assert bounded >= 2
