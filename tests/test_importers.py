"""Log importers: each format read from sample logs written in the shape the
source prints (tests/data/importers/), and from the seed reports; expected
values are hand calculations written here or figures printed in the seeds.
Round trips: import -> derive -> the figures the log printed agree with
trainperf's recomputation (or are flagged, where the log counts differently)."""

import gzip
import shutil
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainperf import DataError, DataWarning, derive, load_runs, load_steps
from trainperf.cli import main
from trainperf.importers import compare_reported, has_column_mapping, import_path

DATA = Path(__file__).resolve().parent / "data" / "importers"
SEEDS = Path(__file__).resolve().parent / "data" / "seeds"  # the hand-written seed reports, verbatim
SEED_003 = SEEDS / "seed_003_batch_size.txt"
SEED_004 = SEEDS / "seed_004_epoch_timing.txt"


def one_run(result) -> dict:
    assert len(result.runs) == 1
    return result.runs.iloc[0].to_dict()


def comparison(derived: pd.DataFrame) -> dict[str, pd.Series]:
    table = compare_reported(derived)
    return {row.metric: row for row in table.itertuples(index=False)}


def megatron_flops_per_token(layers: int, hidden: int, seq: int, vocab: int) -> float:
    """Megatron-LM's num_floating_point_operations per token for a dense GPT (4h MLP, no GQA), written
    out: MLP 6·h·2·4h and attention projections 6·4h² per layer, causal attention 6·T·h per layer, logits 6·h·V."""
    return layers * (48 * hidden ** 2 + 24 * hidden ** 2 + 6 * seq * hidden) + 6 * hidden * vocab


# --- Megatron-LM -------------------------------------------------------------------------------------------

def test_megatron_lm_window_excludes_the_first_iteration_and_the_interval_that_averages_it():
    result = import_path(DATA / "megatron_lm.log")
    run = one_run(result)
    assert result.format == "megatron" and result.skipped == []
    # argument dump and vocab line
    assert (run["gpus"], run["seq_len"], run["n_layers"], run["d_model"], run["n_heads"]) == (8, 2048, 24, 2048, 16)
    assert (run["vocab_size"], run["precision"], run["activation_checkpointing"]) == (50304, "bf16", False)
    assert run["grad_accum_steps"] == 64 / (4 * 8)
    # iteration 1 is logged alone and the line at 10 averages iterations 1..10: both are warm-up;
    # the window is the lines at 20, 30, 40, 50, each covering 10 iterations
    assert run["elapsed_s"] == pytest.approx(10 * (1.000 + 1.010 + 0.990 + 1.000))
    assert run["steps"] == 40 and run["warmup_steps"] == 10
    assert run["samples"] == 3200 - 640
    assert run["peak_memory_gb"] == pytest.approx(41984.0 / 1024)
    assert run["train_loss"] == pytest.approx(9.4) and run["val_loss"] == pytest.approx(8.912345)
    # the step intervals are the lines at 10 ... 50, of 10 iterations each (the line at 1 lies inside the one at 10)
    intervals = result.steps
    assert intervals["step"].tolist() == [10, 20, 30, 40, 50] and (intervals["n_steps"] == 10).all()
    assert intervals["warmup"].tolist() == [True, False, False, False, False]
    assert intervals["step_s"].tolist()[1:] == pytest.approx([10.0, 10.1, 9.9, 10.0])  # 10 x the ms per iteration


def test_megatron_lm_round_trip_reproduces_its_tflops_with_the_megatron_convention():
    derived = derive(import_path(DATA / "megatron_lm.log").runs)
    tokens_per_s = 2560 * 2048 / 40.0
    assert derived["tokens_per_s"].iat[0] == pytest.approx(tokens_per_s)
    expected = megatron_flops_per_token(24, 2048, 2048, 50304) * tokens_per_s / 8 / 1e12
    assert derived["tflops_per_gpu"].iat[0] == pytest.approx(expected)
    tflops = comparison(derived)["tflops_per_gpu"]
    assert abs(tflops.relative_difference) < 0.002 and not tflops.flagged


def test_megatron_lm_warmup_zero_counts_the_averaged_first_interval_once():
    run = one_run(import_path(DATA / "megatron_lm.log", {"warmup_steps": 0}))
    # the line at 10 (mean 1887.7 ms over iterations 1..10) joins the window; the line at 1 is inside it
    assert run["elapsed_s"] == pytest.approx(10 * 1.8877 + 40.0)
    assert run["steps"] == 50 and run["samples"] == 3200


ENERGY_LINES = [
    # three consecutive lines of a Megatron-LM run with --log-energy, as NVIDIA's cloudai keeps them in its tests
    # (NVIDIA/cloudai, tests/report_generation_strategy/test_megatron_run_report_generation_strategy.py); the
    # text is Megatron-LM's training_log (megatron/training/training.py: ' energy per GPU (J/iter/GPU): {:.1f} |'
    # and ' power per GPU (W/GPU): {:.1f} |', the all-reduced NVML lap / iterations / world size)
    " [2026-02-06 20:55:02.918469] iteration      292/95367431 | consumed samples:         9344 | "
    "elapsed time per iteration (ms): 3075.7 | throughput per GPU (TFLOP/s/GPU): 478.0 | "
    "energy per GPU (J/iter/GPU): 1992.5 | power per GPU (W/GPU): 647.8 | learning rate: 9.568256E-08 | "
    "global batch size:    32 | lm loss: 2.401035E-02 | loss scale: 1.0 | grad norm: 1.797 |",
    " [2026-02-06 20:55:05.956222] iteration      293/95367431 | consumed samples:         9376 | "
    "elapsed time per iteration (ms): 3037.2 | throughput per GPU (TFLOP/s/GPU): 484.0 | "
    "energy per GPU (J/iter/GPU): 1982.6 | power per GPU (W/GPU): 652.8 | learning rate: 9.601024E-08 | "
    "global batch size:    32 | lm loss: 2.386082E-02 | loss scale: 1.0 | grad norm: 1.797 |",
    " [2026-02-06 20:55:08.991445] iteration      294/95367431 | consumed samples:         9408 | "
    "elapsed time per iteration (ms): 3035.2 | throughput per GPU (TFLOP/s/GPU): 484.3 | "
    "energy per GPU (J/iter/GPU): 1980.1 | power per GPU (W/GPU): 652.5 | learning rate: 9.633792E-08 | "
    "global batch size:    32 | lm loss: 2.378540E-02 | loss scale: 1.0 | grad norm: 1.796 |",
]


