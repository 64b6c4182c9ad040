"""A warm-up the user states (a sidecar's warmup_steps, StepProfiler(warmup_steps=...)) is a decision, used as
given; MSER finds the warm-up only where none is stated."""

from __future__ import annotations

import json

import pytest

from trainperf import DataWarning, load_runs
from trainperf.profiler import StepProfiler


def _nanogpt_log(path, times_ms):
    """A nanoGPT log (``iter N: loss L, time T ms, mfu M%``), one line per iteration."""
    path.write_text("".join(f"iter {i}: loss {10 - i * 0.01:.4f}, time {t:.2f}ms, mfu 40.00%\n"
                            for i, t in enumerate(times_ms)))
    return path


def test_a_sidecar_warmup_is_used_as_stated(tmp_path):
    # 30 iterations: 0-1 slow (compilation), 2-8 still warming (200 ms), then 100 ms. The user states 2 warm-up
    # iterations: measured are 2-29, 7 x 200 + 21 x 100 = 3,500 ms, 28 steps (MSER alone drops 2-8 as well)
    times = [5000.0, 3000.0] + [200.0] * 7 + [100.0] * 21
    stated = _nanogpt_log(tmp_path / "stated.log", times)
    (tmp_path / "stated.log.trainperf.yaml").write_text("gpus: 1\nwarmup_steps: 2\n")
    with pytest.warns(DataWarning, match="7 measured step time"):  # the 200 ms ones: kept, as the user decided
        row = load_runs(str(stated)).iloc[0]
    assert (row["warmup_steps"], row["warmup_rule"], row["steps"]) == (2, "fixed", 28)
    assert row["elapsed_s"] == pytest.approx(3.5)
    # without a stated warm-up MSER finds it: the 200 ms iterations are left out too, only 100 ms ones measured
    found = _nanogpt_log(tmp_path / "found.log", times)
    (tmp_path / "found.log.trainperf.yaml").write_text("gpus: 1\n")
    row = load_runs(str(found)).iloc[0]
    assert row["warmup_rule"] == "mser" and row["warmup_steps"] >= 9
    assert row["elapsed_s"] == pytest.approx(0.1 * row["steps"])


@pytest.mark.parametrize(("given", "rule"), [({"warmup_steps": 3}, "fixed"), ({}, "mser")])
def test_the_profiler_keeps_a_stated_warmup(tmp_path, given, rule):
    with StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, trace=False, **given) as prof:
        for _ in range(2):
            with prof.step():
                pass
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["warmup_rule"] == rule and manifest["warmup_steps"] == given.get("warmup_steps", 2)


def test_a_parameter_count_printed_rounded_is_marked_approximate(tmp_path):
    # nanoGPT prints "number of parameters: 0.12M": 120,000 give or take 5,000 (half of 0.01M), 4.2 % of it
    log = tmp_path / "small.log"
    log.write_text("number of parameters: 0.12M\n" + "".join(
        f"iter {i}: loss 3.0000, time 100.00ms, mfu 1.00%\n" for i in range(10)))
    (tmp_path / "small.log.trainperf.yaml").write_text("gpus: 1\nwarmup_steps: 1\nseq_len: 64\nmicro_batch_size: 4\n")
    from trainperf import derive
    row = derive(load_runs(str(log))).iloc[0]
    assert row["n_params"] == 120_000
    assert "approximate: n_params from the printed 0.12M, rounded: up to 4.2 % off, and the FLOPs with it" in row["notes"]
    # 123.69M is printed to 0.01M too, but 0.005 / 123.69 = 0.004 % off: not marked
    log.write_text(log.read_text().replace("0.12M", "123.69M"))
    row = derive(load_runs(str(log))).iloc[0]
    assert "approximate" not in str(row["notes"])
