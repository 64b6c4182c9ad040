"""FLOPs of one training step of the bench model, counted by PyTorch.

The profiler's FLOP counter (:class:`trainperf.profiler.flop_count.StepFlopCounter`:
``torch.utils.flop_counter.FlopCounterMode``, attention on the math backend)
counts the matmul-like operators (mm, addmm, bmm, attention) that a forward
and backward pass dispatch, at 2 FLOPs per multiply-add. It counts nothing
for element-wise work (layer norm, softmax, GELU, residual adds), embeddings
or the loss. The model is built on the ``meta`` device, so counting a
100 M-parameter model costs no compute and no memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainperf.bench.model import GPT, ModelConfig
from trainperf.profiler.flop_count import StepFlopCounter


def counted_flops_per_token(config: ModelConfig, batch_size: int = 1) -> float:
    """FLOPs per token of forward + loss + backward, as counted by ``FlopCounterMode``."""
    with torch.device("meta"):
        model = GPT(config)
        idx = torch.zeros(batch_size, config.seq_len, dtype=torch.long)
    with StepFlopCounter() as counter:
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, config.vocab_size), idx.view(-1))
        loss.backward()
    return counter.total / (batch_size * config.seq_len)
