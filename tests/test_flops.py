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
