"""Process group, device and data-parallel wrapping for one bench worker, one process started by torchrun (which
sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``): the GPU of its local rank with NCCL, else the CPU with gloo. The
strategies (:data:`STRATEGIES`): docs/bench.md, "A run".
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

STRATEGIES: tuple[str, ...] = ("single", "ddp", "fsdp")


@dataclass(frozen=True)
class Worker:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def start(strategy: str, device: str) -> Worker:
    """Bind this process to its device (``cpu``, or ``cuda``: the GPU of its local rank)
    and, for ``ddp`` and ``fsdp``, join the process group (NCCL on GPU, gloo on CPU)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if strategy == "single" and world_size != 1:
        raise ValueError(f"strategy 'single' runs one process, got WORLD_SIZE={world_size}")
    if device == "cuda":
        where = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(where)
    else:
        where = torch.device("cpu")
    if strategy != "single":
        cuda = where.type == "cuda"
        dist.init_process_group("nccl" if cuda else "gloo", device_id=where if cuda else None)
    rank = dist.get_rank() if dist.is_initialized() else 0
    return Worker(rank, world_size, where)


def wrap(model: nn.Module, strategy: str, worker: Worker) -> nn.Module:
    """``model`` moved to the worker's device and wrapped for ``strategy``."""
    model = model.to(worker.device)
    if strategy == "ddp":
        device_ids = [worker.device.index] if worker.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)
    if strategy == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    return model


@contextlib.contextmanager
def gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Within the block, backward synchronises gradients across ranks only if ``sync``.

    Gradient accumulation synchronises on the last micro-batch of a step only.
    """
    if isinstance(model, DistributedDataParallel) and not sync:
        with model.no_sync():
            yield
        return
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
    yield


def finish() -> None:
    """Collect garbage, then leave the process group.

    Call it after deleting the model and optimizer: gloo workers that exit
    while DDP's reducer or FSDP's state still hold the group can abort at
    interpreter exit.
    """
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
