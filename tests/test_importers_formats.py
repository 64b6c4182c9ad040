"""Formats added for the logs users have: llm.c, Hugging Face Trainer, DeepSpeed, MaxText, NeMo, Composer,
Lightning's CSVLogger. Each is read from a real public log (tests/data/importers/README.md gives its source and
what is known about its run) and the figures that tool printed are reproduced; synthetic variants cover the rest."""

import re
from pathlib import Path

import pytest

from trainperf import DataError, derive, load_runs
from trainperf.importers import compare_reported, import_path

DATA = Path(__file__).resolve().parent / "data" / "importers"


def one_run(path: Path, overrides: dict | None = None) -> dict:
    result = import_path(path, overrides)
    assert len(result.runs) == 1
    return derive(result.runs).iloc[0].to_dict()


def compared(path: Path, overrides: dict | None = None) -> dict:
    table = compare_reported(derive(import_path(path, overrides).runs))
    return {row.metric: row for row in table.itertuples(index=False)}


# --- llm.c -------------------------------------------------------------------------------------------------

def test_llmc_real_log_gives_the_throughput_and_mfu_it_printed():
    path = DATA / "llmc_gpt2_1558m.log"
    run = one_run(path)
    assert import_path(path).format == "llmc"
    assert (run["n_params"], run["micro_batch_size"], run["seq_len"], run["gpus"], run["grad_accum_steps"]) == \
        (1_557_686_400, 16, 1024, 8, 8)
    # step 1 is warm-up; steps 2..10 each process 1,048,576 tokens
    times = [2747.19, 2753.25, 2741.47, 2752.07, 2751.01, 2753.03, 2748.91, 2748.73, 2749.40]
    assert run["steps"] == 9 and run["elapsed_s"] == pytest.approx(sum(times) / 1000)
    assert run["tokens_per_s"] == pytest.approx(9 * 1_048_576 / (sum(times) / 1000))
    # the log printed "47.3% bf16 MFU" (llm.c's H100 peak is 988.8, trainperf's dense 989.5) and ~381.4k tok/s
    assert run["mfu"] == pytest.approx(0.473, abs=0.001)
    figures = compared(path)
    assert figures["mfu"].convention == "llmc" and not figures["mfu"].flagged
    assert not figures["tokens_per_s"].flagged


