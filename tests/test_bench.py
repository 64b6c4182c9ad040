"""The bench workload: model, FLOPs, corpus, sweep plans, and a smoke sweep through torchrun."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trainperf import DataWarning, StepProfiler, compare, derive, estimates, load_runs, load_steps, load_summaries
from trainperf.bench import runner
from trainperf.bench.model import RandomWindows, corpus_bytes, train_val_split
from trainperf.bench.runner import RunFailed, launch
from trainperf.bench.model import GPT, MODEL_SIZES, counted_flops_per_token, model_config
from trainperf.bench.runner import describe
from trainperf.bench.spec import RunSpec
from trainperf.bench.sweeps import CPU_DEFAULTS, GPU_DEFAULTS, Machine, default_settings, plan, with_cpu_peaks
from trainperf.cli import main
from trainperf.flops import palm

CPU_2 = Machine(device="cpu", platform="cpu", devices=0, cores=2)


# -- model -------------------------------------------------------------------

def test_parameter_count_of_the_tiny_model_matches_a_hand_count() -> None:
    # 2 layers of width 64: Q,K,V,O 4·64², MLP 2·64·256, two layer norms 2·2·64
    per_layer = 4 * 64 * 64 + 2 * 64 * 256 + 2 * 2 * 64
    # 256-byte token embedding (shared with the LM head), 64 positions, final layer norm
    expected = 2 * per_layer + 256 * 64 + 64 * 64 + 2 * 64
    assert expected == 119_424
    model = GPT(model_config("tiny"))
    assert sum(p.numel() for p in model.parameters()) == expected
    assert model.config.n_params == expected


def test_large_model_is_about_100_million_parameters() -> None:
    with torch.device("meta"):
        model = GPT(model_config("large"))
    n = sum(p.numel() for p in model.parameters())
    assert n == model.config.n_params
    assert 80e6 < n < 110e6


def test_untrained_model_predicts_bytes_uniformly_and_learns_the_corpus() -> None:
    torch.manual_seed(0)
    config = model_config("tiny")
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = RandomWindows(train_val_split(corpus_bytes())[0], 16, config.seq_len, seed=1)
    losses = []
    for _ in range(40):
        inputs, targets = next(batches)
        loss = F.cross_entropy(model(inputs).view(-1, 256), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    # weights of std 0.02 give near-uniform logits: cross-entropy ln(256) = 5.545 nats
    assert losses[0] == pytest.approx(math.log(256), abs=0.05)
    # English text has far less than 8 bits per byte; 40 steps already learn byte frequencies
    assert sum(losses[-5:]) / 5 < 3.6


# -- FLOPs -------------------------------------------------------------------

@pytest.mark.parametrize("size", list(MODEL_SIZES))
def test_counted_flops_agree_with_palm_within_4_percent(size: str) -> None:
    """FlopCounterMode against PaLM's 6N + 12·L·d·T (trainperf.flops.palm).

    Counted, per token, forward: every layer's four d×d and two d×4d matmuls
    (24·d² FLOPs), the attention scores Q·Kᵀ and A·V over the full T×T
    matrix (4·T·d: the math backend computes the masked half too, and PaLM
    does not halve it either), the tied LM head (2·d·V); backward twice the
    forward. Softmax, layer norm, GELU, residual adds, the embedding lookup
    and the loss count nothing.

    PaLM's 6N also multiplies the parameters that take part in no matmul:
    the T·d position embedding and the (4L + 2)·d layer-norm weights and
    biases. That is the whole gap, 6·(T·d + (4L + 2)·d), which is largest
    relative to the model at the tiny size (3.5 %) and 0.45 % at large: the
    tolerance of 4 % covers every size.
    """
    config = model_config(size)
    L, d, T, V = config.n_layers, config.d_model, config.seq_len, config.vocab_size
    counted = counted_flops_per_token(config)
    assert counted == 3 * (L * (24 * d * d + 4 * T * d) + 2 * d * V)
    analytic = palm(config.n_params, L, d, T)
    assert analytic - counted == 6 * (T * d + (4 * L + 2) * d)
    assert abs(counted - analytic) / analytic < 0.04


# -- corpus ------------------------------------------------------------------

def test_corpus_is_the_python_documentation_as_bytes() -> None:
    data = corpus_bytes()
    assert data.dtype == torch.uint8
    assert len(data) > 400_000
    text = bytes(data.tolist()).decode("utf-8")
    assert 'The "assert" statement' in text
    train, val = train_val_split(data)
    assert len(train) + len(val) == len(data)
    assert len(val) == pytest.approx(0.1 * len(data), abs=1)
    assert torch.equal(torch.cat([train, val]), data)


def test_random_windows_are_corpus_text_with_targets_shifted_by_one() -> None:
    tokens = torch.frombuffer(bytearray(b"abcdefghijklmnopqrstuvwxyz"), dtype=torch.uint8)
    inputs, targets = next(RandomWindows(tokens, batch_size=3, seq_len=5, seed=0))
    assert inputs.shape == targets.shape == (3, 5)
    assert inputs.dtype == torch.int64
    for row_in, row_out in zip(inputs.tolist(), targets.tolist()):
        start = row_in[0] - ord("a")
        assert row_in == list(range(ord("a") + start, ord("a") + start + 5))
        assert row_out == [c + 1 for c in row_in]
    again = next(RandomWindows(tokens, batch_size=3, seq_len=5, seed=0))
    assert torch.equal(again[0], inputs)
    with pytest.raises(ValueError, match="cannot fill a window"):
        RandomWindows(tokens, batch_size=1, seq_len=26, seed=0)


# -- sweep plans ---------------------------------------------------------------

def _by_experiment(runs: list[RunSpec]) -> dict[str, list[RunSpec]]:
    out: dict[str, list[RunSpec]] = {}
    for run in runs:
        out.setdefault(run.extra["extra_sweep"], []).append(run)
    return out


def test_default_cpu_plan_has_the_three_sweeps_of_the_seeds() -> None:
    once = replace(default_settings(CPU_2), repeats=1)
    sweeps = _by_experiment(plan(once, CPU_2, ("batch-size", "scaling", "strategy"), "out").runs)
    batch = sweeps["batch-size"]
    assert [(r.micro_batch_size, r.grad_accum_steps) for r in batch] == [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1)]
    assert {r.global_batch_size for r in batch} == {16}
    assert {r.baseline_run_id for r in batch} == {"bench-cpu-small-fp32-batch-size-mb1x16"}
    weak = sweeps["weak-scaling"]
    assert [(r.nprocs, r.micro_batch_size, r.global_batch_size) for r in weak] == [(1, 8, 8), (2, 8, 16), (4, 8, 32)]
    strong = sweeps["strong-scaling"]
    assert [(r.nprocs, r.micro_batch_size, r.global_batch_size) for r in strong] == [(1, 16, 16), (2, 8, 16), (4, 4, 16)]
    strategy = sweeps["strategy"]
    assert [(r.strategy, r.nprocs, r.micro_batch_size) for r in strategy] == [("ddp", 2, 8), ("fsdp", 2, 8)]
    assert {r.baseline_run_id for r in strategy} == {"bench-cpu-small-fp32-strategy-ddp-p2"}
    every = [r for runs in sweeps.values() for r in runs]
    assert len({r.run_id for r in every}) == len(every) == 13
    # one thread per process on CPU: the 4-process runs time-share the 2 cores
    assert {(r.nprocs, r.threads_per_process, r.extra["oversubscribed"]) for r in every} == {
        (1, 1, False), (2, 1, False), (4, 1, True)}
    assert all(r.run_dir == Path("out") / r.experiment / r.run_id for r in every)


def test_default_plan_measures_every_configuration_twice_as_repeats() -> None:
    settings = default_settings(CPU_2)
    assert settings.repeats == 2
    runs = plan(settings, CPU_2, ("batch-size", "scaling", "strategy"), "out").runs
    assert len(runs) == 26 and len({r.run_id for r in runs}) == 26
    # a whole pass, then the next: the first 13 are repeat 1
    assert [r.extra["extra_repeat"] for r in runs] == [1] * 13 + [2] * 13
    for first, second in zip(runs[:13], runs[13:]):
        assert first.extra["extra_configuration"] == second.extra["extra_configuration"] == first.run_id[:-3]
        assert (first.run_id, second.run_id) == (f"{first.run_id[:-3]}-r1", f"{first.run_id[:-3]}-r2")
        assert replace(first, run_id="", extra={}) == replace(second, run_id="", extra={})  # same configuration
    # one baseline per experiment: the first repeat of the fewest processes (or of the named baseline)
    assert {r.baseline_run_id for r in runs if r.experiment.endswith("strong-scaling")} == {
        "bench-cpu-small-fp32-strong-scaling-p1-r1"}
    assert {r.baseline_run_id for r in runs if r.experiment.endswith("strategy")} == {
        "bench-cpu-small-fp32-strategy-ddp-p2-r1"}


def test_gpu_plan_skips_runs_needing_more_gpus_than_present() -> None:
    machine = Machine(device="cuda", platform="NVIDIA H100 80GB HBM3", devices=2, cores=16)
    result = plan(default_settings(machine), machine, ("scaling", "strategy"), "out")
    assert sorted(run_id for run_id, _ in result.skipped) == [
        "bench-nvidia-h100-80gb-hbm3-large-bf16-strong-scaling-p4",
        "bench-nvidia-h100-80gb-hbm3-large-bf16-weak-scaling-p4"]
    assert all("needs 4 GPUs, 2 present" == why for _, why in result.skipped)
    assert max(r.nprocs for r in result.runs) == 2
    assert {r.precision for r in result.runs} == {"bf16"}
    assert {r.nprocs for r in result.runs if r.extra["extra_sweep"] == "strategy"} == {2}


def test_plan_rejects_a_micro_batch_that_does_not_divide_the_global_batch() -> None:
    with pytest.raises(ValueError, match="micro-batch 3 does not divide the global batch 16"):
        plan(replace(CPU_DEFAULTS, micro_batches=(3,)), CPU_2, ("batch-size",), "out")


@pytest.mark.parametrize("threads, expected", [
    (1, {1: 0.05, 2: 0.05, 4: 0.025}),   # one core each; 4 processes get half a core each
    (None, {1: 0.09, 2: 0.05, 4: 0.025}),  # cores shared out: one process runs 2 threads
])
def test_cpu_peak_of_a_process_is_its_share_of_the_cores(threads: int | None, expected: dict[int, float]) -> None:
    runs = plan(replace(CPU_DEFAULTS, threads=threads), CPU_2, ("scaling",), "out").runs
    peaks = {1: 0.05, 2: 0.09}  # TFLOP/s measured with 1 and 2 threads
    shares = {r.nprocs: r.peak_tflops_per_gpu for r in with_cpu_peaks(runs, peaks, cores=2)
              if r.experiment.endswith("weak-scaling")}
    assert shares == pytest.approx(expected)


def test_sweep_says_plainly_when_processes_outnumber_cores() -> None:
    settings = default_settings(CPU_2)
    lines = describe(settings, CPU_2, plan(settings, CPU_2, ("scaling",), "out"))
    warning = [line for line in lines if line.startswith("WARNING")]
    assert len(warning) == 1
    assert "4 processes outnumber the 2 CPU cores" in warning[0]
    assert "oversubscription, not the hardware" in warning[0]
    assert not any(line.startswith("WARNING") for line in describe(
        settings, CPU_2, plan(settings, CPU_2, ("strategy",), "out")))


# -- command line ----------------------------------------------------------------

def test_bench_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--sweep", "--out", "--device", "--model", "--seq-len", "--precision", "--steps",
                   "--warmup-steps", "--global-batch", "--micro-batches", "--per-process-batch", "--processes",
                   "--strategy-processes", "--threads", "--learning-rate", "--seed", "--timeout", "--dry-run", "--no-progress"):
        assert option in text
    assert "oversubscription" in text


def test_registering_the_bench_command_does_not_import_torch() -> None:
    code = "import sys, trainperf.cli, trainperf.bench; trainperf.cli.build_parser(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_bench_rejects_an_impossible_plan_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--micro-batches", "3", "--dry-run"]) == 2
    assert "micro-batch 3 does not divide the global batch 16" in capsys.readouterr().err


# -- through torchrun ---------------------------------------------------------------

@pytest.mark.slow
def test_smoke_sweep_through_torchrun_writes_loadable_consistent_runs(tmp_path: Path) -> None:
    steps, warmup, seq_len = 3, 1, 64
    done = subprocess.run(
        [sys.executable, "-m", "trainperf", "bench", "--device", "cpu", "--model", "tiny", "--steps", str(steps),
         "--warmup-steps", str(warmup), "--global-batch", "4", "--micro-batches", "2", "--per-process-batch", "2",
         "--processes", "1,2", "--strategy-processes", "2", "--repeats", "1", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 runs written" in done.stdout
    folders = sorted(p.parent for p in tmp_path.glob("*/*/manifest.json"))
    assert len(folders) == 7
    for folder in folders:
        assert len(load_runs(folder)) == 1
    runs = derive(load_runs(tmp_path)).set_index("run_id")
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        config = manifest["config"]
        run = runs.loc[config["run_id"]]
        steps_table = load_steps(folder)
        nprocs = manifest["environment"]["world_size"]
        assert run["gpus"] == nprocs
        assert len(steps_table) == nprocs * (warmup + steps)
        measured = steps_table[~steps_table["warmup"]]
        assert (measured["micro_steps"] == config["grad_accum_steps"]).all()
        if nprocs > 1:  # DDP: the all-reduce hook, every step; FSDP: a sampled torch.profiler window's mean per
            # step, carried by every step at least that long (a shorter step, on a loaded machine, carries none)
            timed = measured[measured["comm_s"].notna()]
            assert len(timed) and (timed["comm_s"] > 0).all() and (timed["comm_exposed_s"] <= timed["comm_s"] + 1e-6).all()
            if manifest["environment"]["strategy"] == "ddp":
                assert len(timed) == len(measured)
            else:
                assert (timed["comm_s"] <= timed["step_s"]).all()
                for rank, mine in measured.groupby("rank"):
                    estimate = mine["comm_s"].max()  # one window: one estimate per rank
                    assert math.isnan(estimate) or (mine.loc[mine["comm_s"].isna(), "step_s"] < estimate).all(), mine
        # tokens of the measured window: steps × global batch × context, by hand
        assert run["tokens"] == steps * config["global_batch_size"] * seq_len
        assert measured["tokens"].sum() == run["tokens"]
        # the job's elapsed time is its slowest rank's
        elapsed = measured.groupby("rank")["step_s"].sum().max()
        assert run["elapsed_s"] == pytest.approx(elapsed, rel=1e-3)
        assert run["tokens_per_s"] > 0
        assert run["tokens_per_s"] == pytest.approx(run["tokens"] / elapsed, rel=1e-3)
        assert run["peak_tflops_per_gpu"] == pytest.approx(config["peak_tflops_per_gpu"])
        assert 0 < run["mfu"] < 1
        # tiny (L = 2, d = 64, T = 64, V = 256): 3 × (L·(24·d² + 4·T·d) + 2·d·V) = 3 × 262,144
        assert config["extra_counted_flops_per_token"] == 786_432


@pytest.mark.slow
def test_repeats_of_a_tiny_configuration_are_compared_as_repeats(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainperf", "bench", "--device", "cpu", "--model", "tiny", "--steps", "4",
         "--warmup-steps", "1", "--sweep", "batch-size", "--global-batch", "2", "--micro-batches", "2",
         "--repeats", "2", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = derive(load_runs(tmp_path))
    assert sorted(runs["run_id"]) == ["bench-cpu-tiny-fp32-batch-size-mb2x1-r1", "bench-cpu-tiny-fp32-batch-size-mb2x1-r2"]
    assert set(runs["extra_configuration"]) == {"bench-cpu-tiny-fp32-batch-size-mb2x1"}
    assert sorted(runs["extra_repeat"]) == [1, 2] and runs["experiment"].nunique() == 1
    side = compare.read_side(tmp_path)  # accepted as repeats of one configuration
    assert len(side.steps) == 2
    table = estimates.configuration_intervals(runs, load_summaries(tmp_path))
    assert len(table) == 1 and table["runs"].iloc[0] == 2 and table["low"].iloc[0] < table["high"].iloc[0]


@pytest.mark.slow
def test_a_failing_run_is_reported_with_its_output(tmp_path: Path) -> None:
    spec = RunSpec(experiment="e", run_id="broken", out_dir=str(tmp_path), model="huge", seq_len=8, device="cpu",
                   strategy="single", nprocs=1, micro_batch_size=1, grad_accum_steps=1, steps=1, warmup_steps=0,
                   precision="fp32", threads_per_process=1)
    with pytest.raises(RunFailed, match="run broken failed") as failure:
        launch(spec, timeout_s=120)
    assert "unknown model size 'huge'" in str(failure.value)


def test_a_configuration_that_runs_out_of_memory_does_not_fit_and_the_sweep_goes_on(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """The worker's profiler records the step that ran out of memory before the job fails; the runner
    reads it from the run folder and lists the configuration as not fitting, not as failed."""
    machine = Machine(device="cuda", platform="NVIDIA H100 80GB HBM3", devices=1, cores=2)
    settings = replace(GPU_DEFAULTS, model="tiny", seq_len=64, global_batch=4, micro_batches=(1, 4), repeats=1)
    sweep = plan(settings, machine, ("batch-size",), str(tmp_path))

    def launch_on_cpu(spec: RunSpec, on_step=None, timeout_s=None) -> None:
        with StepProfiler(spec.run_dir, config={"run_id": spec.run_id, "experiment": spec.experiment,
                                                "micro_batch_size": spec.micro_batch_size}, warmup_steps=0,
                          trace=False) as profiler:
            for _ in range(3):
                try:
                    with profiler.step(tokens=spec.micro_batch_size * 64, samples=spec.micro_batch_size):
                        if spec.micro_batch_size == 4:
                            torch.empty(1 << 60, dtype=torch.uint8)  # the CPU allocator's real error
                except RuntimeError as exc:
                    raise RunFailed(f"run {spec.run_id} failed (torchrun exit 1)\n{exc}") from exc

    monkeypatch.setattr(runner, "launch", launch_on_cpu)
    outcome = runner.run_sweeps(sweep, settings, machine, progress=False, echo=lambda line: None)
    assert [s.micro_batch_size for s in outcome.finished] == [1] and outcome.failed == []
    assert [(s.micro_batch_size, where) for s, where in outcome.too_big] == [(4, "rank 0 step 0")]
    with pytest.warns(DataWarning, match="stopped early"):  # its one rank stopped at the error
        runs = load_runs(tmp_path).set_index("micro_batch_size")
    assert runs.loc[1, "fits"] == True and runs.loc[4, "fits"] == False  # noqa: E712
