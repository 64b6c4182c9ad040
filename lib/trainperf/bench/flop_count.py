"""FLOPs of one training step of the bench model, counted by PyTorch.

``torch.utils.flop_counter.FlopCounterMode`` counts the matmul-like operators
(mm, addmm, bmm, attention) that a forward and backward pass dispatch, at
2 FLOPs per multiply-add. It counts nothing for element-wise work (layer
norm, softmax, GELU, residual adds), embeddings or the loss. The model is
built on the ``meta`` device, so counting a 100 M-parameter model costs no
compute and no memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from trainperf.bench.model import GPT, ModelConfig


def counted_flops_per_token(config: ModelConfig, batch_size: int = 1) -> float:
    """FLOPs per token of forward + loss + backward, as counted by ``FlopCounterMode``.

    Attention runs on the math backend: the fused CPU and CUDA kernels
    (flash, memory-efficient) are not all known to the counter, which would
    then miss the attention matmuls.
    """
    with torch.device("meta"):
        model = GPT(config)
        idx = torch.zeros(batch_size, config.seq_len, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, config.vocab_size), idx.view(-1))
        loss.backward()
    return counter.get_total_flops() / (batch_size * config.seq_len)
