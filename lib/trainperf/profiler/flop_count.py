"""The model's size and FLOPs, from the model itself, for the runs whose
configuration does not give them.

``StepProfiler.watch(model)`` records the model's parameter count
(:func:`parameter_counts`). ``StepProfiler(..., count_flops=True)`` counts
the FLOPs of the first step it times (a warm-up step: counting slows it)
with PyTorch's FLOP counter (:class:`StepFlopCounter`): every matrix product
and convolution of the forward and backward passes, attention under the
math backend (the counter sees no FLOPs in the fused attention kernels of
the CPU). The count is this rank's; divided by the samples this rank
processed in that step it is ``flops_per_sample``, the same on every rank,
which the ``counted`` FLOPs convention uses for models that no formula
describes (CNNs, diffusion models, recommenders).
"""

from __future__ import annotations

import contextlib
from typing import Any


def parameter_counts(model: Any) -> dict[str, float] | None:
    """``{"n_params": all parameters, "extra_trainable_params": those that
    require gradients}`` of ``model`` (under DDP its module's; under FSDP2
    each sharded parameter counts its full size); None under FSDP1, whose
    flattened shards do not add up to the model."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return None
    parameters = list(model.parameters())
    return {"n_params": float(sum(p.numel() for p in parameters)),
            "extra_trainable_params": float(sum(p.numel() for p in parameters if p.requires_grad))}


class StepFlopCounter:
    """A context manager that counts the FLOPs run inside it (``total``),
    with scaled-dot-product attention on the math backend."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._counter: Any = None

    def __enter__(self) -> StepFlopCounter:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.utils.flop_counter import FlopCounterMode

        self._counter = FlopCounterMode(display=False)
        self._stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        self._stack.enter_context(self._counter)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def total(self) -> int:
        """FLOPs counted (forward, backward and optimizer of this rank)."""
        return int(self._counter.get_total_flops())
