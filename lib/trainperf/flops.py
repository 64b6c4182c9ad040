"""Model FLOPs per token of a decoder-only transformer, forward + backward (a multiply-add = 2 FLOPs).

Each convention is named after the tool whose printed figures it reproduces, one name per form of a formula that
changed between releases (:data:`FORMS`). The formulas, their citations and what ``N`` counts for each are in
README.md, "Metrics" (FLOPs per token). Symbols: ``N`` parameters (``n_active_params`` where given, else
``n_params``), ``L`` layers, ``d`` (``h``) width, ``T`` sequence length (tokens), ``V`` vocabulary, ``H`` attention
heads, ``q`` the width of all query heads (``H · head_dim``, else ``d``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

CONVENTIONS: tuple[str, ...] = ("6n", "palm", "megatron", "megatron-2024", "megatron-2023", "megatron-deepspeed",
                                "torchtitan", "torchtitan-2024", "llmc", "counted")

FORMS: dict[str, tuple[str, ...]] = {
    "megatron": ("megatron", "megatron-2024", "megatron-2023"),
    "torchtitan": ("torchtitan", "torchtitan-2024"),
}
"""A tool's conventions, newest first: a log's printed figures are compared under the form that reproduces them."""

FORMULAS: dict[str, str] = {
    "6n": "6·N — 6 FLOPs per parameter per token, forward + backward (Kaplan et al. 2020); attention ignored",
    "palm": "6·N + 12·L·d·T — PaLM appendix B (Chowdhery et al. 2022): attention scores over T tokens "
            "included, causal mask not halved",
    "megatron": "Megatron-LM's num_floating_point_operations since core_v0.12.0: causal attention halved "
                "(6·L·T·q), logits 6·h·V, grouped-query attention, head width (kv_channels), SwiGLU and "
                "mixture-of-experts top-k where given",
    "megatron-2024": "Megatron-LM's num_floating_point_operations of core_v0.6.0 to core_v0.11.0: causal attention "
                     "not halved (12·L·T·q), experts ffn_hidden_size wide",
    "megatron-2023": "Megatron-LM's num_floating_point_operations of core_v0.5.0: 60·L·h²·(1 + g/5H + T/5h + "
                     "V/10Lh), a 4h MLP, attention not halved",
    "megatron-deepspeed": "72·L·h²·(1 + T/6h + V/16Lh) per token — Megatron-DeepSpeed's form of Megatron-LM eq. 3 "
                          "(Narayanan et al. 2021) without activation recomputation",
    "torchtitan": "6·(N − V·d) + 12·L·H·head_dim·T — torchtitan since v0.2.1: token-embedding parameters left out "
                  "(none with tied embeddings)",
    "torchtitan-2024": "6·(N − V·d) + 12·L·d·T — torchtitan v0.1.0 to v0.2.0: token-embedding parameters left out, "
                       "attention over the width d",
    "llmc": "6·N + 6·L·d·T — llm.c's gpt2_estimate_mfu",
    "counted": "the FLOPs PyTorch's FLOP counter saw in one training step, per sample "
               "(the StepProfiler counts it for a model that is not a decoder-only transformer); per token: / T; "
               "attention over the full T × T scores",
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


def torchtitan(n_params: float, n_layers: int, d_model: int, seq_len: int, vocab_size: int, *,
               n_heads: float = math.nan, head_dim: float = math.nan, tied_embeddings: bool = False) -> float:
    """FLOPs per token, torchtitan since v0.2.1: ``6·(N − V·d) + 12·L·H·head_dim·T`` (the token embedding left out
    unless ``tied_embeddings``; ``12·L·d·T`` where ``n_heads`` or ``head_dim`` is unknown)."""
    weights = n_params if tied_embeddings else n_params - vocab_size * d_model
    return 6.0 * weights + 12.0 * n_layers * query_width(d_model, n_heads, head_dim) * seq_len


def torchtitan_2024(n_params: float, n_layers: int, d_model: int, seq_len: int, vocab_size: int, *,
                    n_heads: float = math.nan, tied_embeddings: bool = False) -> float:
    """FLOPs per token, torchtitan v0.1.0 to v0.2.0: ``6·(N − V·d) + 12·L·H·⌊d/H⌋·T`` (``12·L·d·T`` without H)."""
    head_dim = d_model // n_heads if _known(n_heads) else math.nan
    return torchtitan(n_params, n_layers, d_model, seq_len, vocab_size, n_heads=n_heads, head_dim=head_dim,
                      tied_embeddings=tied_embeddings)


def query_width(d_model: int, n_heads: float = math.nan, head_dim: float = math.nan) -> float:
    """Width of all query heads, ``n_heads · head_dim``; ``d_model`` where either is unknown (the usual width)."""
    return float(n_heads * head_dim) if _known(n_heads) and _known(head_dim) else float(d_model)


def megatron_deepspeed(n_layers: int, d_model: int, seq_len: int, vocab_size: int) -> float:
    """FLOPs per token, Megatron-DeepSpeed's form of Megatron-LM eq. 3: ``72·L·h²·(1 + T/(6h) + V/(16·L·h))``."""
    h = float(d_model)
    return 72.0 * n_layers * h * h * (1.0 + seq_len / (6.0 * h) + vocab_size / (16.0 * n_layers * h))


