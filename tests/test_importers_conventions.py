"""A log's own FLOPs figures compared under the form of its tool's formula
that printed them: real excerpts of older Megatron-LM and torchtitan
releases (tests/data/conventions/README.md) and logs in the shape today's
releases print, with figures worked out from each release's formula."""

import json
from pathlib import Path

import pytest

from trainperf import derive, flops
from trainperf.importers import compare_reported, import_path

DATA = Path(__file__).resolve().parent / "data" / "conventions"


def compared(result) -> dict[str, object]:
    """The rows of ``compare_reported`` for one imported run, by metric."""
    return {row.metric: row for row in compare_reported(derive(result.runs)).itertuples(index=False)}


# --- Megatron-LM ---------------------------------------------------------------------------------------------

def test_a_core_r0_8_log_is_compared_under_the_form_without_causal_halving():
    # fixstars/mdk: Megatron-LM core_r0.8.0, 16 GPUs; the sidecar gives its script's shape (pretrain_7b_mpi.patch)
    result = import_path(DATA / "megatron_lm_core_r0.8_gpt7b_2nodes.log")
    figure = compared(result)["tflops_per_gpu"]
    # the window's iterations 20..100 printed 793.1 ... 807.3, time-weighted
    assert figure.convention == "megatron-2024" and not figure.flagged
    assert figure.relative_difference == pytest.approx(0, abs=2e-4)
    # trainperf's own figure keeps today's megatron form, which halves the attention scores: 7 % fewer FLOPs
    # (core_r0.8.0's per-token count, tests/test_flops.py, less half its 12·L·h·T attention scores)
    derived = derive(result.runs)
    assert derived["flops_convention_used"].iat[0] == "megatron"
    L, h, T, V = 30, 4096, 4096, 50304
    core_r08 = 12 * L * h**2 * ((1 + 1 + T / h) + 10880 / h * 1.5 + V / (2 * L * h))
    assert figure.reported / derived["tflops_per_gpu"].iat[0] == pytest.approx(
        core_r08 / (core_r08 - 6 * L * h * T), abs=5e-4)


def test_a_log_of_todays_megatron_lm_keeps_the_megatron_form_and_reads_kv_channels(tmp_path):
    # shape of Megatron-LM's argument dump and iteration line; 28 layers, h 2048, 32 heads of kv_channels 128
    # (q = 4096 = 2h), 8 query groups, 4h MLP, vocab 151936, seq 4096, 8 GPUs, global batch 64
    L, h, T, V, n, g, kv = 28, 2048, 4096, 151936, 32, 8, 128
    q = n * kv
    per_token = 6 * h * 2 * 4 * h * L + L * 6 * (h * (q + 2 * kv * g) + q * h) + 6 * L * q * T + 6 * h * V
    seconds = 2.0
    printed = per_token * 64 * T / (seconds * 8 * 1e12)
    dump = {"world_size": 8, "data_parallel_size": 8, "num_layers": L, "hidden_size": h, "num_attention_heads": n,
            "kv_channels": kv, "group_query_attention": True, "num_query_groups": g, "seq_length": T,
            "micro_batch_size": 8, "global_batch_size": 64, "padded_vocab_size": V, "bf16": True, "fp16": False}
    lines = [f"  {key} {'.' * (40 - len(key))} {value}" for key, value in dump.items()]
    lines += [f" [2025-06-01 10:00:{i:02d}] iteration {i:8d}/     100 | consumed samples: {64 * i:12d} | "
              f"elapsed time per iteration (ms): {seconds * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): "
              f"{printed:.1f} | global batch size:    64 | lm loss: 9.0E+00 |" for i in (1, 2, 3, 4)]
    log = tmp_path / "qwen_like.log"
    log.write_text("\n".join(lines) + "\n")
    result = import_path(log, {"flops_convention": "megatron"})
    assert result.runs["head_dim"].iat[0] == kv
    figure = compared(result)["tflops_per_gpu"]
    assert figure.convention == "megatron" and not figure.flagged
    assert figure.recomputed == pytest.approx(printed, rel=1e-9)


# --- torchtitan ------------------------------------------------------------------------------------------------

def test_torchtitan_model_arguments_give_the_shape_and_its_printed_count_reproduces_its_tflops():
    # auroraGPT-ANL/torchtitan (torchtitan/experiments/blendcorpus/docs/aurora.md): a 6-layer Llama 2 on 24 Intel
    # Max 1550; no sidecar: "Building ... with TransformerModelArgs(dim=4096, n_layers=6, n_heads=32, ...,
    # vocab_size=32000" gives the shape, "size: 1,476,448,256 total parameters" n_params
    path = DATA / "torchtitan_aurora_llama2_6layers.log"
    result = import_path(path)
    run = result.runs.iloc[0]
    assert (run["d_model"], run["n_layers"], run["n_heads"], run["vocab_size"]) == (4096, 6, 32, 32000)
    assert run["n_params"] == 1_476_448_256 and run["gpus"] == 24
    # step 2: tps 6,697 and tflops 62.15 = 6,697 x (6·(1,476,448,256 − 32,000·4,096) + 12·6·4,096·4,096) / 1e12
    assert flops.torchtitan(1_476_448_256, 6, 4096, 4096, 32000) * 6697 / 1e12 == pytest.approx(62.15, abs=0.005)
    figure = compared(result)["tflops_per_gpu"]
    assert figure.convention == "torchtitan" and not figure.flagged
    # the printed count includes the embeddings and the convention leaves the token embedding out itself: giving
    # the non-embedding count instead subtracts it twice
    without_embeddings = compared(import_path(path, {"n_params": 1_476_448_256 - 2 * 32000 * 4096}))
    assert without_embeddings["tflops_per_gpu"].flagged


