"""TensorBoard event files: a run's log dir read by the tags its stack writes (torchtitan, Megatron-LM, NeMo) or
by the user's mapping, into step intervals measured by the one aggregator.

The events are written here with ``torch.utils.tensorboard.SummaryWriter``, the writer all three stacks use, under
each stack's own tag names (torchtitan: ``torchtitan/components/metrics.py``, pytorch/torchtitan; Megatron-LM:
``megatron/training/training.py`` ``training_log``, NVIDIA/Megatron-LM; NeMo: ``nemo/utils/exp_manager.py``
``TimingCallback``, ``nemo/lightning/pytorch/strategies/megatron_strategy.py``,
``nemo/lightning/pytorch/plugins/data_sampler.py``, NVIDIA/NeMo), with the figures of real published runs where
one gives them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from torch.utils.tensorboard import SummaryWriter

from trainperf import DataError, DataWarning, derive, load_runs
from trainperf.importers import compare_reported, import_path

ROOT = Path(__file__).resolve().parents[1]


def write_events(folder: Path, points: dict[int, dict[str, float]], new_style: bool = False) -> Path:
    """Events of ``{step: {tag: value}}`` in ``folder`` (a writer's log dir), as the stacks write them."""
    writer = SummaryWriter(str(folder))
    for step, values in points.items():
        for tag, value in values.items():
            writer.add_scalar(tag, value, step, new_style=new_style)
    writer.close()
    return folder


def sidecar(log_dir: Path, text: str) -> None:
    log_dir.with_name(log_dir.name + ".trainperf.yaml").write_text(text)


def one_run(path: Path, overrides: dict | None = None) -> dict:
    result = import_path(path, overrides)
    assert result.format == "tensorboard" and len(result.runs) == 1
    return derive(result.runs).iloc[0].to_dict()


# --- torchtitan ---------------------------------------------------------------------------------------------

def titan(step: int, end_to_end: float, tps: float, tflops: float, mfu: float, loss: float) -> dict[str, float]:
    """The scalars torchtitan's MetricsProcessor.log writes at a step (the ones read)."""
    return {"loss_metrics/global_avg_loss": loss, "grad_norm": 1.0, "throughput(tps)": tps, "tflops": tflops,
            "mfu(%)": mfu, "time_metrics/end_to_end(s)": end_to_end, "time_metrics/data_loading(s)": 0.01}


def test_torchtitan_real_run_reproduces_its_tokens_per_second_and_mfu(tmp_path):
    """pytorch/torchtitan PR #1884: Llama 3 8B on 4 GPUs (context parallel 2, so 2 data-parallel ranks of one
    8,192-token sequence), logging at steps 1 and 10. Its log prints step 1 at 10:37:01,391 and step 10 at
    10:37:07,957 with tps 5,615, tflops 325.20, mfu 32.88%: the 6.566 s cover steps 2..10, and torchtitan writes
    time_metrics/end_to_end(s) = 6.566 s / log_freq 10 = 0.6566 (step 1: 8,192 / (87 tps x 2) / 10)."""
    log_dir = write_events(tmp_path / "tb" / "20251015-1037", {
        1: titan(1, 8192 / (87 * 2) / 10, 87, 5.02, 0.51, 12.2465),
        10: titan(10, 0.6566, 5615, 325.20, 32.88, 10.2391)})
    sidecar(log_dir, "gpus: 4\ncontext_parallel: 2\nglobal_batch_size: 2\nseq_len: 8192\nplatform: NVIDIA H100 SXM\n"
                     "precision: bf16\nn_params: 8030261248\nn_layers: 32\nd_model: 4096\nvocab_size: 128256\n"
                     "flops_convention: torchtitan\n")
    run = one_run(log_dir)
    assert run["run_id"] == "20251015-1037" and run["extra_reported_flops_convention"] == "torchtitan"
    assert run["steps"] == 9 and run["elapsed_s"] == pytest.approx(6.566)  # step 1 is warm-up
    assert run["tokens_per_s"] == pytest.approx(9 * 2 * 8192 / 6.566)  # 22,457.5 tokens/s
    assert run["tokens_per_s_per_gpu"] == pytest.approx(5615, rel=2e-4) and run["train_loss"] == pytest.approx(10.2391)
    # torchtitan's FLOPs: 6 (N - V d) + 12 L d T = 57,914,449,920 a token; trainperf's dense H100 peak is 989.5
    flops = 6 * (8_030_261_248 - 128_256 * 4096) + 12 * 32 * 4096 * 8192
    assert run["flops_per_token"] == pytest.approx(flops)
    assert run["mfu"] == pytest.approx(flops * 9 * 2 * 8192 / 6.566 / 4 / 989.5e12)
    table = compare_reported(derive(import_path(log_dir).runs)).set_index("metric")
    assert table.loc["mfu", "recomputed"] == pytest.approx(flops * 9 * 2 * 8192 / 6.566 / 4 / 989.5e12)
    assert table.loc["tflops_per_gpu", "reported"] == pytest.approx(325.20)
    assert not table["flagged"].any()  # its 32.88 % against 989 TFLOP/s: 0.07 % from trainperf's 32.86 %


def test_torchtitan_rank_folders_time_the_job_by_its_slowest_rank(tmp_path):
    """save_for_all_ranks: one folder of events per rank. Rank 1 takes 0.6 s a step, rank 0 0.5 s; logging at
    steps 1, 10, 20, 30 (log_freq 10). Each rank's window is steps 2..30 (29 steps): rank 1's 3 x 0.6 x 10 s."""
    log_dir = tmp_path / "20250101-0000"
    for rank, seconds in ((0, 0.5), (1, 0.6)):
        write_events(log_dir / f"rank_{rank}", {s: titan(s, 3.0 if s == 1 else seconds, 1000, 100, 10, 5.0)
                                                for s in (1, 10, 20, 30)})
    run = one_run(log_dir, {"gpus": 2, "global_batch_size": 2, "seq_len": 1000})
    assert (run["ranks"], run["steps"]) == (2, 29)
    assert run["elapsed_s"] == pytest.approx(18.0) and run["mean_rank_elapsed_s"] == pytest.approx((15 + 18) / 2)
    assert run["tokens_per_s"] == pytest.approx(29 * 2 * 1000 / 18.0)
    steps = import_path(log_dir, {"gpus": 2}).steps
    assert sorted(steps["rank"].unique()) == [0, 1] and steps["n_steps"].tolist() == [1, 9, 10, 10] * 2


# --- Megatron-LM --------------------------------------------------------------------------------------------

def test_megatron_mid_run_excerpt_measures_from_its_second_point(tmp_path):
    """NVIDIA/Megatron-LM issue #756: Mixtral 8x7B on 16 H100, log_interval 1, iterations 43-45 (5,444.9, 5,533.8,
    5,718.6 ms; 239.8, 236.0, 228.4 TFLOP/s/GPU; global batch 128). Events that start at iteration 43 (a
    resumed job) do not say where 43's interval starts: it is left out, and 44 and 45 are measured (past the
    warm-up of a training that started at iteration 1)."""
    figures = {43: (5.4449, 239.8, 1.825991), 44: (5.5338, 236.0, 1.875063), 45: (5.7186, 228.4, 1.834162)}
    log_dir = write_events(tmp_path / "tensorboard", {
        step: {"learning-rate": 8.6e-6, "batch-size": 128, "lm loss": loss, "world-size": 16,
               "iteration-time": seconds, "throughput": tflops} for step, (seconds, tflops, loss) in figures.items()})
    run = one_run(log_dir)
    assert (run["steps"], run["gpus"], run["global_batch_size"]) == (2, 16, 128)
    assert run["elapsed_s"] == pytest.approx(5.5338 + 5.7186) and run["samples"] == 256
    assert run["samples_per_s"] == pytest.approx(256 / (5.5338 + 5.7186))
    # its own TFLOP/s over the window, each iteration weighted by its time
    assert run["reported_tflops_per_gpu"] == pytest.approx((236.0 * 5.5338 + 228.4 * 5.7186) / (5.5338 + 5.7186),
                                                           rel=1e-6)
    assert run["train_loss"] == pytest.approx(1.834162) and run["extra_reported_flops_convention"] == "megatron"


def test_megatron_restart_keeps_the_points_written_after_it(tmp_path):
    """A job stopped after iteration 50 and resumed from its checkpoint at 30 writes a second event file with
    iterations 40..60 (log_interval 10): the first file's 40 and 50 are replaced, and the resumed job's first
    point (40, its interval unknown) is left out. Measured: 20 and 30 of the first job (2.0 s an iteration), 50
    and 60 of the second (1.0 s)."""
    log_dir = tmp_path / "tensorboard"
    write_events(log_dir, {s: {"iteration-time": 2.0, "batch-size": 8} for s in (10, 20, 30, 40, 50)})
    write_events(log_dir, {s: {"iteration-time": 1.0, "batch-size": 8} for s in (40, 50, 60)})
    assert len(list(log_dir.iterdir())) == 2
    with pytest.warns(DataWarning, match="2 point"):
        run = one_run(log_dir)
    assert run["steps"] == 40 and run["elapsed_s"] == pytest.approx(2 * 10 * 2.0 + 2 * 10 * 1.0)
    assert run["samples"] == 40 * 8


# --- NeMo ---------------------------------------------------------------------------------------------------

def test_nemo_real_step_time_gives_the_recipe_throughput_from_its_first_logged_step(tmp_path):
    """NVIDIA/dgxc-benchmarking, the Nemotron-4 15B recipe: 3.130 s a step of 256 x 4,096 tokens on 64 H100, and
    its own 4096 x 256 / 3.13 = 335,008 tokens/s. Lightning logs every 10th step (global_step 9, 19, ..., 99,
    counted from 0): step 9 lies past the warm-up (step 0), so all ten sampled steps are measured."""
    log_dir = write_events(tmp_path / "lightning_logs" / "version_0", {
        step: {"reduced_train_loss": 0.0172, "lr": 1e-4, "global_step": step, "consumed_samples": 256 * (step + 1),
               "global_batch_size": 256, "train_step_timing in s": 3.130} for step in range(9, 100, 10)})
    sidecar(log_dir, (ROOT / "tests/data/importers/nemo_nemotron4_15b.log.trainperf.yaml").read_text())
    run = one_run(log_dir)
    assert run["steps"] == 10 and run["elapsed_s"] == pytest.approx(31.30) and run["samples"] == 2560
    assert run["tokens_per_s"] == pytest.approx(4096 * 256 / 3.13)
    assert run["mfu"] == pytest.approx(256 * 434.5e12 / 3.13 / 64 / 989e12, rel=2e-3)
    assert run["train_loss"] == pytest.approx(0.0172)


def test_nemo_step_zero_is_warm_up(tmp_path):
    log_dir = write_events(tmp_path / "version_0", {
        step: {"train_step_timing in s": 7.0 if step == 0 else 1.5, "global_batch_size": 8} for step in range(4)})
    run = one_run(log_dir, {"seq_len": 100})
    assert run["steps"] == 3 and run["elapsed_s"] == pytest.approx(4.5) and run["tokens_per_s"] == pytest.approx(
        3 * 8 * 100 / 4.5)


# --- any other stack ----------------------------------------------------------------------------------------

LOOP = {step: {"train/step_ms": 250.0 if step > 1 else 900.0, "train/tokens": 65536, "train/loss": 3.0 - step / 10}
        for step in range(1, 6)}
"""A training loop of one's own writing TF2-style scalar tensors: 65,536 tokens a step, 0.25 s after the first."""


def test_a_mapping_in_the_sidecar_reads_any_stack(tmp_path):
    log_dir = write_events(tmp_path / "runs" / "mine", LOOP, new_style=True)
    sidecar(log_dir, "gpus: 8\ntensorboard_tags: {step_time_ms: train/step_ms, tokens: train/tokens, "
                     "loss: train/loss}\n")
    run = one_run(log_dir)
    assert run["steps"] == 4 and run["elapsed_s"] == pytest.approx(1.0) and run["tokens"] == 4 * 65536
    assert run["tokens_per_s_per_gpu"] == pytest.approx(65536 / 0.25 / 8) and run["train_loss"] == pytest.approx(2.5)


def test_import_reads_a_log_dir_with_tags_given_on_the_command_line(tmp_path):
    log_dir = write_events(tmp_path / "mine", LOOP, new_style=True)
    out = tmp_path / "runs.csv"
    done = subprocess.run([sys.executable, "-m", "trainperf", "import", str(log_dir), "--out", str(out),
                           "--tags", "step_time_ms=train/step_ms", "--tags", "tokens=train/tokens"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "lib"), "PATH": ""})
    assert done.returncode == 0, done.stderr
    runs = pd.read_csv(out)
    assert runs["run_id"].tolist() == ["mine"] and runs["elapsed_s"].tolist() == pytest.approx([1.0])