def megatron(n_layers: int, d_model: int, seq_len: int, vocab_size: int, *, n_heads: float = math.nan,
             head_dim: float = math.nan, num_query_groups: float = math.nan, ffn_hidden_size: float = math.nan,
             swiglu: bool = False, num_experts: float = math.nan, moe_router_topk: float = math.nan,
             moe_ffn_hidden_size: float = math.nan, causal_halved: bool = True) -> float:
    """FLOPs per token, Megatron-LM's ``num_floating_point_operations`` since core_v0.12.0 for a standard (no MLA,
    no MTP, no shared experts) transformer: MLP (dense or top-k experts), attention projections, attention scores
    (halved unless ``causal_halved`` is false) and logits; NaN arguments take Megatron-LM's defaults."""
    h = float(d_model)
    q = query_width(d_model, n_heads, head_dim)
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
    projections = 12.0 * n_layers * h * q * (1.0 + groups)
    scores = (6.0 if causal_halved else 12.0) * n_layers * seq_len * q
    return 6.0 * h * mlp + projections + scores + 6.0 * h * vocab_size


def megatron_2024(n_layers: int, d_model: int, seq_len: int, vocab_size: int, **shape: Any) -> float:
    """FLOPs per token, Megatron-LM's ``num_floating_point_operations`` of core_v0.6.0 to core_v0.11.0: attention
    scores not halved, experts ``ffn_hidden_size`` wide (that form reads no ``moe_ffn_hidden_size``)."""
    return megatron(n_layers, d_model, seq_len, vocab_size, **{**shape, "moe_ffn_hidden_size": math.nan},
                    causal_halved=False)


def megatron_2023(n_layers: int, d_model: int, seq_len: int, vocab_size: int, *, n_heads: float = math.nan,
                  num_query_groups: float = math.nan) -> float:
    """FLOPs per token, Megatron-LM's ``num_floating_point_operations`` of core_v0.5.0,
    ``60·L·h²·(1 + g/(5H) + T/(5h) + V/(10·L·h))``: the 2024 form with a ``4h`` MLP, no experts and ``q = h``."""
    return megatron_2024(n_layers, d_model, seq_len, vocab_size, n_heads=n_heads, num_query_groups=num_query_groups)


MEGATRON_SHAPE: tuple[str, ...] = ("n_heads", "head_dim", "num_query_groups", "ffn_hidden_size", "swiglu",
                                   "num_experts", "moe_router_topk", "moe_ffn_hidden_size")
"""Run columns the ``megatron`` conventions use where given."""
TORCHTITAN_SHAPE: tuple[str, ...] = ("n_heads", "head_dim", "tied_embeddings")
"""Run columns the ``torchtitan`` conventions use where given."""
_SHAPE_NEEDED = ("n_layers", "d_model", "seq_len", "vocab_size")

REQUIRES: dict[str, tuple[str, ...]] = {
    "6n": ("n_params",),
    "palm": ("n_params", "n_layers", "d_model", "seq_len"),
    **{name: _SHAPE_NEEDED for name in (*FORMS["megatron"], "megatron-deepspeed")},
    **{name: ("n_params", *_SHAPE_NEEDED) for name in FORMS["torchtitan"]},
    "llmc": ("n_params", "n_layers", "d_model", "seq_len"),
    "counted": ("flops_per_sample",),
}
"""Run columns each convention needs (``n_active_params`` stands in for ``n_params``)."""


