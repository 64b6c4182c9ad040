"""Model FLOPs per token of a decoder-only transformer, forward + backward.

Every convention counts a multiply-add as 2 FLOPs and the backward pass as
twice the forward, and is named after the tool whose printed figures it
reproduces. ``N`` is ``n_active_params`` where given (the parameters a token
uses in a mixture-of-experts model), else ``n_params``; ``L`` layers, ``d``
(``h``) width, ``T`` sequence length, ``V`` vocabulary.

``6n``
    ``6 · N``. Kaplan et al. 2020 ("Scaling Laws for Neural Language
    Models", sec. 2.1). Ignores attention scores; the only choice when the
    architecture is unknown.
``palm``
    ``6 · N + 12 · L · d · T``. Chowdhery et al. 2022 (PaLM), appendix B:
    the second term is the attention score and value matmuls (``Q·Kᵀ`` and
    ``A·V``) over ``T`` tokens, causal mask not halved. nanoGPT's
    ``estimate_mfu`` and MosaicML llm-foundry use this form. The default.
``megatron``
    Megatron-LM's ``num_floating_point_operations``
    (``megatron/training/training.py``), per token, for a standard
    transformer: ``6·h·(E·F·L_dense + E·F_moe·k·L_moe) + 6·L·h·(2h + 2h·g/n)
    + 6·L·T·h + 6·h·V``, with ``E`` = 3 for a gated (SwiGLU) MLP else 2, ``F``
    = ``ffn_hidden_size`` (default ``4h``, with SwiGLU ``⌊8h/3 / 64⌋·64`` as
    Megatron-LM sets it), ``g/n`` = ``num_query_groups / n_heads`` (1 without
    grouped-query attention), and with ``num_experts`` every layer a
    mixture-of-experts layer routing each token to ``k`` =
    ``moe_router_topk`` (default 2) experts of width ``F_moe`` =
    ``moe_ffn_hidden_size`` (default ``F``). The causal mask halves the
    attention-score term; the logit layer counts ``6·h·V``. Its
    ``throughput per GPU (TFLOP/s/GPU)`` is these FLOPs over the iteration
    time and the world size.
``megatron-deepspeed``
    Narayanan et al. 2021 eq. 3 with three passes instead of four, as the
    throughput calculator of Megatron-DeepSpeed computes it (``24 · 3 · B ·
    s · l · h² · (…)``): ``72 · L · h² · (1 + T / (6h) + V / (16 · L · h))``
    per token. Attention scores are not halved (``12·L·T·h``) and the logit
    layer gets ``4.5·h·V``. (This was trainperf's ``megatron`` before
    Megatron-LM's own formula was added.)
``torchtitan``
    ``6 · (N − V·d) + 12 · L · d · T``: torchtitan's
    ``get_dense_model_nparams_and_flops`` (``torchtitan/models/utils.py``)
    leaves the token-embedding parameters out of the matmul count (untied
    embeddings) and does not halve causal attention.
``llmc``
    ``6 · N + 6 · L · d · T``: llm.c's ``gpt2_estimate_mfu``
    (``train_gpt2.cu``), all parameters (the tied embedding is the logit
    matmul) and half PaLM's attention term.

Hardware FLOPs (HFU) count activation recomputation: one more forward pass,
so ``4/3`` of the model FLOPs (forward 1 + backward 2 + recomputed forward 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

CONVENTIONS: tuple[str, ...] = ("6n", "palm", "megatron", "megatron-deepspeed", "torchtitan", "llmc", "counted")

FORMULAS: dict[str, str] = {
    "6n": "6·N — 6 FLOPs per parameter per token, forward + backward (Kaplan et al. 2020); attention ignored",
    "palm": "6·N + 12·L·d·T — PaLM appendix B (Chowdhery et al. 2022): attention scores over T tokens "
            "included, causal mask not halved",
    "megatron": "Megatron-LM's num_floating_point_operations: causal attention halved (6·L·T·h), logits 6·h·V, "
                "grouped-query attention, SwiGLU and mixture-of-experts top-k where given",
    "megatron-deepspeed": "72·L·h²·(1 + T/6h + V/16Lh) per token — Megatron-DeepSpeed's form of Megatron-LM eq. 3 "
                          "(Narayanan et al. 2021) without activation recomputation",
    "torchtitan": "6·(N − V·d) + 12·L·d·T — torchtitan: token-embedding parameters left out",
    "llmc": "6·N + 6·L·d·T — llm.c's gpt2_estimate_mfu",
    "counted": "the FLOPs PyTorch's FLOP counter saw in one training step, per sample "
               "(StepProfiler(count_flops=True)); per token: / T; attention over the full T × T scores",
}
"""How each convention counts, in one line for the reader of a report (N: n_active_params where given)."""

RECOMPUTE_FACTOR: float = 4.0 / 3.0
"""Hardware FLOPs / model FLOPs with full activation recomputation."""
MEGATRON_DEFAULT_TOPK = 2
"""Megatron-LM's default ``--moe-router-topk``."""