def test_unknown_tags_are_refused_with_the_tags_found_and_how_to_map_them(tmp_path):
    log_dir = write_events(tmp_path / "tb", {s: {"train/loss": 2.0, "lr": 1e-3} for s in range(3)})
    with pytest.raises(DataError) as error:
        import_path(log_dir)
    text = str(error.value)
    assert "the scalar tags here: lr, train/loss" in text
    assert "tensorboard_tags" in text and "tb.trainperf.yaml" in text and "--tags step_time_s=" in text
    assert "iteration-time" in text and "--log-timers-to-tensorboard" in text
    # found in a folder it is listed as skipped, and the folder's other runs are read
    write_events(tmp_path / "tb2", {s: {"train_step_timing in s": 1.0} for s in range(3)})
    runs = load_runs(tmp_path, cache=False)
    assert runs["run_id"].tolist() == ["tb2"]
    assert any(path == str(log_dir) and "tensorboard_tags" in why for path, why in runs.attrs["skipped"])


@pytest.mark.parametrize("tags, message", [
    ({"step_s": "t"}, "unknown figure(s) step_s"),
    ({"loss": "train/loss"}, "needs a step time or a rate"),
    ({"step_time_s": "absent/tag"}, "'absent/tag' are not among"),
])
def test_a_mapping_that_cannot_measure_is_refused(tmp_path, tags, message):
    log_dir = write_events(tmp_path / "tb", {s: {"train/loss": 2.0} for s in range(3)})
    with pytest.raises(DataError, match="tensorboard_tags") as error:
        import_path(log_dir, {"tensorboard_tags": tags})
    assert message in str(error.value)


