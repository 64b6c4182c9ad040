"""One process of a bench run under torchrun, ``python -m trainperf.bench.worker '<RunSpec JSON>'``: the bench model
trained under the ``StepProfiler`` on its local rank's GPU with NCCL, else the CPU with gloo (docs/bench.md, "A run").
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform as host
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from trainperf import StepProfiler
from trainperf.bench.model import (GPT, ModelConfig, RandomWindows, corpus_bytes, corpus_name, model_config,
                                  train_val_split)
from trainperf.bench.spec import STEP_MARK, RunSpec

def start_worker(strategy: str, device: str) -> torch.device:
    """Bind this process to its device (``cuda``: its local rank's GPU), which it returns, and, for ``ddp``
    and ``fsdp``, join the process group."""
    if device == "cuda":
        where = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(where)
    else:
        where = torch.device("cpu")
    if strategy != "single":
        cuda = where.type == "cuda"
        dist.init_process_group("nccl" if cuda else "gloo", device_id=where if cuda else None)
    return where


def wrap_model(model: nn.Module, strategy: str, device: torch.device) -> nn.Module:
    """``model`` moved to ``device`` and wrapped for ``strategy``."""
    model = model.to(device)
    if strategy == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if strategy == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    return model


@contextlib.contextmanager
def gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Within the block, backward synchronises gradients across ranks only if ``sync``."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
    with model.no_sync() if isinstance(model, DistributedDataParallel) and not sync else contextlib.nullcontext():
        yield


def run_columns(spec: RunSpec, config: ModelConfig, device: torch.device) -> dict[str, object]:
    """The run's configuration as run columns (and ``extra_*``) for the profiler's manifest."""
    platform = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    columns: dict[str, object] = {
        "run_id": spec.run_id, "experiment": spec.experiment, "platform": platform,
        "model": f"trainperf-gpt-{spec.model}", "n_params": config.n_params, "n_layers": config.n_layers,
        "d_model": config.d_model, "n_heads": config.n_heads, "vocab_size": config.vocab_size,
        "seq_len": config.seq_len, "precision": spec.precision, "strategy": spec.strategy,
        "micro_batch_size": spec.micro_batch_size, "grad_accum_steps": spec.grad_accum_steps,
        "global_batch_size": spec.global_batch_size, "activation_checkpointing": False,
        "source": f"trainperf bench on {host.node()} (torch {torch.__version__})",
        "extra_corpus": corpus_name(), "extra_threads_per_process": spec.threads_per_process,
        "extra_load_average_1min": os.getloadavg()[0], **spec.extra,
    }
    given = {"peak_tflops_per_gpu": spec.peak_tflops_per_gpu, "baseline_run_id": spec.baseline_run_id}
    return columns | {name: value for name, value in given.items() if value is not None}


def train(spec: RunSpec) -> None:
    """Train for ``spec.warmup_steps + spec.steps`` optimizer steps under the profiler."""
    device = start_worker(spec.strategy, spec.device)
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(spec.seed)  # same initial weights on every rank
    config = model_config(spec.model, spec.seq_len)
    model = wrap_model(GPT(config), spec.strategy, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)
    train_tokens, _ = train_val_split(corpus_bytes())
    loader = RandomWindows(train_tokens, spec.micro_batch_size, config.seq_len, seed=spec.seed + rank + 1)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=spec.precision == "bf16")
    profiler = StepProfiler(spec.run_dir, config=run_columns(spec, config, device),
                            warmup_steps=spec.warmup_steps, warmup="mser", trace=False, device=device)
    model = profiler.watch(model)
    batches = iter(profiler.batches(loader))
    total_steps = spec.warmup_steps + spec.steps
    try:
        for step_index in range(total_steps):
            with profiler.step() as step:
                step_loss = torch.zeros((), device=device)
                for micro in range(spec.grad_accum_steps):
                    inputs, targets = next(batches)
                    with profiler.phase("h2d"):
                        inputs = inputs.to(device, non_blocking=True)
                        targets = targets.to(device, non_blocking=True)
                    with gradient_sync(model, sync=micro == spec.grad_accum_steps - 1):
                        with autocast, profiler.phase("forward"):
                            logits = model(inputs)
                        with autocast, profiler.phase("loss"):
                            loss = F.cross_entropy(logits.view(-1, config.vocab_size), targets.reshape(-1))
                        with profiler.phase("backward"):
                            (loss / spec.grad_accum_steps).backward()
                    step_loss += loss.detach() / spec.grad_accum_steps
                    step.micro_step(tokens=inputs.numel(), samples=len(inputs))
                with profiler.phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                step.loss = step_loss
            if rank == 0:
                print(f"{STEP_MARK}{step_index + 1}/{total_steps}", flush=True)
    finally:  # also after an out-of-memory error, which the profiler has written: the run folder ends cleanly
        profiler.close()
    del model, optimizer, profiler
    gc.collect()  # then leave the group: gloo workers that exit while DDP's reducer or FSDP's state hold it can abort
    if dist.is_initialized():
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trainperf.bench.worker '<RunSpec JSON>' (started by torchrun)", file=sys.stderr)
        return 2
    train(RunSpec.from_json(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
