"""Model FLOPs per token of a decoder-only transformer, forward + backward.

Three conventions, all counting a multiply-add as 2 FLOPs and the backward
pass as twice the forward:

``6n``
    ``6 · N``. Kaplan et al. 2020 ("Scaling Laws for Neural Language
    Models", sec. 2.1). Ignores attention scores; the only choice when the
    architecture is unknown.
``palm``
    ``6 · N + 12 · L · d · T``. Chowdhery et al. 2022 (PaLM), appendix B:
    the second term is the attention score and value matmuls (``Q·Kᵀ`` and
    ``A·V``) over a sequence of ``T`` tokens, causal mask not halved. This is
    the form MosaicML llm-foundry uses for its published MFU.
``megatron``
    Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
    GPU Clusters Using Megatron-LM"), eq. 3, per token, with its factor 96
    (four passes: activation recomputation) replaced by 72 (three passes):
    ``72 · L · h² · (1 + T / (6h) + V / (16 · L · h))``, as the throughput
    calculator of Megatron-DeepSpeed computes it (``24 · 3 · B · s · l · h² ·
    (…)``), so its printed TFLOP/s reproduce. Eq. 3 counts the logit layer
    without recomputation already (``6·B·s·h·V``), so this form gives it
    ``4.5 · h · V`` per token instead of ``6 · h · V`` (Megatron-LM's own
    ``num_floating_point_operations`` counts 6): an undercount of
    ``1.5 · h · V`` per token, 0.1 % of the total for GPT-3 175B but about
    7 % for a 12-layer, 768-wide model with a 50k vocabulary.

Hardware FLOPs (HFU) count activation recomputation: one more forward pass,
so ``4/3`` of the model FLOPs (forward 1 + backward 2 + recomputed forward 1).
"""

from __future__ import annotations

import math

CONVENTIONS: tuple[str, ...] = ("6n", "palm", "megatron")

RECOMPUTE_FACTOR: float = 4.0 / 3.0
"""Hardware FLOPs / model FLOPs with full activation recomputation."""


def six_n(n_params: float) -> float:
    """FLOPs per token, ``6·N`` (N: parameters)."""
    return 6.0 * n_params


def palm(n_params: float, n_layers: int, d_model: int, seq_len: int) -> float:
    """FLOPs per token, PaLM appendix B: ``6·N + 12·L·d·T`` (T: sequence length in tokens)."""
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


def megatron(n_layers: int, d_model: int, seq_len: int, vocab_size: int) -> float:
    """FLOPs per token, Megatron-LM eq. 3 with three passes instead of four
    (Megatron-DeepSpeed's form; see the module notes on its logit term):
    ``72·L·h²·(1 + T/(6h) + V/(16·L·h))``."""
    h = float(d_model)
    return 72.0 * n_layers * h * h * (1.0 + seq_len / (6.0 * h) + vocab_size / (16.0 * n_layers * h))


REQUIRES: dict[str, tuple[str, ...]] = {
    "6n": ("n_params",),
    "palm": ("n_params", "n_layers", "d_model", "seq_len"),
    "megatron": ("n_layers", "d_model", "seq_len", "vocab_size"),
}
"""Run columns each convention needs."""


def default_convention(row: dict) -> str:
    """The convention used when a run names none: PaLM when layers, width and
    sequence length are known, else ``6n``."""
    return "palm" if all(_known(row.get(c)) for c in REQUIRES["palm"]) else "6n"


def flops_per_token(row: dict, convention: str | None = None) -> tuple[float, str]:
    """Model FLOPs per token of one run and the convention that produced them.

    ``row`` holds canonical run columns. A ``flops_per_token`` value in the row
    wins (convention ``given``); else ``convention``, else the row's
    ``flops_convention``, else :func:`default_convention`. The value is NaN
    when inputs the convention needs are missing (see :func:`missing_inputs`).
    """
    given = row.get("flops_per_token")
    if _known(given):
        return float(given), "given"
    name = convention or row.get("flops_convention")
    name = str(name).lower() if _known(name) else default_convention(row)
    if name not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {name!r}; known: {', '.join(CONVENTIONS)}")
    if missing_inputs(row, name):
        return math.nan, name
    if name == "6n":
        return six_n(row["n_params"]), name
    if name == "palm":
        return palm(row["n_params"], row["n_layers"], row["d_model"], row["seq_len"]), name
    return megatron(row["n_layers"], row["d_model"], row["seq_len"], row["vocab_size"]), name


def missing_inputs(row: dict, convention: str) -> list[str]:
    """Run columns that ``convention`` needs and ``row`` lacks."""
    return [c for c in REQUIRES[convention] if not _known(row.get(c))]


def _known(value: object) -> bool:
    if value is None:
        return False
    try:
        return not math.isnan(value)  # type: ignore[arg-type]
    except TypeError:
        return value is not None and str(value) != ""
