"""FLOPs-per-token conventions against hand calculations and the papers' forms."""

import math

import pytest

from trainperf import flops


def test_six_n_is_seed_001_llama_and_qwen():
    # seed 001: "Llama 3.1 8B: 6 x 8.0B = 48 billion FLOPs per token", "Qwen 2.5 7B: 6 x 7.6B = 45.6 billion"
    assert flops.six_n(8.0e9) == pytest.approx(48e9)
    assert flops.six_n(7.6e9) == pytest.approx(45.6e9)


def test_palm_adds_attention_over_the_sequence():
    # MPT-7B: 6 * 6,658,859,008 + 12 * 32 * 4096 * 2048 = 39,953,154,048 + 3,221,225,472
    assert flops.palm(6_658_859_008, 32, 4096, 2048) == 43_174_379_520


def test_megatron_deepspeed_expands_to_its_three_terms():
    # 72 L h^2 (1 + T/6h + V/16Lh) = 72 L h^2 + 12 L h T + 4.5 h V
    L, h, T, V = 96, 12288, 2048, 51200  # GPT-3 175B as in Narayanan et al. 2021, table 1
    expanded = 72 * L * h**2 + 12 * L * h * T + 4.5 * h * V
    assert flops.megatron_deepspeed(L, h, T, V) == pytest.approx(expanded, rel=1e-12)
    # with recomputation (x4/3) it is eq. 3 of the paper per token: 96 L h^2 (1 + T/6h + V/16Lh)
    eq3 = 96 * L * h**2 * (1 + T / (6 * h) + V / (16 * L * h))
    assert flops.megatron_deepspeed(L, h, T, V) * flops.RECOMPUTE_FACTOR == pytest.approx(eq3, rel=1e-12)


def test_megatron_dense_gpt_halves_causal_attention_and_counts_logits_six_times():
    L, h, T, V = 96, 12288, 2048, 51200
    assert flops.megatron(L, h, T, V) == pytest.approx(72 * L * h**2 + 6 * L * h * T + 6 * h * V, rel=1e-12)


def test_megatron_gqa_swiglu_and_moe_top_k_follow_num_floating_point_operations():
    # Mixtral 8x7B as Megatron-LM runs it: 32 layers, h 4096, 32 heads, 8 query groups, SwiGLU with
    # ffn_hidden_size 14336, 8 experts with top-2 routing, vocab 32000, seq 4096. Written out per token from
    # training.py: MLP 6·h·(3·14336·2)·L, attention projections 6·L·h·(2h + 2h·8/32), core attention 6·L·T·h,
    # logits 6·h·V.
    L, h, T, V = 32, 4096, 4096, 32000
    expected = 6 * h * 3 * 14336 * 2 * L + 6 * L * h * (2 * h + 2 * h * 8 / 32) + 6 * L * T * h + 6 * h * V
    got = flops.megatron(L, h, T, V, n_heads=32, num_query_groups=8, ffn_hidden_size=14336, swiglu=True,
                         num_experts=8, moe_router_topk=2)
    assert got == pytest.approx(expected, rel=1e-12)
    # about 6 x the 12.9e9 active parameters plus attention: far below 6 x 46.7e9
    assert 6 * 12.9e9 < got < 6 * 20e9


def test_llmc_reproduces_the_mfu_llmc_printed_for_gpt2_1558m():
    # llm.c GPT-2 1558M on 8 H100 (karpathy/llm.c discussion 677; tests/data/importers/README.md):
    # num_parameters 1557686400, 48 layers, C 1600, T 1024; B=16 x 8 processes x 8 accumulation steps;
    # step 10 took 2749.40 ms and printed "47.3% bf16 MFU" against llm.c's H100 bf16 peak (llmc/mfu.h:
    # Hopper 756 TFLOP/s scaled by 528/456 tensor cores and 1830/1620 MHz for "NVIDIA H100 80GB HBM3")
    peak = 756e12 * (528 / 456) * (1830 / 1620)
    per_token = flops.llmc(1_557_686_400, 48, 1600, 1024)
    per_gpu = per_token * 16 * 1024 * 8 / 2.74940
    assert per_gpu / peak == pytest.approx(0.473, abs=0.0005)
    # the PaLM form (twice the attention term) would print 48.6 %
    assert flops.palm(1_557_686_400, 48, 1600, 1024) * 16 * 1024 * 8 / 2.74940 / peak > 0.48


def test_torchtitan_leaves_the_token_embedding_out():
    # 6·(N − V·d) + 12·L·d·T, from torchtitan/models/utils.py (untied embeddings)
    assert flops.torchtitan(8.03e9, 32, 4096, 8192, 128256) == pytest.approx(
        6 * (8.03e9 - 128256 * 4096) + 12 * 32 * 4096 * 8192)


