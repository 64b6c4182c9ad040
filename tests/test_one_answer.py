"""One answer per question: compare and summarize say which throughput they show and compare gives both; a
figure a log printed is set against trainperf's in the same units and against the same peak."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from trainperf.compare import STEPS_BASIS, compare, read_side
from trainperf.compare.format import render
from trainperf.importers.reported import OTHER_PEAK
from trainperf.report import page
from trainperf.runfolder import eventfile, rankfile
from trainperf.summarize_cli import RATE_BASIS, summarize, render as render_summary


def _one_rank(folder: Path, evaluation_s: float, steps: int = 8) -> Path:
    """One rank of ``steps`` steps of 0.050 s and 128 tokens (the first warm-up, fixed rule), with a validation
    of ``evaluation_s`` between steps 3 and 4 (none for 0)."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "config": {"experiment": "eval", "seq_len": 16}, "warmup_steps": 1, "warmup_rule": "fixed",
        "environment": {"world_size": 1, "device": "cpu", "strategy": "single", "ranks": [{"rank": 0, "node": "h"}]}}))
    lines, start = [rankfile.header_line(0, "h", 0, "h")], 0.0
    for step in range(steps):
        values = dict.fromkeys(rankfile.LINE_COLUMNS)
        values.update(step=step, warmup=step == 0, start_s=start, step_s=0.050, forward_s=0.015, backward_s=0.030,
                      optimizer_s=0.005, samples=8, tokens=128, micro_steps=1, out_of_memory=False)
        lines.append(rankfile.step_line([values[c] for c in rankfile.LINE_COLUMNS]))
        start += 0.050
        if step == 3 and evaluation_s:
            (folder / "events-rank0.jsonl").write_bytes(
                eventfile.header_line(0) + eventfile.phase_line("validation", start, evaluation_s))
            start += evaluation_s
    lines.append(rankfile.end_line(steps, {}))
    (folder / "steps-rank0.jsonl").write_bytes(b"".join(lines))
    return folder


def test_compare_gives_the_steps_and_the_elapsed_throughput_and_says_which_it_judges(tmp_path):
    # steps 1-7 measured, 128 tokens each: 896 tokens. The steps' own time is 0.050 s on both sides: a change of 0.
    # Elapsed (step 1's start to step 7's end): 0.35 s, and 0.39 s with the 0.040 s validation between steps 3 and
    # 4: 896 / 0.35 = 2,560 and 896 / 0.39 = 2,297.4 tokens/s, a change of 0.35 / 0.39 - 1 = -10.26 %.
    quiet = _one_rank(tmp_path / "a" / "quiet", 0.0)
    evaluating = _one_rank(tmp_path / "b" / "evaluating", 0.040)
    result = compare(read_side(str(quiet)), read_side(str(evaluating)))
    metrics = result.metrics.set_index("metric")
    assert metrics.loc["throughput", "change"] == pytest.approx(0.0, abs=1e-9)
    assert metrics.loc["elapsed_throughput", "change"] == pytest.approx(0.35 / 0.39 - 1)
    assert metrics.loc["elapsed_throughput", "candidate"] == pytest.approx(896 / 0.39)
    assert not metrics.loc["elapsed_throughput", "regressed"] and result.exit_code == 0  # shown, not judged
    assert STEPS_BASIS in result.notes
    shown = render(result, "text")
    # one run a side: inconclusive under the assumed run-to-run variation, but the figure is given, never gated
    assert "tokens/s over the elapsed time (summarize's tokens_per_s): inconclusive: candidate -10.3% vs baseline" in shown
    assert "no regression (exit 0)" not in shown  # the gate line appears only where more than throughput is judged
    # summarize shows the elapsed one and says so
    table = summarize(pd.concat([page.open_runs([str(quiet)]), page.open_runs([str(evaluating)])], ignore_index=True))
    assert table["tokens_per_s"].tolist() == pytest.approx([896 / 0.35, 896 / 0.39])
    assert render_summary(table, "markdown").endswith(RATE_BASIS)


def test_an_mfu_printed_against_another_devices_peak_is_compared_against_that_peak(tmp_path):
    # a CPU run measured at 0.2 TFLOP/s peak; 1,000 tokens/s x 6 x 1e7 FLOPs = 0.06 TFLOP/s: MFU 0.3.
    # The log printed MFU against the A100's 312 TFLOP/s (nanoGPT's estimate_mfu): 0.06 / 312 = 0.000192.
    # Against the same peak trainperf's is 0.3 x 0.2 / 312 = 0.000192: no difference (it was -99.9 %), and the
    # peaks (312 against 0.2, +155,900 %) are another device's: not comparable.
    path = tmp_path / "runs.csv"
    pd.DataFrame([{"run_id": "cpu", "experiment": "e", "gpus": 1, "tokens_per_s": 1000.0, "n_params": 1e7,
                   "flops_convention": "6n", "platform": "cpu", "precision": "fp32", "peak_tflops_per_gpu": 0.2,
                   "reported_mfu": 0.000192, "reported_peak_tflops_per_gpu": 312.0}]).to_csv(path, index=False)
    runs = page.open_runs(str(path))
    assert runs["mfu"].iloc[0] == pytest.approx(0.3)
    found = page.reported_differences(runs)
    assert found["figure"].tolist() == ["peak_tflops_per_gpu"]
    assert pd.isna(found["difference"].iloc[0]) and found["note"].iloc[0] == OTHER_PEAK