def six_n(n_params: float) -> float:
    """FLOPs per token, ``6·N`` (N: parameters)."""
    return 6.0 * n_params


def palm(n_params: float, n_layers: int, d_model: int, seq_len: int) -> float:
    """FLOPs per token, PaLM appendix B: ``6·N + 12·L·d·T`` (T: sequence length in tokens)."""
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


def llmc(n_params: float, n_layers: int, d_model: int, seq_len: int) -> float:
    """FLOPs per token, llm.c's ``gpt2_estimate_mfu``: ``6·N + 6·L·d·T``."""
    return 6.0 * n_params + 6.0 * n_layers * d_model * seq_len


def torchtitan(n_params: float, n_layers: int, d_model: int, seq_len: int, vocab_size: int) -> float:
    """FLOPs per token, torchtitan: ``6·(N − V·d) + 12·L·d·T`` (token embedding left out)."""
    return 6.0 * (n_params - vocab_size * d_model) + 12.0 * n_layers * d_model * seq_len


def megatron_deepspeed(n_layers: int, d_model: int, seq_len: int, vocab_size: int) -> float:
    """FLOPs per token, Megatron-DeepSpeed's form of Megatron-LM eq. 3 with
    three passes: ``72·L·h²·(1 + T/(6h) + V/(16·L·h))``."""
    h = float(d_model)
    return 72.0 * n_layers * h * h * (1.0 + seq_len / (6.0 * h) + vocab_size / (16.0 * n_layers * h))


def megatron(n_layers: int, d_model: int, seq_len: int, vocab_size: int, *, n_heads: float = math.nan,
             num_query_groups: float = math.nan, ffn_hidden_size: float = math.nan, swiglu: bool = False,
             num_experts: float = math.nan, moe_router_topk: float = math.nan,
             moe_ffn_hidden_size: float = math.nan) -> float:
    """FLOPs per token, Megatron-LM's ``num_floating_point_operations`` for a
    standard (no MLA, no MTP, no shared experts) transformer; NaN arguments
    take Megatron-LM's defaults (see the module notes)."""
    h = float(d_model)
    if not _known(ffn_hidden_size):
        ffn_hidden_size = int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h
    groups = num_query_groups / n_heads if _known(num_query_groups) and _known(n_heads) else 1.0
    expansion = 3.0 if swiglu else 2.0
    if _known(num_experts) and num_experts > 1:
        topk = moe_router_topk if _known(moe_router_topk) else MEGATRON_DEFAULT_TOPK
        expert = moe_ffn_hidden_size if _known(moe_ffn_hidden_size) else ffn_hidden_size
        mlp = expansion * expert * topk * n_layers
    else:
        mlp = expansion * ffn_hidden_size * n_layers
    attention = n_layers * h * (2 * h + 2 * h * groups)
    return 6.0 * h * mlp + 6.0 * attention + 6.0 * n_layers * seq_len * h + 6.0 * h * vocab_size