def test_a_qwen3_line_of_torchtitan_before_head_dim_is_compared_under_the_2024_form():
    # pytorch/torchtitan#1690: Qwen3 32B on 8 H100 (2025-09-11), head_dim 128 with 64 heads (8192 = 1.6 x dim)
    figures = compared(import_path(DATA / "torchtitan_qwen3_32b_h100.log"))
    for metric in ("tflops_per_gpu", "mfu"):
        assert figures[metric].convention == "torchtitan-2024" and not figures[metric].flagged
    assert figures["tflops_per_gpu"].reported == 389.87


QWEN3_06B = {"dim": 1024, "n_layers": 28, "n_heads": 16, "n_kv_heads": 8, "vocab_size": 151936, "head_dim": 128,
             "hidden_dim": 3072, "qk_norm": True, "max_seq_len": 4096, "enable_weight_tying": True,
             "moe_enabled": False, "moe_args": {"num_experts": 8, "top_k": 1}}
"""Qwen3 0.6B as torchtitan's qwen3 flavors give it (tied embeddings)."""


def titan_log_with_json_arguments(tmp_path: Path, args: dict, n_params: int, per_token: float) -> Path:
    """A log in the shape torchtitan v0.2.1 prints: its model arguments as
    indented JSON after the Building line (torchtitan/train.py), steps every
    10 with tflops = per_token · tps."""
    head = "[rank0]:[titan] 2026-01-10 09:00:{:02d},000 - root - INFO - "
    lines = [head.format(0) + "Building 1-D device mesh with ['dp_shard'], [8]",
             head.format(0) + "CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory",
             head.format(1) + "Building qwen3 0.6Bwith " + json.dumps(args, indent=2).splitlines()[0]]
    lines += [f"[rank0]:{line}" for line in json.dumps(args, indent=2).splitlines()[1:]]
    lines += [head.format(2) + f"Model qwen3 0.6B size: {n_params:,} total parameters",
              head.format(3) + "Peak FLOPS used for computing MFU: 9.890e+14",
              head.format(4) + "Trainer is initialized with local batch size 4, global batch size 32, gradient "
                               "accumulation steps 1, sequence length 4096, total steps 40 (warmup 2)."]
    tps = 4 * 4096 / 0.5  # a step every 0.5 s, 16,384 tokens a rank a step
    for k, step in enumerate((1, 11, 21, 31)):
        lines.append(head.format(10 + 5 * k) + f"step: {step}  loss:  3.0000  grad_norm:  1.0000  memory: 20.00GiB"
                     f"(25.00%)  tps: {tps:,.0f}  tflops: {per_token * tps / 1e12:.2f}  mfu: "
                     f"{100 * per_token * tps / 9.89e14:.2f}%")
    log = tmp_path / "qwen3.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_torchtitan_arguments_printed_as_json_give_head_dim_and_tied_embeddings(tmp_path):
    # v0.2.1 and v0.2.2 print the count without the tied embedding (nparams − nparams_embedding) and count
    # 6 x that + 12·L·H·head_dim·T
    n_params = 440_000_000
    per_token = 6 * n_params + 12 * 28 * 16 * 128 * 4096
    result = import_path(titan_log_with_json_arguments(tmp_path, QWEN3_06B, n_params, per_token),
                         {"precision": "bf16"})
    run = result.runs.iloc[0]
    assert (run["d_model"], run["n_layers"], run["n_heads"], run["head_dim"], run["vocab_size"]) == \
        (1024, 28, 16, 128, 151936)
    assert bool(run["tied_embeddings"]) and run["n_params"] == n_params
    figures = compared(result)
    for metric in ("tflops_per_gpu", "mfu"):
        assert figures[metric].convention == "torchtitan" and not figures[metric].flagged
    # untied, the same figures are 6·V·d = 0.93e9 FLOPs a token too many for either form: flagged, named form kept
    untied = compared(import_path(titan_log_with_json_arguments(tmp_path, {**QWEN3_06B, "enable_weight_tying":
                                                                           False}, n_params, per_token)))
    assert untied["tflops_per_gpu"].flagged and untied["tflops_per_gpu"].convention == "torchtitan"
