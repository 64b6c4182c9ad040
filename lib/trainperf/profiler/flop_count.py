"""The model's size and FLOPs, from the model itself, where the configuration does not give them: the
parameter count, and PyTorch's FLOP counter over the first step for a model other than a decoder-only
transformer, which the per-token FLOPs conventions describe (docs/profiler.md, "FLOPs that fit the model").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any


DECODER_ONLY_MODEL_TYPES: frozenset[str] = frozenset({
    "bloom", "codegen", "cohere", "deepseek_v2", "deepseek_v3", "falcon", "gemma", "gemma2", "gemma3_text", "glm",
    "gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gptj", "granite", "llama", "mistral", "mixtral", "mpt",
    "nemotron", "olmo", "olmo2", "opt", "phi", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "stablelm",
    "starcoder2"})
"""``model_type`` of the transformers configurations of decoder-only language models."""
NOT_DECODER_ONLY = ("Transformer", "TransformerDecoderLayer", "TransformerDecoder")
"""torch modules of an encoder-decoder (cross-attention): ``nn.Transformer`` and its decoder layers."""


def needs_counting(model: Any, config: Mapping[str, Any]) -> bool:
    """Whether the FLOPs of ``model`` (under DDP, its module) must be counted: ``config`` gives none and
    the model is not a decoder-only transformer."""
    if any(key in config for key in ("flops_convention", "flops_per_token", "flops_per_sample")):
        return False
    return not decoder_only_transformer(getattr(model, "module", model))


def decoder_only_transformer(model: Any) -> bool:
    """Whether ``model`` is a decoder-only transformer, by its transformers configuration or else its module
    tree, which cannot show a causal mask: an encoder with a vocabulary head passes."""
    modules = list(model.modules()) if hasattr(model, "modules") else []
    config = next((m.config for m in modules if hasattr(getattr(m, "config", None), "model_type")), None)
    if config is not None:
        if getattr(config, "is_encoder_decoder", False):
            return False
        return config.model_type in DECODER_ONLY_MODEL_TYPES or bool(getattr(config, "is_decoder", False))
    from torch import nn

    names = [type(m).__name__ for m in modules]
    if any(n in NOT_DECODER_ONLY or "Cross" in n for n in names):
        return False
    vocabularies = {m.num_embeddings for m in modules if isinstance(m, nn.Embedding)}
    linears = [m for m in modules if isinstance(m, nn.Linear)]
    attention = any(isinstance(m, nn.MultiheadAttention) or n.endswith(("Attention", "Attn"))
                    for m, n in zip(modules, names))
    return attention and bool(linears) and linears[-1].out_features in vocabularies


def parameter_counts(model: Any) -> dict[str, float] | None:
    """``{"n_params": each parameter once, "extra_trainable_params": those that require gradients}`` (under FSDP2
    at their full size); None under FSDP1, whose flattened shards do not add up to the model. Of a decoder-only
    transformer, whose FLOPs PaLM's 6·N gives, ``n_params`` counts what a matmul multiplies, as nanoGPT's
    ``get_num_params()`` does: not the embedding tables only looked up (learned positions, a token embedding not
    tied to the output layer)."""
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return None
    parameters = list(model.parameters())
    looked_up: set[int] = set()
    if decoder_only_transformer(getattr(model, "module", model)):
        held = [(isinstance(m, nn.Embedding), id(p)) for m in model.modules() for p in m.parameters(recurse=False)]
        looked_up = {i for lookup, i in held if lookup} - {i for lookup, i in held if not lookup}
    return {"n_params": float(sum(p.numel() for p in parameters if id(p) not in looked_up)),
            "extra_trainable_params": float(sum(p.numel() for p in parameters if p.requires_grad))}


class StepFlopCounter:
    """Counts the FLOPs run inside it (``total``), attention on the math backend. A failure of the counter's
    own is kept in ``error``, never raised: the step it counts goes on."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._counter: Any = None
        self.error: str | None = None

    def __enter__(self) -> StepFlopCounter:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.utils.flop_counter import FlopCounterMode

        try:
            self._counter = FlopCounterMode(display=False)
            self._stack.enter_context(sdpa_kernel(SDPBackend.MATH))
            self._stack.enter_context(self._counter)
        except Exception as exc:
            self._failed(exc)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stack.close()
        except Exception as error:
            self._failed(error)

    def _failed(self, exc: Exception) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            self._stack.close()

    @property
    def total(self) -> int:
        """FLOPs counted (forward, backward and optimizer of this rank); 0 after an error."""
        return 0 if self.error is not None else int(self._counter.get_total_flops())

    def per_sample(self, samples: Any) -> float | str:
        """The FLOPs counted per sample, or why there are none."""
        samples = float(samples) if samples is not None else 0.0
        if samples > 0 and self.total > 0:
            return self.total / samples
        return (f"the FLOP counter failed: {self.error}" if self.error else
                "the FLOPs of a step are counted per sample, and the first step gave no samples= to step()"
                if samples <= 0 else "the first step ran no operation the FLOP counter counts (matmul, convolution)")