def forms(convention: str) -> tuple[str, ...]:
    """The forms of ``convention``'s tool (:data:`FORMS`), newest first; ``(convention,)`` for a tool with one."""
    return next((family for family in FORMS.values() if convention in family), (convention,))


def default_convention(row: Mapping[str, Any]) -> str:
    """The convention of a run that names none: ``palm`` with layers, width and sequence length, else ``counted``
    where a step's FLOPs were counted (a model no formula describes), else ``6n``."""
    if all(_known(row.get(c)) for c in REQUIRES["palm"][1:]):
        return "palm"
    return "counted" if _known(row.get("flops_per_sample")) else "6n"


def flops_per_token(row: Mapping[str, Any], convention: str | None = None) -> tuple[float, str]:
    """Model FLOPs per token of one run (canonical run columns) and the convention that produced them: a given
    ``flops_per_token`` (``given``) unless ``convention`` is named; else ``convention``, the row's
    ``flops_convention`` or :func:`default_convention`. NaN where it lacks inputs (:func:`missing_inputs`)."""
    given = row.get("flops_per_token")
    if _known(given) and convention is None:
        return float(given), "given"
    name = convention or row.get("flops_convention")
    name = str(name).lower() if _known(name) else default_convention(row)
    if name not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {name!r}; known: {', '.join(CONVENTIONS)}")
    return (math.nan if missing_inputs(row, name) else _BY_NAME[name](row)), name


def _n(row: Mapping[str, Any]) -> float:
    """``N``: the active parameters where given, else all."""
    return row["n_active_params"] if _known(row.get("n_active_params")) else row["n_params"]


def _shape(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return row["n_layers"], row["d_model"], row["seq_len"]


def _shaped(function: Callable[..., float], options: tuple[str, ...],
            with_n: bool = False) -> Callable[[Mapping[str, Any]], float]:
    """A convention of the shape: ``function`` of the row's ``N`` (with ``with_n``), layers, width, sequence length,
    vocabulary and optional columns ``options`` (NaN where absent; ``swiglu`` and ``tied_embeddings`` false)."""
    return lambda row: function(*([_n(row)] if with_n else []), *_shape(row), row["vocab_size"], **{
        key: (_known(row.get(key)) and bool(row[key])) if key in ("swiglu", "tied_embeddings")
        else _number(row.get(key)) for key in options})


_BY_NAME: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "6n": lambda row: six_n(_n(row)),
    "palm": lambda row: palm(_n(row), *_shape(row)),
    "llmc": lambda row: llmc(_n(row), *_shape(row)),
    "torchtitan": _shaped(torchtitan, TORCHTITAN_SHAPE, with_n=True),
    "torchtitan-2024": _shaped(torchtitan_2024, ("n_heads", "tied_embeddings"), with_n=True),
    "megatron-deepspeed": _shaped(megatron_deepspeed, ()),
    "megatron": _shaped(megatron, MEGATRON_SHAPE),
    "megatron-2024": _shaped(megatron_2024, MEGATRON_SHAPE),  # it reads no moe_ffn_hidden_size
    "megatron-2023": _shaped(megatron_2023, ("n_heads", "num_query_groups")),
    "counted": lambda row: float(row["flops_per_sample"]) / _tokens_per_sample(row),
}
"""Each convention's FLOPs per token of a row that has the inputs it needs."""


def _tokens_per_sample(row: Mapping[str, Any]) -> float:
    """``T`` of the ``counted`` convention: ``seq_len``, else tokens / samples (NaN where neither is known)."""
    if _known(row.get("seq_len")):
        return float(row["seq_len"])
    samples = _number(row.get("samples"))
    return _number(row.get("tokens")) / samples if samples > 0 else math.nan


def missing_inputs(row: Mapping[str, Any], convention: str) -> list[str]:
    """Run columns ``convention`` needs that ``row`` lacks (``counted`` per token: ``seq_len or tokens`` too)."""
    missing = [c for c in REQUIRES[convention]
               if not _known(row.get(c)) and not (c == "n_params" and _known(row.get("n_active_params")))]
    if convention == "counted" and not missing and math.isnan(_tokens_per_sample(row)):
        missing.append("seq_len or tokens")
    return missing


def _number(value: object) -> float:
    return float(value) if _known(value) else math.nan  # type: ignore[arg-type]


def _known(value: object) -> bool:
    if value is None or value is pd.NA:
        return False
    try:
        return not math.isnan(value)  # type: ignore[arg-type]
    except TypeError:
        return str(value) != ""