REQUIRES: dict[str, tuple[str, ...]] = {
    "6n": ("n_params",),
    "palm": ("n_params", "n_layers", "d_model", "seq_len"),
    "megatron": ("n_layers", "d_model", "seq_len", "vocab_size"),
    "megatron-deepspeed": ("n_layers", "d_model", "seq_len", "vocab_size"),
    "torchtitan": ("n_params", "n_layers", "d_model", "seq_len", "vocab_size"),
    "llmc": ("n_params", "n_layers", "d_model", "seq_len"),
    "counted": ("flops_per_sample",),
}
"""Run columns each convention needs (``n_active_params`` stands in for
``n_params`` where given)."""
MEGATRON_OPTIONAL: tuple[str, ...] = ("n_heads", "num_query_groups", "ffn_hidden_size", "swiglu", "num_experts",
                                      "moe_router_topk", "moe_ffn_hidden_size")
"""Run columns the ``megatron`` convention uses where given."""


def default_convention(row: Mapping[str, Any]) -> str:
    """The convention used when a run names none: PaLM when layers, width and
    sequence length are known, else ``counted`` when the FLOPs of a step were
    counted (a model no formula describes), else ``6n``."""
    if all(_known(row.get(c)) for c in REQUIRES["palm"][1:]):
        return "palm"
    return "counted" if _known(row.get("flops_per_sample")) else "6n"


def flops_per_token(row: Mapping[str, Any], convention: str | None = None) -> tuple[float, str]:
    """Model FLOPs per token of one run and the convention that produced them.

    ``row`` holds canonical run columns. A ``flops_per_token`` value in the row
    wins (convention ``given``) unless ``convention`` is named; else
    ``convention``, else the row's ``flops_convention``, else
    :func:`default_convention`. The value is NaN when inputs the convention
    needs are missing (see :func:`missing_inputs`).
    """
    given = row.get("flops_per_token")
    if _known(given) and convention is None:
        return float(given), "given"
    name = convention or row.get("flops_convention")
    name = str(name).lower() if _known(name) else default_convention(row)
    if name not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {name!r}; known: {', '.join(CONVENTIONS)}")
    if missing_inputs(row, name):
        return math.nan, name
    if name == "counted":  # per sample; per token only where a sample has a length
        return float(row["flops_per_sample"]) / _number(row.get("seq_len")), name
    n = row["n_active_params"] if _known(row.get("n_active_params")) else row.get("n_params")
    shape = (row["n_layers"], row["d_model"], row["seq_len"]) if name != "6n" else ()
    if name == "6n":
        return six_n(n), name
    if name == "palm":
        return palm(n, *shape), name
    if name == "llmc":
        return llmc(n, *shape), name
    if name == "torchtitan":
        return torchtitan(n, *shape, row["vocab_size"]), name
    if name == "megatron-deepspeed":
        return megatron_deepspeed(*shape, row["vocab_size"]), name
    optional = {key: _number(row.get(key)) for key in MEGATRON_OPTIONAL if key != "swiglu"}
    return megatron(*shape, row["vocab_size"], swiglu=_known(row.get("swiglu")) and bool(row["swiglu"]),
                    **optional), name


def missing_inputs(row: Mapping[str, Any], convention: str) -> list[str]:
    """Run columns that ``convention`` needs and ``row`` lacks."""
    return [c for c in REQUIRES[convention]
            if not _known(row.get(c)) and not (c == "n_params" and _known(row.get("n_active_params")))]


def _number(value: object) -> float:
    return float(value) if _known(value) else math.nan  # type: ignore[arg-type]


def _known(value: object) -> bool:
    if value is None or value is pd.NA:
        return False
    try:
        return not math.isnan(value)  # type: ignore[arg-type]
    except TypeError:
        return str(value) != ""