def test_megatron_energy_lines_give_the_jobs_energy_per_interval(tmp_path):
    log = tmp_path / "energy.log"
    log.write_text("\n".join(ENERGY_LINES) + "\nTotal training energy (GPU): 4.568 MJ\n")
    (log.parent / "energy.log.trainperf.yaml").write_text("gpus: 8\nseq_len: 4096\n")
    result = import_path(log)
    run = one_run(result)
    # line 292 starts the excerpt (its length unknown): warm-up; 293 and 294 cover one iteration each,
    # and each used J/iter/GPU x 1 iteration x 8 GPUs
    energy = (1982.6 + 1980.1) * 8
    assert run["energy_j"] == pytest.approx(energy)
    assert result.steps.loc[~result.steps["warmup"], "energy_j"].tolist() == pytest.approx([1982.6 * 8, 1980.1 * 8])
    assert run["energy_counter"].startswith("Megatron-LM's --log-energy")
    assert run["extra_total_training_energy_j"] == pytest.approx(4.568e6)
    row = derive(result.runs).iloc[0]
    assert row["energy_j_per_token"] == pytest.approx(energy / (64 * 4096))  # 2 x 32 samples of 4096 tokens
    # the power the log printed, averaged over the window by time, and trainperf's from the energy: the same
    # to the log's rounding (one decimal of J and W)
    printed = (652.8 * 3.0372 + 652.5 * 3.0352) / (3.0372 + 3.0352)
    assert row["reported_power_w_per_gpu"] == pytest.approx(printed)
    assert row["power_w_per_gpu"] == pytest.approx(energy / (8 * (3.0372 + 3.0352)))
    assert row["power_w_per_gpu"] == pytest.approx(printed, abs=0.1)


def test_megatron_argument_dump_gives_parallel_degrees_and_the_moe_shape(tmp_path):
    log = tmp_path / "mixtral.log"
    dump = {"world_size": 64, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
            "context_parallel_size": 1, "expert_model_parallel_size": 8, "data_parallel_size": 8,
            "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "group_query_attention": True,
            "num_query_groups": 8, "ffn_hidden_size": 14336, "swiglu": True, "num_experts": 8,
            "moe_router_topk": 2, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256,
            "padded_vocab_size": 32000, "bf16": True, "fp16": False}
    lines = [f"  {key} {'.' * (40 - len(key))} {value}" for key, value in dump.items()]
    lines += [f" [2025-01-15 10:00:{i:02d}] iteration {i:8d}/     100 | consumed samples: {256 * i:12d} | "
              f"elapsed time per iteration (ms): 5000.0 | throughput per GPU (TFLOP/s/GPU): 200.0 | "
              f"global batch size:   256 | lm loss: 9.0E+00 |" for i in (1, 2, 3)]
    log.write_text("\n".join(lines) + "\n")
    run = one_run(import_path(log))
    assert (run["tensor_parallel"], run["pipeline_parallel"], run["context_parallel"], run["expert_parallel"]) \
        == (2, 4, 1, 8)
    assert (run["num_query_groups"], run["ffn_hidden_size"], run["swiglu"], run["num_experts"],
            run["moe_router_topk"]) == (8, 14336, True, 8, 2)
    assert run["grad_accum_steps"] == 256 / (8 * 1) and run["extra_reported_flops_convention"] == "megatron"
    assert derive(import_path(log).runs)["data_parallel"].iat[0] == 64 / (2 * 4)


def test_megatron_accumulation_from_the_world_size_or_the_sidecar_without_a_data_parallel_size(tmp_path):
    """A dump without data_parallel_size (older Megatron-LM, Megatron-DeepSpeed): 64 GPUs over TP 2 x PP 4 are 8
    replicas, so a global batch of 256 at micro-batch 1 is 32 accumulation steps. Without the world size and
    degrees in the log, the sidecar gives them and derive works it out."""
    dump = {"world_size": 64, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
            "micro_batch_size": 1, "global_batch_size": 256, "seq_length": 4096}
    lines = [f"  {key} {'.' * (40 - len(key))} {value}" for key, value in dump.items()]
    lines += [f" iteration {i:8d}/     100 | consumed samples: {256 * i:12d} | elapsed time per iteration (ms): "
              f"5000.0 | global batch size:   256 | lm loss: 9.0E+00 |" for i in (1, 2, 3)]
    log = tmp_path / "megatron.log"
    log.write_text("\n".join(lines) + "\n")
    assert one_run(import_path(log))["grad_accum_steps"] == 32
    bare = tmp_path / "bare.log"
    bare.write_text("\n".join(lines[3:]) + "\n")
    assert pd.isna(one_run(import_path(bare)).get("grad_accum_steps"))
    given = {"gpus": 64, "tensor_parallel": 2, "pipeline_parallel": 4, "micro_batch_size": 1}
    assert derive(import_path(bare, given).runs)["grad_accum_steps"].iat[0] == 32


# --- Megatron-DeepSpeed ------------------------------------------------------------------------------------

def test_megatron_deepspeed_reads_prefixed_wrapped_lines_and_reports_the_truncated_one():
    result = import_path(DATA / "megatron_deepspeed.log")
    run = one_run(result)
    assert run["elapsed_s"] == pytest.approx(10 * (2.50 + 2.52 + 2.48))  # the wrapped line at 30 is read
    assert run["tokens"] == 5_242_880 - 1_310_720 and run["samples"] == 1920
    assert run["slowest_rank"] == 7  # from the [default7]: prefix
    assert (run["precision"], run["activation_checkpointing"], run["gpus"]) == ("fp16", True, 16)
    assert result.skipped_total == 1
    (file, line, reason), = result.skipped
    assert file.endswith("megatron_deepspeed.log") and line == 22 and "truncated" in reason