def test_active_parameters_replace_the_total_for_every_parameter_based_convention():
    row = {"n_params": 46.7e9, "n_active_params": 12.9e9, "n_layers": 32, "d_model": 4096, "seq_len": 4096,
           "vocab_size": 32000}
    for name, expected in [("6n", 6 * 12.9e9), ("palm", flops.palm(12.9e9, 32, 4096, 4096)),
                           ("llmc", flops.llmc(12.9e9, 32, 4096, 4096)),
                           ("torchtitan", flops.torchtitan(12.9e9, 32, 4096, 4096, 32000))]:
        assert flops.flops_per_token(row, name) == (pytest.approx(expected), name)
    assert flops.missing_inputs({"n_active_params": 1e9}, "6n") == []


def test_default_is_palm_when_the_shape_is_known_else_6n():
    shaped = {"n_params": 1e9, "n_layers": 24, "d_model": 2048, "seq_len": 2048}
    assert flops.flops_per_token(shaped) == (flops.palm(1e9, 24, 2048, 2048), "palm")
    assert flops.flops_per_token({"n_params": 1e9, "n_layers": math.nan}) == (6e9, "6n")


def test_row_convention_and_override():
    row = {"n_params": 1e9, "n_layers": 24, "d_model": 2048, "seq_len": 2048, "flops_convention": "6n"}
    assert flops.flops_per_token(row) == (6e9, "6n")
    assert flops.flops_per_token({**row, "flops_per_token": 7.5e9}) == (7.5e9, "given")


def test_missing_inputs_leave_nan_and_name_them():
    row = {"n_layers": 24, "d_model": 2048, "seq_len": 2048, "flops_convention": "megatron"}
    value, used = flops.flops_per_token(row)
    assert math.isnan(value) and used == "megatron"
    assert flops.missing_inputs(row, "megatron") == ["vocab_size"]


def test_unknown_convention_is_an_error():
    with pytest.raises(ValueError, match="unknown FLOPs convention"):
        flops.flops_per_token({"n_params": 1e9}, "chinchilla")


# --- forms of a tool's formula across its releases -----------------------------------------------------------

def test_megatron_2024_reproduces_core_r0_8_printed_throughput():
    # fixstars/mdk doc/docs/how-to-guides/trainer/pretrain-megatron-lm.md: Megatron-LM core_r0.8.0, 2 nodes x 8 GPUs,
    # its pretrain_7b_mpi.patch: 30 layers, h 4096, 32 heads, seq 4096, SwiGLU (ffn 10880), GPT-2 vocab padded to
    # 50304, global batch 1024. Printed: 14234.7 ms -> 799.6, 14197.6 ms -> 801.7, 14351.0 ms -> 793.1 TFLOP/s/GPU.
    L, h, T, V = 30, 4096, 4096, 50304
    # core_r0.8.0 training.py, per token: 12·L·h²·((1 + g/n + s/h)·q/h + F/h·k·3/2 + V/(2·L·h)), g = n, q = h, k = 1
    core_r08 = 12 * L * h**2 * ((1 + 1 + T / h) + 10880 / h * 1.5 + V / (2 * L * h))
    per_token = flops.megatron_2024(L, h, T, V, n_heads=32, swiglu=True)
    assert per_token == pytest.approx(core_r08, rel=1e-12)
    for ms, printed in [(14234.7, 799.6), (14197.6, 801.7), (14351.0, 793.1)]:
        assert per_token * 1024 * T / (ms / 1000 * 16 * 1e12) == pytest.approx(printed, abs=0.05)
    # today's form halves the attention scores (the s/h term: 12·L·h·T of them, half left out): 7 % fewer FLOPs,
    # so that log's figures read 7.5 % high against it
    assert flops.megatron(L, h, T, V, n_heads=32, swiglu=True) / per_token == pytest.approx(
        1 - 6 * L * h * T / core_r08, rel=1e-12)


def test_megatron_2023_is_the_first_form_with_a_4h_mlp_whatever_the_arguments():
    # 2748e7c7d4 (core_v0.5.0): 60·B·s·L·h²·(1 + g/(5n) + s/(5h) + V/(10·L·h)), per token
    L, h, T, V = 24, 2048, 2048, 50304
    expected = 60 * L * h**2 * (1 + 4 / (5 * 16) + T / (5 * h) + V / (10 * L * h))
    assert flops.megatron_2023(L, h, T, V, n_heads=16, num_query_groups=4) == pytest.approx(expected, rel=1e-12)
    row = {"n_layers": L, "d_model": h, "seq_len": T, "vocab_size": V, "n_heads": 16, "num_query_groups": 4,
           "ffn_hidden_size": 5504, "swiglu": True, "num_experts": 8, "head_dim": 256}
    assert flops.flops_per_token(row, "megatron-2023") == (pytest.approx(expected, rel=1e-12), "megatron-2023")


