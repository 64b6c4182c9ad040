"""The bench workload: a small GPT-2 style transformer (docs/bench.md, "The model") and its FLOPs per token as
PyTorch counts them; the corpus it learns, CPython's documentation (``pydoc_data.topics``) as UTF-8 bytes, the last
:data:`VAL_FRACTION` held out (docs/bench.md, "The corpus").
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainperf.profiler.flop_count import StepFlopCounter

VOCAB_SIZE: int = 256
VAL_FRACTION: float = 0.1


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the bench model. ``seq_len`` is the context length in tokens."""

    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    vocab_size: int = VOCAB_SIZE

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")

    @property
    def n_params(self) -> int:
        """Parameters (the tied LM head counted once)."""
        L, d, V, T = self.n_layers, self.d_model, self.vocab_size, self.seq_len
        return L * (12 * d * d + 4 * d) + V * d + T * d + 2 * d


MODEL_SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2, 64, 4, 64),
    "small": (4, 256, 4, 128),
    "medium": (8, 512, 8, 256),
    "large": (12, 768, 12, 512),
}
"""Named sizes: (layers, width, heads, default context in tokens). With a 256-byte vocabulary, at their default
context they hold about 0.12 M, 3.2 M, 25 M and 86 M parameters."""


def model_config(size: str, seq_len: int | None = None) -> ModelConfig:
    """The :class:`ModelConfig` of a named size; ``seq_len`` defaults to the size's own."""
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; known: {', '.join(MODEL_SIZES)}")
    n_layers, d_model, n_heads, default_seq_len = MODEL_SIZES[size]
    return ModelConfig(n_layers, d_model, n_heads, seq_len or default_seq_len)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with a causal mask."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        heads = (batch, seq, self.n_heads, width // self.n_heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln_attn = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(config)
        self.ln_mlp = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class GPT(nn.Module):
    """Decoder-only transformer: token ids (batch, seq) → logits (batch, seq, vocab)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(_init_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.shape[1]
        if seq > self.config.seq_len:
            raise ValueError(f"sequence of {seq} tokens exceeds the model's context of {self.config.seq_len}")
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(seq, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x))


def _init_weights(module: nn.Module) -> None:
    """GPT-2 initialisation: normal(0, 0.02) linear and embedding weights; layer norms keep (1, 0)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def counted_flops_per_token(config: ModelConfig) -> float:
    """FLOPs per token of forward + loss + backward as ``FlopCounterMode`` counts them (matmul-like operators
    only), on the ``meta`` device: no compute, no memory."""
    with torch.device("meta"):
        model = GPT(config)
        idx = torch.zeros(1, config.seq_len, dtype=torch.long)
    with StepFlopCounter() as counter:
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, config.vocab_size), idx.view(-1))
        loss.backward()
    return counter.total / config.seq_len


def corpus_name() -> str:
    """The corpus as written in a run's ``extra_corpus`` column."""
    return f"pydoc_data.topics (CPython {platform.python_version()}), UTF-8 bytes"


def corpus_bytes() -> torch.Tensor:
    """The whole corpus as a 1-D uint8 tensor of UTF-8 bytes."""
    from pydoc_data.topics import topics

    text = "".join(topics[name] for name in sorted(topics))
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8)


def train_val_split(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A token tensor's first ``1 - VAL_FRACTION`` and last :data:`VAL_FRACTION`."""
    cut = int(len(data) * (1.0 - VAL_FRACTION))
    return data[:cut], data[cut:]


class RandomWindows:
    """Endless batches ``(inputs, targets)`` of random windows of a token tensor (int64, ``(batch_size, seq_len)``,
    targets shifted by one token), drawn from a generator seeded with ``seed`` (each rank its own stream)."""

    def __init__(self, tokens: torch.Tensor, batch_size: int, seq_len: int, seed: int) -> None:
        if len(tokens) < seq_len + 1:
            raise ValueError(f"{len(tokens)} tokens cannot fill a window of {seq_len} + 1 tokens")
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.tokens) - self.seq_len, (self.batch_size,), generator=self.generator)
        windows = self.tokens[starts[:, None] + torch.arange(self.seq_len + 1)].long()
        return windows[:, :-1], windows[:, 1:]