def test_megatron_deepspeed_round_trip_samples_agree_and_its_tflops_count_recomputation():
    derived = derive(import_path(DATA / "megatron_deepspeed.log").runs)
    compared = comparison(derived)
    assert derived["samples_per_s"].iat[0] == pytest.approx(1920 / 75.0)
    assert not compared["samples_per_s"].flagged
    # its TFLOPs use 4 passes (recomputed forward) where model FLOPs count 3
    assert compared["tflops_per_gpu"].flagged
    assert compared["tflops_per_gpu"].recomputed / compared["tflops_per_gpu"].reported == pytest.approx(3 / 4, rel=5e-3)


# --- torchtitan --------------------------------------------------------------------------------------------

def test_torchtitan_two_ranks_with_colours_prefixes_and_a_wrapped_line():
    result = import_path(DATA / "torchtitan.log")
    run = one_run(result)
    assert result.format == "torchtitan" and result.skipped_total == 0
    assert (run["gpus"], run["platform"], run["model"], run["n_params"]) == (2, "NVIDIA H100 80GB HBM3",
                                                                             "llama3 1B", 1e9)
    assert (run["micro_batch_size"], run["global_batch_size"], run["seq_len"]) == (2, 4, 4096)
    assert run["reported_peak_tflops_per_gpu"] == pytest.approx(989.0)
    # per rank: time between its own lines after step 1; rank 1 is the slowest
    rank0, rank1 = 9.0 + 10.0 + 10.2 + 10.0, 9.0 + 10.05 + 10.3 + 10.1
    assert run["elapsed_s"] == pytest.approx(rank1) and run["slowest_rank"] == 1
    assert run["mean_rank_elapsed_s"] == pytest.approx((rank0 + rank1) / 2)
    assert run["rank_imbalance"] == pytest.approx(rank1 / rank0)
    assert run["steps"] == 39 and run["warmup_steps"] == 1 and run["complete"]
    assert run["peak_memory_gb"] == pytest.approx(36.02)
    assert run["train_loss"] == pytest.approx((7.3 + 7.299) / 2) and run["val_loss"] == pytest.approx(7.1234)


def test_torchtitan_round_trip_tps_agrees_and_its_tflops_reproduce_under_its_own_convention():
    # the vocabulary makes the token embedding 48,828 x 2,048 = 0.1e9 of the 1e9 parameters
    derived = derive(import_path(DATA / "torchtitan.log", {"vocab_size": 48828}).runs)
    compared = comparison(derived)
    per_gpu = 39 * 4 * 4096 / 39.45 / 2
    assert derived["tokens_per_s_per_gpu"].iat[0] == pytest.approx(per_gpu)
    # reported: each rank's tokens over its own time (8192 tokens a step a rank)
    assert compared["tokens_per_s_per_gpu"].reported == pytest.approx(2 * 39 * 8192 / (39.2 + 39.45), rel=2e-4)
    assert not compared["tokens_per_s_per_gpu"].flagged
    # torchtitan's FLOPs leave out the embedding parameters: compared under its convention they agree ...
    palm = 6 * 1e9 + 12 * 16 * 2048 * 4096
    titan = 6 * (1e9 - 48828 * 2048) + 12 * 16 * 2048 * 4096
    tflops = compared["tflops_per_gpu"]
    assert tflops.convention == "torchtitan" and not tflops.flagged
    assert tflops.recomputed == pytest.approx(titan * per_gpu / 1e12)
    # ... while trainperf's own figure keeps the run's convention (PaLM: embedding counted)
    assert derived["flops_convention_used"].iat[0] == "palm"
    assert derived["tflops_per_gpu"].iat[0] == pytest.approx(palm * per_gpu / 1e12)
    assert not compared["peak_tflops_per_gpu"].flagged  # 989 against trainperf's dense 989.5


