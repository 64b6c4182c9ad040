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


def test_megatron_expands_to_its_three_terms():
    # 72 L h^2 (1 + T/6h + V/16Lh) = 72 L h^2 + 12 L h T + 4.5 h V
    L, h, T, V = 96, 12288, 2048, 51200  # GPT-3 175B as in Narayanan et al. 2021, table 1
    expanded = 72 * L * h**2 + 12 * L * h * T + 4.5 * h * V
    assert flops.megatron(L, h, T, V) == pytest.approx(expanded, rel=1e-12)
    # with recomputation (x4/3) it is eq. 3 of the paper per token: 96 L h^2 (1 + T/6h + V/16Lh)
    eq3 = 96 * L * h**2 * (1 + T / (6 * h) + V / (16 * L * h))
    assert flops.megatron(L, h, T, V) * flops.RECOMPUTE_FACTOR == pytest.approx(eq3, rel=1e-12)


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