# --- files ---------------------------------------------------------------------------------------------------

def test_a_truncated_event_file_is_read_up_to_its_last_complete_record_with_a_warning(tmp_path):
    """A job killed while writing leaves a record cut short: the steps before it are read and the cut is shown."""
    log_dir = write_events(tmp_path / "version_0", {s: {"train_step_timing in s": 1.0 + s} for s in range(6)})
    (event_file,) = log_dir.iterdir()
    whole = event_file.read_bytes()
    event_file.write_bytes(whole[:-10])  # the last record (step 5's value) loses its end
    with pytest.warns(DataWarning, match="cut short or damaged"):
        result = import_path(event_file, {"gpus": 1})
    run = result.runs.iloc[0]
    assert run["run_id"] == "version_0" and run["steps"] == 4 and run["elapsed_s"] == pytest.approx(2 + 3 + 4 + 5)
    assert result.skipped_total == 1 and result.skipped[0][0] == str(event_file)
    assert any("cut short" in note for note in result.warnings)


def test_an_event_file_is_told_by_its_content_and_a_folder_of_runs_reads_each_log_dir(tmp_path):
    """torchtitan's layout: dump_folder/tb/<datetime>/rank_<N>/events... Each datetime folder is one run; a
    renamed event file is still read as one; a file named as one that is not is refused."""
    for name in ("20250101-0000", "20250102-0000"):
        for rank in (0, 1):
            write_events(tmp_path / "outputs" / "tb" / name / f"rank_{rank}",
                         {s: titan(s, 1.0, 1000, 100, 10, 5.0) for s in (1, 10, 20)})
    runs = load_runs(tmp_path / "outputs", cache=False)
    assert runs["run_id"].tolist() == ["20250101-0000", "20250102-0000"] and runs["ranks"].tolist() == [2, 2]
    assert not [why for _, why in runs.attrs["skipped"]]
    (first,) = (tmp_path / "outputs" / "tb" / "20250101-0000" / "rank_0").iterdir()
    renamed = tmp_path / "copy.bin"
    renamed.write_bytes(first.read_bytes())
    assert import_path(renamed).format == "tensorboard"
    fake = tmp_path / "events.out.tfevents.1.host"
    fake.write_text("not an event file\n")
    with pytest.raises(DataError, match="named as a TensorBoard event file"):
        import_path(fake)


def test_the_sidecar_of_a_log_dir_is_part_of_what_is_cached(tmp_path):
    log_dir = write_events(tmp_path / "version_0", {s: {"train_step_timing in s": 1.0} for s in range(4)})
    sidecar(log_dir, "gpus: 4\n")
    assert load_runs(log_dir)["gpus"].tolist() == [4]
    sidecar(log_dir, "gpus: 8\n")
    assert load_runs(log_dir)["gpus"].tolist() == [8]


def test_reading_events_imports_no_torch():
    code = ("import sys, trainperf.importers.event_files as e, trainperf.importers.tensorboard_log as t; "
            "e.read_scalars([]); e._decoder(); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "lib"), "PATH": ""})
    assert done.stdout.strip() == "False", done.stderr