def test_torchtitan_without_timestamps_takes_the_reported_rate_and_does_not_compare_it(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text("".join(f"step: {s}  loss:  2.0000  memory: 10.00GiB(12.00%)  tps: {tps:,}  mfu: 40.00%\n"
                           for s, tps in [(1, 500), (10, 9000), (20, 11000)]))
    result = import_path(log, {"gpus": 4})
    run = one_run(result)
    # window: 9 steps at 9000 and 10 steps at 11000 tokens/s/GPU: time-weighted mean = 19 / (9/9000 + 10/11000)
    rate = 19 / (9 / 9000 + 10 / 11000)
    assert run["reported_tokens_per_s_per_gpu"] == pytest.approx(rate)
    assert run["tokens_per_s"] == pytest.approx(4 * rate)
    assert "elapsed_s" not in result.runs or pd.isna(run["elapsed_s"])
    assert "tokens_per_s_per_gpu" not in set(compare_reported(derive(result.runs))["metric"])


def test_torchtitan_every_step_logged_gives_a_steps_table_and_a_rank_that_stopped_early(tmp_path):
    line = "[rank{r}]:[titan] 2025-01-15 10:00:{t} - root - INFO - step: {s}  loss:  2.0000  " \
           "memory: 10.00GiB(12.00%)  tps: 1,000  tflops: 10.00  mfu: 1.00%"
    times = {0: ["00,000", "01,000", "02,500", "03,500"], 1: ["00,000", "01,200", "02,400"]}  # rank 1 stops
    log = tmp_path / "every.log"
    log.write_text("\n".join(line.format(r=r, t=t, s=s + 1) for r, ts in times.items() for s, t in enumerate(ts)))
    result = import_path(log)
    run = one_run(result)
    assert run["complete"] == False  # noqa: E712
    assert run["elapsed_s"] == pytest.approx(1.0 + 1.5 + 1.0) and run["steps"] == 3
    steps = result.steps.set_index(["rank", "step"])
    assert list(steps["warmup"]) == [True, False, False, False, True, False, False]
    # step 1 has no earlier line to time it; start_s counts from the first timed step
    assert list(steps["step_s"]) == pytest.approx([np.nan, 1.0, 1.5, 1.0, np.nan, 1.2, 1.2], nan_ok=True)
    assert list(steps["start_s"]) == pytest.approx([np.nan, 0.0, 1.0, 2.5, np.nan, 0.0, 1.2], nan_ok=True)
    assert steps["tokens"].isna().all()  # several ranks log: per-rank tokens unknown


# --- nanoGPT -----------------------------------------------------------------------------------------------

def test_nanogpt_sampled_iterations_and_printed_configuration():
    result = import_path(DATA / "nanogpt.log")
    run = one_run(result)
    assert result.format == "nanogpt"
    assert (run["n_layers"], run["n_heads"], run["d_model"], run["seq_len"], run["micro_batch_size"]) == (
        12, 12, 768, 1024, 12)
    assert run["precision"] == "bf16" and run["n_params"] == pytest.approx(123.59e6)
    # iter 0 (compilation) is warm-up; iters 10..50 are single sampled steps
    assert run["elapsed_s"] == pytest.approx(0.400 + 0.402 + 0.398 + 0.400 + 0.401)
    assert run["steps"] == 5 and run["warmup_steps"] == 1 and run["tokens"] == 5 * 491_520
    steps = result.steps
    # iter 0's time includes nanoGPT's evaluation at iter 0: an interval, flagged and left out of the window
    assert steps["step"].tolist() == [0, 10, 20, 30, 40, 50]
    assert steps["includes_evaluation"].tolist() == [True] + [False] * 5 and steps["warmup"].tolist()[1:] == [False] * 5
    assert list(steps["step_s"])[1:] == pytest.approx([0.400, 0.402, 0.398, 0.400, 0.401])


def test_nanogpt_round_trip_mfu_agrees_against_the_a100_peak():
    derived = derive(import_path(DATA / "nanogpt.log").runs)
    per_gpu = 5 * 491_520 / 2.001 / 8
    flops_per_token = 6 * 123.59e6 + 12 * 12 * 768 * 1024
    assert derived["mfu"].iat[0] == pytest.approx(per_gpu * flops_per_token / 312e12)
    mfu = comparison(derived)["mfu"]
    assert abs(mfu.relative_difference) < 0.002 and not mfu.flagged


def test_nanogpt_iteration_that_ran_an_evaluation_is_left_out(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("tokens per iteration will be: 1,000\n"
                   "step 0: train loss 4.0000, val loss 4.1000\n"
                   "iter 0: loss 4.0000, time 9000.00ms, mfu -100.00%\n"
                   "iter 10: loss 3.5000, time 100.00ms, mfu 30.00%\n"
                   "step 20: train loss 3.2000, val loss 3.3000\n"
                   "iter 20: loss 3.2000, time 2500.00ms, mfu 28.00%\n"
                   "iter 30: loss 3.0000, time 110.00ms, mfu 29.00%\n")
    run = one_run(import_path(log))
    assert run["elapsed_s"] == pytest.approx(0.100 + 0.110) and run["steps"] == 2 and run["tokens"] == 2000
    assert run["extra_excluded_records"] == 1 and run["val_loss"] == pytest.approx(3.3)


# --- seed 004: per-rank epoch timing -------------------------------------------------------------------------

def test_seed_004_slowest_rank_and_the_averages_it_printed():
    runs = import_path(SEED_004).runs.set_index("run_id")
    assert list(runs.index) == ["training_b64_g1", "training_b128_g1", "training_b64_g2", "training_b128_g2",
                                "training_b64_g4", "training_b128_g4"]
    assert list(runs["gpus"]) == [1, 1, 2, 2, 4, 4]
    g2 = runs.loc["training_b64_g2"]
    assert g2["elapsed_s"] == 1384.64 and g2["slowest_rank"] == 0  # the seed used the mean, 1095.70
    assert g2["mean_rank_elapsed_s"] == pytest.approx((1384.64 + 806.75) / 2)
    assert g2["reported_mean_rank_elapsed_s"] == 1095.70
    assert g2["rank_imbalance"] == pytest.approx(1384.64 / 806.75)  # DESIGN: a 1.7x imbalance
    assert g2["compute_s"] == pytest.approx(1047.59) and g2["comm_s"] == pytest.approx((41.09 + 38.94) / 2)
    assert (g2["train_loss"], g2["val_loss"]) == (1.22, 1.5059)
    assert runs.loc["training_b64_g1", "elapsed_s"] == 2233.50
    assert runs.loc["training_b128_g4", "elapsed_s"] == 706.41
    compared = compare_reported(derive(runs.reset_index()))
    assert not compared["flagged"].any() and len(compared) > 0


def test_epoch_timing_sample_round_trip_scaling_from_the_slowest_rank():
    result = import_path(DATA / "epoch_timing.log")
    runs = result.runs.set_index("run_id")
    assert list(runs.index) == ["ddp_g1", "ddp_g2"] and list(runs["gpus"]) == [1, 2]
    assert runs.loc["ddp_g1", "elapsed_s"] == 400.0 + 380.0 and runs.loc["ddp_g1", "extra_epochs"] == 2
    assert (runs.loc["ddp_g1", "train_loss"], runs.loc["ddp_g1", "val_loss"]) == (1.8, 2.0)  # the last epoch's
    assert runs.loc["ddp_g2", "elapsed_s"] == 220.0 and runs.loc["ddp_g2", "mean_rank_elapsed_s"] == 205.0
    derived = derive(result.runs).set_index("run_id")
    multiplier = (10_000 / 220.0) / (20_000 / 780.0)
    assert derived.loc["ddp_g2", "scaling_multiplier"] == pytest.approx(multiplier)
    assert derived.loc["ddp_g2", "scaling_efficiency"] == pytest.approx(multiplier / 2)
    compared = compare_reported(derived.reset_index())
    assert set(compared["metric"]) == {"mean_rank_elapsed_s", "data_s", "h2d_s", "compute_s", "comm_s"}
    assert not compared["flagged"].any()


def test_epoch_timing_epochs_sum_and_a_missing_epoch_makes_the_run_incomplete(tmp_path):
    blocks = []
    for rank, epoch, total in [(0, 0, 100.0), (1, 0, 110.0), (0, 1, 90.0), (1, 1, 95.0), (2, 0, 120.0)]:
        blocks.append(f"Rank {rank} Epoch {epoch} timing breakdown:\nTotal epoch time: {total:.2f} seconds\n"
                      f"Training compute time: {total - 10:.2f} seconds\n")
    log = tmp_path / "ddp.log"
    log.write_text("\n".join(blocks) + "Average Loss: oops\n")
    result = import_path(log)
    run = one_run(result)
    assert run["elapsed_s"] == pytest.approx(110.0 + 95.0) and run["slowest_rank"] == 1
    assert run["gpus"] == 3 and run["complete"] == False  # noqa: E712 (rank 2 has one epoch of two)
    assert run["compute_s"] == pytest.approx(((90.0 + 80.0) + (100.0 + 85.0) + 110.0) / 3)
    assert result.skipped_total == 1 and "not a number" in result.skipped[0][2]


# --- seed 003: batch-size timing summaries -------------------------------------------------------------------

def test_seed_003_sections_become_runs_with_the_training_loop_time():
    runs = import_path(SEED_003).runs.set_index("run_id")
    assert list(runs["micro_batch_size"]) == [16, 32, 64, 128, 256, 512, 1024]
    assert list(runs["grad_accum_steps"]) == [64, 32, 16, 8, 4, 2, 1]
    assert (runs["gpus"] == 4).all()
    first = runs.loc["bs16-accum64"]
    assert (first["elapsed_s"], first["validation_s"], first["backward_s"], first["loss_s"], first["forward_s"]) == (
        253.84, 12.97, 111.54, 2.12, 72.86)
    assert first["extra_backward_mean_s"] == 0.0314 and first["extra_total_exec_s"] == 314.00
    assert list(runs["reported_tokens_per_s"]) == [2090, 4040, 7760, 11360, 13900, 15250, 16150]


def test_timing_summary_round_trip_with_tokens_from_the_sidecar():
    derived = derive(import_path(DATA / "batch_sweep.md").runs)
    assert list(derived["tokens_per_s"]) == pytest.approx([655_360 / 100.0, 655_360 / 40.0])
    compared = compare_reported(derived)
    assert len(compared) == 2 and not compared["flagged"].any()


# --- CSV through a column mapping ---------------------------------------------------------------------------

def test_csv_mapping_round_trip_on_the_seed_000_table():
    result = import_path(DATA / "scaling.csv")
    assert result.format == "csv" and len(result.runs) == 5
    runs = result.runs.set_index("run_id")
    assert runs.loc["32 GPUs across 8 nodes", "tokens"] == 1_081_344_000
    assert (runs["steps"] == 1500).all() and (runs["experiment"] == "throughput-scaling").all()
    derived = derive(result.runs)
    assert derived["tokens_per_s"].iat[0] == pytest.approx(33_792_000 / 991.38)
    compared = compare_reported(derived)
    assert len(compared) == 10 and not compared["flagged"].any()
    assert has_column_mapping(DATA / "scaling.csv") and not has_column_mapping(DATA / "batch_sweep.md")


def test_csv_row_with_an_unreadable_cell_is_skipped_with_its_line(tmp_path):
    table = tmp_path / "runs.txt"
    table.write_text("name;devices;secs;mfu\na;8;100;41.5%\nb;8;1,5;40%\nc;16;~90;n/a\n")
    mapping = tmp_path / "map.yaml"
    mapping.write_text("columns: {run_id: name, gpus: devices, elapsed_s: secs, reported_mfu: mfu}\n")
    result = import_path(table, {"mapping": str(mapping)})
    assert list(result.runs["run_id"]) == ["a", "c"]
    assert result.runs["reported_mfu"].iat[0] == pytest.approx(0.415)
    assert result.runs["elapsed_s"].iat[1] == 90
    (file, line, reason), = result.skipped
    assert line == 3 and "elapsed_s" in reason


def test_csv_without_a_mapping_says_how_to_give_one(tmp_path):
    table = tmp_path / "results.csv"
    table.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DataError, match="columns"):
        import_path(table)


# --- sidecar, overrides, missing fields ---------------------------------------------------------------------

def test_missing_fields_name_the_metrics_they_block_until_the_sidecar_gives_them(tmp_path):
    log = tmp_path / "nano.log"
    shutil.copy(DATA / "nanogpt.log", log)
    missing = {m.field: m for m in import_path(log).missing}
    assert {"gpus", "platform"} <= set(missing)
    assert {"tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"} <= set(missing["gpus"].blocks)
    assert set(missing["platform"].blocks) == {"peak_tflops_per_gpu", "mfu", "hfu"}
    assert "n_params" not in missing and "seq_len" not in missing  # the log prints them
    (tmp_path / "nano.log.trainperf.yaml").write_text("gpus: 8\nplatform: NVIDIA A100 SXM 80GB\n")
    missing = {m.field for m in import_path(log).missing}
    assert not {"gpus", "platform"} & missing


def test_override_beats_the_log_with_a_warning_and_per_run_entries_beat_the_top_level(tmp_path):
    log = tmp_path / "mega.log"
    shutil.copy(DATA / "megatron_lm.log", log)
    (tmp_path / "mega.log.trainperf.yaml").write_text("seq_len: 1024\nruns:\n  mega: {platform: NVIDIA H100 SXM}\n")
    with pytest.warns(DataWarning) as caught:
        run = one_run(import_path(log, {"gpus": "16"}))
    messages = sorted(str(w.message) for w in caught)
    assert "the log says gpus=8 but the overrides (--set) sets 16" in messages[0]
    assert "the log says seq_len=2048 but" in messages[1] and "mega.log.trainperf.yaml sets 1024" in messages[1]
    assert run["seq_len"] == 1024 and run["gpus"] == 16 and run["platform"] == "NVIDIA H100 SXM"


@pytest.mark.parametrize("sidecar, message", [
    ("sequence_length: 2048\n", "did you mean 'seq_len'"),
    ("gpus: -1\n", "gpus"),
    ("precision: fp13\n", "precision"),
    ("gpus: [\n", "YAML"),
    ("n_layers: 1,5\n", "'1,5' is not a number"),  # was read as 15
])
def test_bad_sidecar_raises_naming_the_sidecar(tmp_path, sidecar, message):
    log = tmp_path / "nano.log"
    shutil.copy(DATA / "nanogpt.log", log)
    (tmp_path / "nano.log.trainperf.yaml").write_text(sidecar)
    with pytest.raises(DataError, match=message) as error:
        import_path(log)
    assert "nano.log.trainperf.yaml" in str(error.value)


def test_numbers_written_with_an_exponent_are_numbers_under_every_sidecar_key(tmp_path):
    """PyYAML reads 1e9 as text (YAML 1.1 wants 1.0e+9): a column mapping's scale refused it ("not a number")."""
    table = tmp_path / "results.csv"
    table.write_text("name,devices,secs,mtok\na,8,100,1000\nb,16,60,1000\n")
    (tmp_path / "results.csv.trainperf.yaml").write_text(
        "columns: {run_id: name, gpus: devices, elapsed_s: secs, tokens: {column: mtok, scale: 1e6}}\n"
        "n_params: 7E9\nextra_budget_usd: 2.5e3\nprice_per_gpu_hour: 1,000\nruns: {b: {seq_len: 4.096e3}}\n")
    runs = import_path(table).runs.set_index("run_id")
    assert runs["tokens"].tolist() == [1e9, 1e9] and runs["n_params"].tolist() == [7e9, 7e9]
    assert runs["extra_budget_usd"].tolist() == [2500.0, 2500.0] and runs["price_per_gpu_hour"].tolist() == [1e3] * 2
    assert pd.isna(runs.at["a", "seq_len"]) and runs.at["b", "seq_len"] == 4096


# --- detection and tolerance --------------------------------------------------------------------------------

def test_detection_is_by_content_not_by_name(tmp_path):
    disguised = tmp_path / "metrics.csv"
    shutil.copy(DATA / "torchtitan.log", disguised)
    assert import_path(disguised).format == "torchtitan"
    packed = tmp_path / "train.log.gz"
    packed.write_bytes(gzip.compress((DATA / "nanogpt.log").read_bytes()))
    assert import_path(packed).format == "nanogpt"


def test_records_after_a_long_preamble_are_found(tmp_path):
    log = tmp_path / "long.log"
    log.write_text("NCCL INFO setting up channels\n" * 60_000 + (DATA / "nanogpt.log").read_text())
    assert import_path(log).format == "nanogpt"


def test_unknown_and_binary_files_raise_naming_the_formats_tried(tmp_path):
    prose = tmp_path / "notes.txt"
    prose.write_text("nothing but prose here\n")
    with pytest.raises(DataError, match="formats tried: .*megatron.*torchtitan.*nanogpt") as error:
        import_path(prose)
    assert "notes.txt" in str(error.value)
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(DataError, match="binary"):
        import_path(binary)
    with pytest.raises(DataError, match="no such file"):
        import_path(tmp_path / "absent.log")


def test_interleaved_line_is_counted_and_its_rank_s_next_interval_is_not_guessed(tmp_path):
    line = "[rank{r}]:[titan] 2025-01-15 10:00:{t:02d},000 - root - INFO - step: {s}  loss:  2.0000  " \
           "memory: 10.00GiB(12.00%)  tps: 1,000  mfu: 40.00%"
    rows = [line.format(r=0, t=t, s=s) for s, t in [(1, 0), (10, 9), (20, 19)]]
    garbled = line.format(r=0, t=29, s=30)
    rows.append(garbled[:garbled.index("memory")] + garbled[8:])  # two records run together
    rows.append(line.format(r=0, t=39, s=40))
    log = tmp_path / "titan.log"
    log.write_text("\n".join(rows) + "\n")
    result = import_path(log)
    run = one_run(result)
    assert result.skipped_total == 1 and result.skipped[0][1] == 4 and "interleaved" in result.skipped[0][2]
    # steps 21..30 are unreadable, so the line at 40 cannot say where its interval starts: left out
    assert run["steps"] == 9 + 10 and run["elapsed_s"] == pytest.approx(19.0)


def test_a_restart_starts_a_new_run(tmp_path):
    text = "".join(f"iter {i}: loss 3.0000, time 100.00ms, mfu 30.00%\n" for i in (0, 10, 20, 30))
    log = tmp_path / "restarted.log"
    log.write_text(text + "".join(f"iter {i}: loss 3.0000, time 200.00ms, mfu 15.00%\n" for i in (20, 30, 40)))
    runs = import_path(log).runs
    assert list(runs["run_id"]) == ["restarted-1", "restarted-2"]
    assert list(runs["elapsed_s"]) == pytest.approx([0.1 * 3, 0.2 * 2])  # iters 10-30 and 30-40


def test_run_id_for_a_log_with_several_runs_must_go_under_runs(tmp_path):
    with pytest.raises(DataError, match="runs:"):
        import_path(SEED_004 if SEED_004.exists() else DATA / "batch_sweep.md", {"run_id": "x"})


# --- compare_reported, load_runs and the CLI ----------------------------------------------------------------

def test_compare_reported_flags_beyond_two_percent():
    derived = pd.DataFrame({"run_id": ["a", "b", "c"], "mfu": [0.40, 0.40, np.nan],
                            "reported_mfu": [0.395, 0.45, 0.4], "reported_other": [1.0, 2.0, 3.0]})
    table = compare_reported(derived)
    assert list(table["run_id"]) == ["a", "b"]
    # (source − trainperf) / trainperf: the sign the reports print
    assert list(table["relative_difference"]) == pytest.approx([0.395 / 0.40 - 1, 0.45 / 0.40 - 1])
    assert list(table["flagged"]) == [False, True]


def test_compare_reported_does_not_flag_the_rounding_of_the_printed_figure():
    # a log printing whole samples/s: 0 and 3 for 0.4 and 2.6 are its rounding; 5 for 2.6 is not
    derived = pd.DataFrame({"run_id": ["a", "b", "c"], "samples_per_s": [0.4, 2.6, 2.6],
                            "reported_samples_per_s": [0.0, 3.0, 5.0]})
    table = compare_reported(derived)
    assert list(table["flagged"]) == [False, False, True]
    assert table["relative_difference"].iloc[0] == pytest.approx(-1.0)


def test_load_runs_reads_a_log_through_the_importers():
    runs = load_runs(DATA / "torchtitan.log")
    assert list(runs["run_id"]) == ["torchtitan"] and runs["elapsed_s"].iat[0] == pytest.approx(39.45)


def test_cli_import_writes_a_runs_table_load_runs_reads_back(tmp_path, capsys):
    out, steps = tmp_path / "runs.csv", tmp_path / "steps.csv"
    assert main(["import", str(DATA / "nanogpt.log"), str(DATA / "megatron_deepspeed.log"),
                 "--out", str(out), "--steps-out", str(steps), "--set", "price_per_gpu_hour=2"]) == 0
    printed = capsys.readouterr().out
    assert "megatron_deepspeed.log:22: iteration line: truncated" in printed
    assert "tflops_per_gpu" in printed and "FLAGGED" in printed
    runs = load_runs(out).set_index("run_id")
    assert runs.loc["nanogpt", "elapsed_s"] == pytest.approx(2.001)
    assert (runs["price_per_gpu_hour"] == 2).all()
    # the logs' step intervals: nanoGPT's 6 sampled iterations (iter 0's time includes an evaluation) and
    # Megatron-DeepSpeed's 4 lines of 10 iterations each (the first follows the truncated line 22: its
    # length is unknown); read back as a steps table
    intervals = load_steps(steps)
    assert intervals.groupby("run_id")["n_steps"].agg(lambda n: n.fillna(0).tolist()).to_dict() == {
        "nanogpt": [1.0] * 6, "megatron_deepspeed": [0.0, 10.0, 10.0, 10.0]}
    assert intervals["includes_evaluation"].sum() == 1


def test_cli_import_reports_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("hello\n")
    assert main(["import", str(tmp_path / "x.txt"), "--out", str(tmp_path / "o.csv")]) == 2
    assert "formats tried" in capsys.readouterr().err
    assert main(["import", str(DATA / "nanogpt.log"), "--out", str(tmp_path / "o.csv"), "--set", "gpus"]) == 2


def test_every_sample_imports_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in sorted(DATA.iterdir()):
            if not path.name.endswith(".trainperf.yaml") and path.name != "README.md":
                import_path(path)


def test_nanogpt_lines_of_an_older_train_py_without_mfu_are_read(tmp_path):
    """karpathy/nanoGPT issue #110 (2023-02-02), `torchrun --standalone --nproc_per_node=8 train.py` on 8 A100:
    lines without `mfu` (the whole log was refused: "no run has a measured window"). The excerpt starts at
    iteration 1631, long past the warm-up (iteration 0): all 11 lines are measured."""
    times = [561.94, 563.15, 562.11, 562.80, 561.50, 562.73, 562.19, 562.74, 562.66, 562.18, 567.31]
    losses = [4.0863, 3.7441, 3.9848, 3.8716, 3.9853, 3.7735, 3.8779, 3.6817, 3.9185, 3.6782, 3.9748]
    log = tmp_path / "issue110.log"
    log.write_text("".join(f"iter {1631 + i}: loss {loss:.4f}, time {t:.2f}ms\n"
                           for i, (t, loss) in enumerate(zip(times, losses))))
    result = import_path(log)
    run = one_run(result)
    assert result.format == "nanogpt" and result.skipped_total == 0
    assert run["steps"] == 11 and run["elapsed_s"] == pytest.approx(sum(times) / 1000)
    assert "reported_mfu" not in run or pd.isna(run["reported_mfu"])


def test_a_megatron_line_without_its_final_bar_is_read_and_a_cut_field_is_not(tmp_path):
    """A pasted Megatron-Core line may end without its final '|': the fields a '|' ends are read; a last
    field without one may have been cut (here the TFLOP/s), and is left out."""
    line = ("iteration {i}/ 100 | consumed samples: {s} | elapsed time per iteration (ms): 1500.0 | "
            "global batch size: 64 | lm loss: 7.0E+00 | throughput per GPU (TFLOP/s/GPU): 40")
    log = tmp_path / "pasted.log"
    log.write_text("".join(line.format(i=i, s=64 * i) + "\n" for i in (1, 10, 20, 30)))
    result = import_path(log, {"seq_len": 2048})
    run = one_run(result)
    # iteration 1 and the line at 10 that averages it are warm-up: 20 iterations of 1.5 s are measured
    assert result.skipped_total == 0 and run["steps"] == 20 and run["elapsed_s"] == pytest.approx(30.0)
    assert run["samples"] == 64 * 20 and pd.isna(run.get("reported_tflops_per_gpu", float("nan")))


def nemo2_log(times: list[float]) -> str:
    """NeMo 2 console lines (the shape of NVIDIA-BioNeMo/bionemo-recipes#740's excerpt), one per step from 0."""
    return "".join(f"Training epoch 0, iteration {s}/100 | lr: 3e-05 | consumed_samples: {8 * (s + 1)} | "
                   f"global_batch_size: 8 | global_step: {s} | reduced_train_loss: 1.233 | "
                   f"train_step_timing in s: {t}\n" for s, t in enumerate(times))


def test_a_negative_step_time_is_joined_with_the_step_it_cancels(tmp_path):
    """A NeMo timer glitch: 13.75 s then -12.71 s, two normal steps together (1.04 s). Dropping the negative
    line and keeping its partner made the run 2.6x slower without a word; joined, the pair is one interval of
    2 steps, and the run's row and a warning say so."""
    times = [2.0, 0.5, 0.5, 0.5, 0.5, 13.75, -12.71, 0.5, 0.5, 0.5]
    log = tmp_path / "nemo.log"
    log.write_text(nemo2_log(times))
    with pytest.warns(DataWarning, match=r"step 6: a step time of -12.71 s, joined with step 5 \(13.75 s\) "
                                         r"into 1.04 s for both"):
        result = import_path(log)
    run = one_run(result)
    assert run["steps"] == 9 and run["elapsed_s"] == pytest.approx(sum(times[1:]))  # step 0 is warm-up
    assert run["samples"] == 8 * 9 and "joined with step 5" in run["extra_step_time_anomalies"]
    joined = result.steps.set_index("step").loc[6]
    assert (joined["n_steps"], joined["step_s"]) == (2, pytest.approx(1.04))
    assert 5 not in result.steps["step"].tolist() and result.skipped_total == 0


def test_a_step_far_above_the_others_is_named_and_kept(tmp_path):
    times = [2.0] + [0.5, 0.52, 0.49, 0.51, 0.5, 0.5, 5.0, 0.5, 0.51, 0.5]
    log = tmp_path / "nemo.log"
    log.write_text(nemo2_log(times))
    with pytest.warns(DataWarning, match=r"1 measured step time\(s\) far above the others .*: step 7\), kept"):
        run = one_run(import_path(log))
    assert run["elapsed_s"] == pytest.approx(sum(times[1:]))


def test_an_excerpt_from_the_middle_of_a_run_is_measured_from_its_first_line(tmp_path):
    """A torchtitan excerpt whose only line is step 1990 (its rate printed over the logging window) gave no
    run: its first record was taken for the training's first. It is past the warm-up: the rate is the
    measurement. A log from step 1 still leaves step 1 out."""
    log = tmp_path / "excerpt.log"
    log.write_text("[titan] 2025-01-15 10:00:12,345 - root - INFO - step: 1990  loss:  2.1000  "
                   "memory: 35.18GiB(44.47%)  tps: 6,941  tflops: 402.10  mfu: 40.66%\n")
    run = one_run(import_path(log, {"gpus": 8}))
    assert run["tokens_per_s"] == pytest.approx(8 * 6941) and run["reported_mfu"] == pytest.approx(0.4066)
    times = [900.0, 120.0, 121.0]
    from_start = tmp_path / "nanogpt.log"
    from_start.write_text("".join(f"iter {i}: loss 4.0, time {t}ms, mfu 30.00%\n" for i, t in enumerate(times)))
    run = one_run(import_path(from_start))
    assert run["steps"] == 2 and run["elapsed_s"] == pytest.approx(0.241)


def megatron_lines(milliseconds: list[float], interval: int = 10) -> str:
    """Megatron-LM iteration lines (the shape of tests/data/importers/megatron_lm.log): iteration 1 alone, then
    every ``interval`` iterations, each with its mean time per iteration; 64 samples an iteration."""
    iterations = [1] + [interval * k for k in range(1, len(milliseconds))]
    return "".join(f" iteration {i:8d}/    1000 | consumed samples: {64 * i:12d} | elapsed time per iteration (ms): "
                   f"{ms:.1f} | global batch size:    64 | lm loss: 7.0E+00 |\n"
                   for i, ms in zip(iterations, milliseconds))


def test_a_negative_megatron_interval_is_joined_not_skipped(tmp_path):
    """Megatron's mean time per iteration over the lines at 30 and 40: 2.27 s, then -0.27 s. The negative line
    was skipped as unreadable, and the line after it, whose interval then started nowhere, with it. Joined:
    the 20 iterations from 21 to 40 took 22.7 - 2.7 = 20 s; with 10 s each for 11..20 and 41..50 the window of
    iterations 11 to 50 took 40 s (iteration 1 and the line at 10 that averages it are warm-up)."""
    log = tmp_path / "megatron.log"
    log.write_text(megatron_lines([9876.5, 1500.0, 1000.0, 2270.0, -270.0, 1000.0]))
    with pytest.warns(DataWarning, match=r"step 40: a step time of -2.7 s, joined with step 30 \(22.7 s\)"):
        result = import_path(log, {"seq_len": 2048})
    run = one_run(result)
    assert result.skipped_total == 0 and run["steps"] == 40 and run["elapsed_s"] == pytest.approx(40.0)
    assert run["samples"] == 64 * 40 and run["extra_steps_set_aside"] == 0


def test_an_interval_far_above_the_others_is_named_by_its_time_per_step(tmp_path):
    """Lines of 10 iterations each: the one at 70 took 5 s an iteration, the others about 1 s (Q3 + 3 IQR of
    the means per iteration is 1.035 s). Only lines of one step were checked before."""
    means = [9876.5, 1500.0] + [1000.0, 1010.0, 990.0, 1000.0, 1005.0, 5000.0, 995.0, 1000.0, 1010.0, 1000.0]
    log = tmp_path / "megatron.log"
    log.write_text(megatron_lines(means))
    with pytest.warns(DataWarning, match=r"1 measured step time\(s\) far above the others .*: step 70\), kept"):
        run = one_run(import_path(log, {"seq_len": 2048}))
    assert run["elapsed_s"] == pytest.approx(10 * sum(means[2:]) / 1000)


def test_the_steps_a_throughput_leaves_out_are_counted(tmp_path):
    """-0.9 s after a step of 0.2 s: the pair still took no time, so step 4 is set aside; the throughput is that
    of the other 5 measured steps (2.2 s for 5 x 8 samples), and the run says 1 step was set aside."""
    times = [2.0, 0.5, 0.5, 0.2, -0.9, 0.5, 0.5]
    log = tmp_path / "nemo.log"
    log.write_text(nemo2_log(times))
    with pytest.warns(DataWarning, match=r"step 4: a step time of -0.9 s that step 3 \(0.2 s\) does not make up "
                                         r"for, set aside"):
        result = import_path(log)
    run = derive(result.runs).iloc[0]
    assert run["extra_steps_set_aside"] == 1 and run["steps"] == 5 and run["elapsed_s"] == pytest.approx(2.2)
    assert run["samples_per_s"] == pytest.approx(5 * 8 / 2.2)
    assert "throughput: measured without 1 step(s) whose times could not be used (extra_steps_set_aside)" \
        in run["notes"].split("; ")


def test_megatron_energy_of_a_record_widened_over_a_lone_first_iteration(tmp_path):
    """Recent Megatron-LM logs iteration 1 on its own, then every 2: the line of iteration 3 averages iterations 1
    to 3, so its record is widened to 3 iterations. Its energy is J/iter/GPU x 3 iterations x 8 GPUs (it was left
    at 2 iterations' worth, which read the power a third low)."""
    lines = [re.sub(r"iteration +292/", "iteration        1/", ENERGY_LINES[0]),
             re.sub(r"iteration +293/", "iteration        3/", ENERGY_LINES[1]),
             re.sub(r"iteration +294/", "iteration        5/", ENERGY_LINES[2])]
    log = tmp_path / "widened.log"
    log.write_text("\n".join(lines) + "\n")
    (log.parent / "widened.log.trainperf.yaml").write_text("gpus: 8\nseq_len: 4096\nwarmup_steps: 0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = import_path(log)
    measured = result.steps[~result.steps["warmup"]]
    assert measured["energy_j"].tolist() == pytest.approx([3 * 1982.6 * 8, 2 * 1980.1 * 8])
    row = derive(result.runs).iloc[0]
    # power = energy / (8 GPUs x time): 3 x 3.0372 s and 2 x 3.0352 s at the printed 652.8 and 652.5 W
    assert row["power_w_per_gpu"] == pytest.approx((3 * 1982.6 + 2 * 1980.1) / (3 * 3.0372 + 2 * 3.0352))
    assert row["power_w_per_gpu"] == pytest.approx((652.8 * 3 * 3.0372 + 652.5 * 2 * 3.0352) / (3 * 3.0372 + 2 * 3.0352),
                                                   abs=0.1)
