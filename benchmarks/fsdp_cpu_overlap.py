"""Does any computation overlap FSDP's collectives on CPU with gloo?

Two ranks train a 3-layer MLP (256-1024-1024-256, every ``Linear`` sharded)
under FSDP2 ``fully_shard`` and the older ``FullyShardedDataParallel``; each
rank records two steps with ``torch.profiler`` and prints, from the
profiler's ``events()`` (not the reader trainperf's sampler uses):

* the collectives gloo ran (``gloo:*`` ranges: how many, their names, on
  which threads) and the length of their union (ms);
* how much of that union an ``aten::`` op of the training thread overlaps
  (ms): computation that would hide communication;
* the main-thread ranges that cover each collective (what the training
  thread is doing meanwhile);
* trainperf's ``comm_s`` and ``comm_exposed_s`` of the same records
  (``collectives.window_seconds``), summed over the two steps.

    PYTHONPATH=lib .venv/bin/python benchmarks/fsdp_cpu_overlap.py   # starts torchrun itself
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections import Counter

import torch
import torch.distributed as dist
from torch import nn

from trainperf.profiler.collectives import STEP_RANGE, exposed_length, is_collective, window_seconds
from trainperf.profiler.comm import union_length


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 256))


def sharded(strategy: str) -> nn.Module:
    model = mlp()
    if strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        return fully_shard(model)
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return FullyShardedDataParallel(model, device_id=torch.device("cpu"), auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))


def measure(strategy: str) -> str:
    """One rank's line of the table for ``strategy``."""
    model = sharded(strategy)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 256)

    def step() -> None:
        with torch.profiler.record_function(STEP_RANGE):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    step()
    step()  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
        step()
    events = [(e.name, e.thread, e.time_range.start, e.time_range.end) for e in prof.events()]
    thread = next(t for name, t, _, _ in events if name == STEP_RANGE)
    gloo = [(s, e) for name, t, s, e in events if is_collective(name, on_device=False)]
    aten = [(s, e) for name, t, s, e in events if t == thread and name.startswith("aten::")]
    comm_us = union_length(gloo)
    overlapped_us = comm_us - exposed_length(gloo, aten)
    covering = Counter(name.split(" (")[0] for name, t, s, e in events
                       if t == thread and not name.startswith(("aten::", STEP_RANGE))
                       for g0, g1 in gloo if s <= g0 and e >= g1)
    records = [(name, False, t, s, e) for name, t, s, e in events]
    comm_s, exposed_s = window_seconds(records, None, thread)
    names = Counter(name for name, t, s, e in events if is_collective(name, on_device=False))
    threads = sorted({t for name, t, s, e in events if is_collective(name, on_device=False)})
    del model, opt
    gc.collect()
    return (f"| {strategy} | {dist.get_rank()} | {', '.join(f'{n} x{c}' for n, c in sorted(names.items()))} | "
            f"{threads} | {comm_us / 1e3:.1f} | {overlapped_us / 1e3:.2f} | {comm_s * 1e3:.1f} | {exposed_s * 1e3:.1f} | "
            f"{', '.join(n for n, _ in covering.most_common(3))} |")


def worker() -> None:
    dist.init_process_group("gloo")
    lines = [measure(strategy) for strategy in ("fsdp2", "fsdp1")]
    gathered: list[list[str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, lines)
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}, gloo, {dist.get_world_size()} ranks, OMP_NUM_THREADS="
              f"{os.environ.get('OMP_NUM_THREADS')}; two profiled steps per rank\n")
        print("| FSDP | rank | collectives | gloo threads | union ms | aten on training thread ms | "
              "comm_s ms | comm_exposed_s ms | training thread meanwhile in |")
        print("|---|---:|---|---|---:|---:|---:|---:|---|")
        for i in range(2):
            for rank_lines in gathered:
                assert rank_lines is not None
                print(rank_lines[i])
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        worker()
    else:
        sys.exit(subprocess.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  "--nproc-per-node=2", __file__], env={**os.environ, "OMP_NUM_THREADS": "1"}))