def test_llmc_older_lines_and_unknown_mfu(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("batch_size B=4 * seq_len T=64 * num_processes=1 and total_batch_size=256\n"
                   "| device                | NVIDIA A100-SXM4-80GB                              |\n"
                   "| peak TFlops           | 312.0                                              |\n"
                   + "".join(f"step {i}/5: train loss 4.{i} (acc 4.{i}) ({100 + i}.00 ms, 2500 tok/s)\n"
                             for i in range(1, 6))
                   + "step    6/9 | loss 3.9 (+nanz)| norm 1.0 (+nanz)| lr 1e-4 | 99.00 ms | -100.0% bf16 MFU | 2600 tok/s\n")
    run = one_run(log)
    assert run["platform"] == "NVIDIA A100-SXM4-80GB" and run["reported_peak_tflops_per_gpu"] == 312.0
    assert run["steps"] == 5 and run["elapsed_s"] == pytest.approx((102 + 103 + 104 + 105 + 99) / 1000)
    assert run["tokens_per_s"] == pytest.approx(5 * 256 / run["elapsed_s"])
    assert "reported_mfu" not in run or run["reported_mfu"] != run["reported_mfu"]  # -100 % means unknown


# --- Hugging Face Trainer ----------------------------------------------------------------------------------

def test_hf_trainer_real_log_reproduces_its_samples_per_second():
    path = DATA / "hf_trainer_gaudi_mrpc.log"
    run = one_run(path)
    assert import_path(path).format == "hf_trainer"
    # 3,668 MRPC pairs x 3 epochs in 159.0603 s; 345 steps of 32 (115 a epoch, the last batch short)
    assert run["elapsed_s"] == 159.0603 and run["samples"] == 3668 * 3 and run["steps"] == 345
    assert run["samples_per_s"] == pytest.approx(69.181, rel=1e-4)
    assert run["tokens_per_s"] == pytest.approx(3668 * 3 * 128 / 159.0603)
    assert "first steps" in run["extra_time_source"]
    assert not compared(path)["samples_per_s"].flagged


HF_LOG = """\
[INFO|trainer.py:2405] 2025-03-06 12:04:09,913 >> ***** Running training *****
[INFO|trainer.py:2406] 2025-03-06 12:04:09,913 >>   Num examples = 5,498
[INFO|trainer.py:2407] 2025-03-06 12:04:09,914 >>   Num Epochs = 1
[INFO|trainer.py:2408] 2025-03-06 12:04:09,914 >>   Instantaneous batch size per device = 8
[INFO|trainer.py:2411] 2025-03-06 12:04:09,914 >>   Total train batch size (w. parallel, distributed & accumulation) = 256
[INFO|trainer.py:2412] 2025-03-06 12:04:09,914 >>   Gradient Accumulation steps = 4
[INFO|trainer.py:2413] 2025-03-06 12:04:09,914 >>   Total optimization steps = 20
[INFO|trainer.py:2414] 2025-03-06 12:04:09,915 >>   Number of trainable parameters = 951,975,936
{'loss': '1.2', 'grad_norm': '0.5', 'learning_rate': '1e-05', 'num_input_tokens_seen': 5242880, 'train_runtime': 52.1, 'train_tokens_per_second': 100631.477, 'epoch': '0.5'}
  0%|          | 0/20 [00:00<?, ?it/s]\r 50%|#####     | 10/20 [00:52<00:50,  5.0s/it]
{'loss': '1.1', 'grad_norm': '0.4', 'learning_rate': '5e-06', 'num_input_tokens_seen': 10485760, 'train_runtime': 102.0, 'train_tokens_per_second': 102801.569, 'epoch': '1.0'}
{'train_runtime': 104.0, 'train_samples_per_second': 49.231, 'train_steps_per_second': 0.192, 'train_loss': 1.15, 'epoch': 1.0}
***** train metrics *****
  epoch                    =        1.0
  total_flos               =  1234567GF
  train_loss               =       1.15
  train_runtime            = 0:01:44.00
  train_samples_per_second =     49.231
  train_steps_per_second   =      0.192
"""


def test_hf_trainer_header_dicts_and_metrics_block_with_logger_prefixes(tmp_path):
    log = tmp_path / "sft.log"
    log.write_text(HF_LOG)
    run = one_run(log, {"seq_len": 2048})
    # 256 / (8 x 4) = 8 data-parallel processes; the trainable count (an FSDP shard here) is not the model size
    assert (run["micro_batch_size"], run["global_batch_size"], run["grad_accum_steps"], run["gpus"]) == (8, 256, 4, 8)
    assert run["extra_trainable_params"] == 951_975_936 and run["n_params"] != run["n_params"]
    assert run["elapsed_s"] == 104.0 and run["steps"] == 20 and run["samples"] == round(49.231 * 104.0)
    # tokens counted by the Trainer (gathered from every process) win over samples x seq_len
    assert run["tokens"] == 10_485_760 and run["tokens_per_s"] == pytest.approx(10_485_760 / 104.0)
    assert run["reported_tokens_per_s"] == pytest.approx(102801.569) and run["train_loss"] == pytest.approx(1.1)


def test_hf_trainer_final_tokens_per_second_is_per_device_and_two_headers_are_two_runs(tmp_path):
    log = tmp_path / "two.log"
    second = HF_LOG.replace("'train_runtime': 104.0,", "'train_runtime': 104.0, 'train_tokens_per_second': 12600.0,")
    log.write_text(HF_LOG + second)
    result = import_path(log, {"seq_len": 2048})
    assert len(result.runs) == 2
    assert result.runs["reported_tokens_per_s_per_gpu"].iloc[1] == 12600.0


def test_hf_trainer_loss_dicts_alone_are_refused_for_giving_no_time(tmp_path):
    # huggingface/transformers#9415 (2021-01, two V100s, each rank printing with srun's "0: "/"1: " prefix): the
    # Trainer's loss and eval dicts only, no train_runtime, no timestamp: nothing times a step
    log = tmp_path / "two_ranks.log"
    log.write_text(
        "0: {'loss': 10.5927734375, 'learning_rate': 0.0005999489187808615, 'epoch': 0.0011918951132300357}\n"
        "1: {'loss': 10.57164478302002, 'learning_rate': 0.0005999489187808615, 'epoch': 0.0011918951132300357}\n"
        "0: {'loss': 6.9972802049411325, 'learning_rate': 0.000574459390430785, 'epoch': 0.5959475566150179}\n"
        "1: {'loss': 7.002058581503216, 'learning_rate': 0.000574459390430785, 'epoch': 0.5959475566150179}\n"
        "0: {'eval_loss': 7.694924354553223, 'epoch': 1.0}\n"
        "1: {'eval_loss': 7.6843767166137695, 'epoch': 1.0}\n")
    with pytest.raises(DataError, match="no record gives a time: no step time, timestamp, runtime or throughput"):
        import_path(log)



def test_a_torchtitan_log_without_timestamps_is_measured_by_its_rate_or_says_what_it_lacks(tmp_path):
    """pytorch/torchtitan#1349 (tests/data/zoo/readers) with its timestamps cut: no record gives a time, so its
    printed per-device tps times the 8 devices of its mesh line is the throughput, the time-weighted (harmonic) mean
    of steps 2 and 3 (step 1: warm-up): 2 / (1/168,877 + 1/175,100) × 8 = 1,375,457 tokens/s. Without the mesh line
    the device count is unknown: refused, saying what to give."""
    log = DATA.parent / "zoo" / "readers" / "torchtitan_pr1349_autoparallel_dp8_2025_06.log"
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - root - INFO - ", "", log.read_text(encoding="utf-8"))
    cut = tmp_path / "no_timestamps.log"
    cut.write_text(text, encoding="utf-8")
    assert derive(import_path(cut).runs)["tokens_per_s"].iloc[0] == pytest.approx(1_375_457, rel=1e-5)
    cut.write_text("\n".join(line for line in text.splitlines() if "device mesh" not in line), encoding="utf-8")
    with pytest.raises(DataError, match="its tokens rate is per device: give gpus"):
        import_path(cut)

# --- MaxText -----------------------------------------------------------------------------------------------

def test_maxtext_real_line_gives_its_tokens_per_second_per_device():
    path = DATA / "maxtext_mixtral_8x7b_v6e.log"
    run = one_run(path)
    assert import_path(path).format == "maxtext"
    # one line quoted from step 19 of a long run: measured whole; total_weights tokens in 8.982 s on 256 chips
    assert run["steps"] == 1 and run["tokens"] == 8_388_608
    assert run["tokens_per_s_per_gpu"] == pytest.approx(3648.273, rel=1e-4)
    assert not compared(path)["tokens_per_s_per_gpu"].flagged
    # Mixtral counted with the 12.9e9 parameters a token uses: PaLM FLOPs over the v6e's 918 TFLOP/s
    assert run["mfu"] == pytest.approx((6 * 12.9e9 + 12 * 32 * 4096 * 4096) * 3648.273 / 918e12, rel=1e-3)


def test_maxtext_of_2023_prints_its_tflops_per_device_as_tflop_s(tmp_path):
    # AI-Hypercomputer/maxtext#8 (2023-04-28, base.yml on a v3-8), three lines quoted from a long run: measured whole;
    # "TFLOP/s" is per device there (the maintainer's answer in the issue), the time-weighted mean is reported
    seconds, tflops = [2.167, 2.164, 2.166], [36.722, 36.771, 36.739]
    log = tmp_path / "maxtext_v3.log"
    log.write_text("".join(f"completed step: {15107 + i}, seconds: {s:.3f}, TFLOP/s: {t:.3f}, loss: 2.191\n"
                           for i, (s, t) in enumerate(zip(seconds, tflops))))
    result = import_path(log)
    run = result.runs.iloc[0]
    assert result.format == "maxtext" and run["steps"] == 3 and run["elapsed_s"] == pytest.approx(sum(seconds))
    assert run["reported_tflops_per_gpu"] == pytest.approx(sum(s * t for s, t in zip(seconds, tflops)) / sum(seconds))


def test_maxtext_steps_zero_and_one_are_warm_up_and_without_token_counts_the_rate_times_devices_is_used(tmp_path):
    # step 0 compiles; step 1 prints only its asynchronous dispatch (tests/data/zoo/readers: maxtext#4847)
    log = tmp_path / "maxtext.log"
    log.write_text("".join(f"I0804 08:14:{s:02d}.000 1 metric_logger.py:196] completed step: {s}, seconds: "
                           f"{30.0 if s == 0 else 0.05 if s == 1 else 0.5}, TFLOP/s/device: 200.0, "
                           f"Tokens/s/device: 25000.0, loss: {9.0 - s}\n" for s in range(5))
                   + "eval metrics after step: 4, loss=8.5, x=1\n")
    run = one_run(log, {"gpus": 16})
    assert run["steps"] == 3 and run["elapsed_s"] == pytest.approx(1.5) and run["val_loss"] == 8.5
    assert run["tokens_per_s"] == pytest.approx(25000.0 * 16) and "reported throughput" in run["extra_time_source"]


# --- NeMo --------------------------------------------------------------------------------------------------

def test_nemo_real_progress_bar_line_reproduces_the_recipe_throughput_and_mfu():
    path = DATA / "nemo_nemotron4_15b.log"
    run = one_run(path)
    assert import_path(path).format == "nemo"
    # the recipe: 4096 * 256 / 3.13 = 335,008 tokens/s; MFU = 256 * 434.5e12 / 3.13 / 64 / 989e12
    assert run["tokens_per_s"] == pytest.approx(4096 * 256 / 3.13)
    assert run["flops_per_token"] * 4096 == pytest.approx(434.5e12, rel=1e-3)
    assert run["mfu"] == pytest.approx(256 * 434.5e12 / 3.13 / 64 / 989e12, rel=2e-3)


def test_nemo2_lines_take_samples_from_consumed_samples_and_leave_step_zero_out(tmp_path):
    log = tmp_path / "nemo2.log"
    log.write_text("".join(f"Training epoch 0, iteration {s}/249 | lr: 1e-06 | global_batch_size: 8 | "
                           f"global_step: {s} | reduced_train_loss: 1.{s} | train_step_timing in s: "
                           f"{7.0 if s == 0 else 1.5}" + (f" | consumed_samples: {8 * (s + 1)}" if s else "") + "\n"
                           for s in range(5)))
    run = one_run(log, {"seq_len": 2048, "gpus": 8})
    assert run["steps"] == 4 and run["elapsed_s"] == pytest.approx(6.0) and run["samples"] == 32
    assert run["tokens_per_s"] == pytest.approx(32 * 2048 / 6.0) and run["global_batch_size"] == 8


# --- DeepSpeed ---------------------------------------------------------------------------------------------

def test_deepspeed_real_log_times_steps_by_its_timestamps_and_agrees_with_its_samples_per_second():
    path = DATA / "deepspeed_chat_opt350m_reward.log"
    run = one_run(path)
    assert import_path(path).format == "deepspeed"
    # the line at step 10 is warm-up; steps 11..470 between 01:55:23.714 and 02:14:31.380, 64 samples a step
    assert run["steps"] == 460 and run["elapsed_s"] == pytest.approx(1147.666)
    assert run["global_batch_size"] == 16 * 4 * 1 and run["samples"] == 460 * 64
    assert run["peak_memory_gb"] == 38.49
    # its own CurrSamplesPerSec leaves data loading out: within a percent of the wall-clock rate here
    assert abs(compared(path)["samples_per_s"].relative_difference) < 0.01


DS_LOG = """\
[2024-05-01 10:00:00,000] [INFO] [launch.py:256:main] dist_world_size=8
[2024-05-01 10:00:05,000] [INFO] [config.py:988:print]   gradient_accumulation_steps .. 2
[2024-05-01 10:00:05,000] [INFO] [config.py:988:print]   train_batch_size ............. 64
[2024-05-01 10:00:05,000] [INFO] [config.py:988:print]   train_micro_batch_size_per_gpu  4
{lines}"""


def ds_lines(timestamps: bool) -> str:
    out = []
    for step in range(1, 7):
        fwd, bwd, opt = (900.0, 1800.0, 300.0) if step == 1 else (100.0, 200.0, 50.0)
        out.append(f"[Rank 0] time (ms) | fwd_microstep: {fwd / 2} | bwd_microstep: {bwd / 2} | step_microstep: 1.0")
        out.append(f"[Rank 0] time (ms) | fwd: {fwd} | bwd: {bwd} | bwd_inner: 1.0 | bwd_allreduce: 2.0 | step: {opt}")
        if step % 2 == 0:
            stamp = f"[2024-05-01 10:01:{step:02d},000] [INFO] [timer.py:260:stop] " if timestamps else ""
            out.append(f"{stamp}epoch=0/micro_step={2 * step}/global_step={step}, RunningAvgSamplesPerSec=150.0, "
                       f"CurrSamplesPerSec=160.0, MemAllocated=4.3GB, MaxMemAllocated=20.5GB")
    return "\n".join(out) + "\n"


def test_deepspeed_config_dump_world_size_and_wall_clock_breakdown(tmp_path):
    log = tmp_path / "ds.log"
    log.write_text(DS_LOG.format(lines=ds_lines(timestamps=True)))
    run = one_run(log, {"seq_len": 1024})
    assert (run["gpus"], run["global_batch_size"], run["micro_batch_size"], run["grad_accum_steps"]) == (8, 64, 4, 2)
    # lines at steps 2, 4 and 6, two seconds apart: steps 3..6 in 4 s
    assert run["steps"] == 4 and run["elapsed_s"] == pytest.approx(4.0)
    assert run["samples_per_s"] == pytest.approx(4 * 64 / 4.0)
    # the breakdown's first step is warm-up; the mean of the others times the 4 steps of the window
    assert (run["forward_s"], run["backward_s"], run["optimizer_s"]) == pytest.approx((0.4, 0.8, 0.2))


def test_deepspeed_without_timestamps_takes_its_global_samples_per_second(tmp_path):
    log = tmp_path / "ds.log"
    log.write_text(ds_lines(timestamps=False))
    run = one_run(log, {"seq_len": 1024, "gpus": 8})
    assert run["samples_per_s"] == pytest.approx(160.0) and run["tokens_per_s"] == pytest.approx(160.0 * 1024)
    assert "reported throughput" in run["extra_time_source"]


# --- Lightning CSVLogger with ThroughputMonitor ------------------------------------------------------------

def test_lightning_metrics_csv_window_runs_from_the_first_logged_row_to_the_last():
    path = DATA / "lightning_metrics.csv"
    run = one_run(path)
    assert import_path(path).format == "lightning_csv"
    # rows at steps 4 and 39 of the file: train/time 0.1886847199998556 -> 1.043631896999841
    assert run["elapsed_s"] == pytest.approx(1.043631896999841 - 0.1886847199998556)
    assert (run["steps"], run["samples"], run["tokens"]) == (35, 320 - 40, 20800 - 2600)
    assert run["train_loss"] == pytest.approx(5.657825946807861)
    # load_runs reads a metrics.csv through the importer, not as a canonical table
    assert list(load_runs(path)["elapsed_s"]) == pytest.approx([run["elapsed_s"]])


def test_lightning_world_size_from_global_and_device_rates_with_a_pipe_separator(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train|time,train|samples,train|lengths,train|device|samples_per_sec,"
                    "train|samples_per_sec,train_loss\n"
                    "0,9,2.0,80,40960,40.0,160.0,\n0,9,,,,,,3.5\n"
                    "0,19,4.0,160,81920,40.0,160.0,\n0,19,,,,,,3.1\n")
    run = one_run(path)
    assert run["gpus"] == 4 and run["elapsed_s"] == 2.0 and run["steps"] == 10
    assert run["samples"] == 80 * 4 and run["tokens_per_s"] == pytest.approx(40960 * 4 / 2.0)
    assert run["train_loss"] == 3.1


# --- Composer / llm-foundry --------------------------------------------------------------------------------

def test_composer_real_block_gives_its_global_tokens_per_second_on_sixteen_devices():
    path = DATA / "composer_mpt30b_mi300x.log"
    run = one_run(path)
    assert import_path(path).format == "composer"
    # num_gpus_per_node 8 x num_nodes 2; one block: no interval to time, so its window rate is the measurement
    assert (run["gpus"], run["nodes"]) == (16, 2)
    assert run["tokens_per_s"] == pytest.approx(20082.8418)
    assert run["tokens_per_s_per_gpu"] == pytest.approx(1255.1776, rel=1e-4)  # as its device/ figure says
    assert run["train_loss"] == 8.4213


def test_composer_blocks_are_intervals_of_its_cumulative_counters(tmp_path):
    log = tmp_path / "foundry.log"
    blocks = []
    for i, (batch, hours) in enumerate([(1, 0.01), (11, 0.02), (21, 0.03), (31, 0.04)]):
        blocks.append(f"[batch={batch}/40]:   Train time/batch: {batch - 1}    Train time/sample: {(batch - 1) * 8}"
                      f"    Train time/token: {(batch - 1) * 8 * 2048}    Train loss/train/total: {3 - i / 10}\n"
                      f"\t Train throughput/tokens_per_sec: 45000.0    Train time/train: {hours:.4f}\n")
    log.write_text("".join(blocks) + "[Eval batch=3/3] Eval metrics/eval/LanguageCrossEntropy: 0.0154\n")
    run = one_run(log, {"gpus": 8, "seq_len": 2048})
    # the first block is warm-up; three blocks of 10 batches, 36 s each
    assert run["steps"] == 30 and run["elapsed_s"] == pytest.approx(108.0)
    assert run["tokens"] == 30 * 8 * 2048 and run["tokens_per_s"] == pytest.approx(30 * 8 * 2048 / 108.0)
    assert run["train_loss"] == pytest.approx(2.7)


# --- the printed rate where counts are unknown ------------------------------------------------------------

def test_megatron_deepspeed_tokens_per_gpu_is_used_when_the_sequence_length_is_unknown(tmp_path):
    log = tmp_path / "mds.log"
    log.write_text("".join(f" iteration {i:8d}/ 1000 | consumed samples: {64 * i:12d} | elapsed time per iteration "
                           f"(ms): 2000.0 | global batch size: 64 | lm loss: 9.0E+00 | samples per second: 32.0 | "
                           f"tokens per gpu per second (tgs): 8192.0 | TFLOPs: 100.0 |\n" for i in (10, 20, 30)))
    run = one_run(log, {"gpus": 16})
    # samples are counted (consumed samples); tokens are not (no seq_length): 8192 tokens/s a GPU x 16
    assert run["samples_per_s"] == pytest.approx(64 * 10 / 20.0)
    assert run["tokens_per_s"] == pytest.approx(8192.0 * 16)
