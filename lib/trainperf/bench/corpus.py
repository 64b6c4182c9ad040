"""The bench corpus and its data loader: CPython's documentation that ships with Python (``pydoc_data.topics``,
joined in sorted order), tokens its UTF-8 bytes (vocabulary 256), the last :data:`VAL_FRACTION` held out
(docs/bench.md, "The corpus").
"""

from __future__ import annotations

import platform
from collections.abc import Iterator

import torch

VOCAB_SIZE: int = 256
VAL_FRACTION: float = 0.1


def corpus_name() -> str:
    """The corpus as written in a run's ``extra_corpus`` column."""
    return f"pydoc_data.topics (CPython {platform.python_version()}), UTF-8 bytes"


def corpus_bytes() -> torch.Tensor:
    """The whole corpus as a 1-D uint8 tensor of UTF-8 bytes."""
    from pydoc_data.topics import topics

    text = "".join(topics[name] for name in sorted(topics))
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8)


def train_val_split(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a token tensor into its first ``1 - VAL_FRACTION`` and last :data:`VAL_FRACTION`."""
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
        offsets = torch.arange(self.seq_len + 1)
        windows = self.tokens[starts[:, None] + offsets].long()
        return windows[:, :-1], windows[:, 1:]