def test_megatron_counts_attention_over_heads_times_kv_channels():
    # training.py (core_v0.12.0 on): query_projection_size = kv_channels·n_heads; per token and layer
    # 6·(h·(q + 2·q·g/n) + q·h) for the projections and 6·q·T for the (halved) scores
    L, h, T, V, n, g, kv = 28, 2048, 4096, 151936, 32, 8, 128
    q = kv * n  # 4096 = 2·h
    mlp = 6 * h * 2 * 4 * h * L
    expected = mlp + L * 6 * (h * (q + 2 * kv * g) + q * h) + 6 * L * q * T + 6 * h * V
    got = flops.megatron(L, h, T, V, n_heads=n, head_dim=kv, num_query_groups=g)
    assert got == pytest.approx(expected, rel=1e-12)
    # the 2024 form does not halve the scores
    assert flops.megatron_2024(L, h, T, V, n_heads=n, head_dim=kv, num_query_groups=g) == \
        pytest.approx(expected + 6 * L * q * T, rel=1e-12)


def test_megatron_2024_experts_are_ffn_hidden_size_wide():
    # core_r0.8.0 to core_v0.11.0 multiply ffn_hidden_size by the top-k; moe_ffn_hidden_size is not read
    L, h, T, V = 32, 4096, 4096, 32000
    moe = dict(n_heads=32, num_query_groups=8, ffn_hidden_size=14336, swiglu=True, num_experts=8, moe_router_topk=2)
    dense_width = flops.megatron_2024(L, h, T, V, **moe)
    assert flops.flops_per_token({"n_layers": L, "d_model": h, "seq_len": T, "vocab_size": V, **moe,
                                  "moe_ffn_hidden_size": 1024}, "megatron-2024")[0] == pytest.approx(dense_width)
    assert dense_width - flops.megatron(L, h, T, V, **moe) == pytest.approx(6 * L * T * h)


# Qwen3 32B in torchtitan (pytorch/torchtitan#1690): 64 layers, dim 5120, 64 heads of 128, 8 KV heads, MLP 25600,
# vocabulary 151936, untied. torchtitan's own count, every parameter: per layer wq 5120·8192, wk and wv 5120·1024,
# wo 8192·5120, q/k norms 2·128, MLP 3·5120·25600, two norms 2·5120; token embedding and output head 151936·5120
# each; final norm 5120.
QWEN3_32B = 64 * (5120 * 8192 + 2 * 5120 * 1024 + 8192 * 5120 + 2 * 128 + 3 * 5120 * 25600 + 2 * 5120) \
    + 2 * 151936 * 5120 + 5120


def test_torchtitan_2024_reproduces_the_qwen3_32b_tflops_torchtitan_printed_before_head_dim():
    # the line printed on 2025-09-11 (#1690): "tps: 1,874  tflops: 389.87  mfu: 39.42%" at seq_len 4096, H100;
    # torchtitan then counted attention as 12·L·H·(dim // H)·T, 64·80 = 5120 wide
    assert QWEN3_32B == 32_762_123_264
    per_token = flops.torchtitan_2024(QWEN3_32B, 64, 5120, 4096, 151936, n_heads=64)
    assert per_token == 6 * (QWEN3_32B - 151936 * 5120) + 12 * 64 * 64 * 80 * 4096
    assert per_token * 1874 / 1e12 == pytest.approx(389.87, abs=0.1)  # tps is printed whole: 1874 ± 0.5
    assert per_token * 1874 / 989e12 == pytest.approx(0.3942, abs=2e-4)  # against torchtitan's H100 peak
    # since 5a090f21e (v0.2.1) the attention term is 12·L·H·head_dim·T, 64·128 = 8192 wide: 4.6 % more FLOPs
    today = flops.torchtitan(QWEN3_32B, 64, 5120, 4096, 151936, n_heads=64, head_dim=128)
    assert today == 6 * (QWEN3_32B - 151936 * 5120) + 12 * 64 * 64 * 128 * 4096
    assert today / per_token == pytest.approx(1 + 12 * 64 * 64 * (128 - 80) * 4096 / per_token, rel=1e-12)


def test_torchtitan_with_tied_embeddings_leaves_nothing_out():
    # Qwen3 0.6B (tied): torchtitan's FLOPs are 6 x its printed count whether that count left the shared embedding
    # out (up to v0.2.2: nparams - nparams_embedding) or counts it once (4ed3c5363): nothing more is subtracted
    n, L, d, T, V = 440_000_000, 28, 1024, 4096, 151936
    assert flops.torchtitan(n, L, d, T, V, n_heads=16, head_dim=128, tied_embeddings=True) == \
        6 * n + 12 * L * 16 * 128 * T
    assert flops.torchtitan_2024(n, L, d, T, V, n_heads=16, tied_embeddings=True) == 6 * n + 12 * L * 16 * 64 * T


def test_forms_list_a_tools_conventions_newest_first():
    assert flops.forms("megatron-2024") == ("megatron", "megatron-2024", "megatron-2023")
    assert flops.forms("torchtitan") == ("torchtitan", "torchtitan-2024")
    assert flops.forms("llmc") == ("llmc",)
    assert set(flops.FORMULAS) == set(flops.CONVENTIONS) == set(flops.REQUIRES)
