"""A tiny training job instrumented with StepProfiler, as a user would write it.

Run by the profiler tests, alone, under ``torchrun`` or as processes started by
hand (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set):

    python tests/profiled_training.py RUNS_DIR --strategies ddp,fsdp --steps 4

Each strategy trains in turn and writes the run folder ``RUNS_DIR/<strategy>``.
Strategies: ``single`` (no process group), ``ddp``, ``fsdp`` (FSDP2
``fully_shard``), ``fsdp1`` (the older ``FullyShardedDataParallel``), ``local`` (a process group, but every rank trains its own
model: no collective during training, so one rank can die without stalling
the others). ``--kill-rank R --kill-at S`` makes rank R kill itself with
SIGKILL when step S begins. ``--hold-rank R --hold-mib M`` makes rank R
keep M MiB of its own (written, so resident) through the training.
``--device cuda``: each rank trains on its own
GPU (``LOCAL_RANK``) with NCCL instead of the CPU with gloo.
``--checkpoint-every N``: every N steps each rank saves its model's state
(``torch.save``, beside the run folder) in a phase ``checkpoint`` outside the steps.
``--write-every-steps N --write-every-s S``: the profiler's batches (``StepProfiler``'s arguments).
``--wall-clock-log``: each rank writes the Unix time (``time.time_ns``) read just before each
``prof.step()`` to ``<run folder>-wall-rank<R>.json`` (a list, one per step).
``--evaluate-rank R --evaluate-after S,T --evaluate-s D``: rank R alone "evaluates" (sleeps D seconds) in a
phase ``validation`` outside the steps after steps S, T; the other ranks wait for it in their next all-reduce.

Under ``ddp`` the job also trains the same model on the same batches with
DDP's own gradient averaging (no communication hook) and fails unless both
end with the same weights: the profiler's hook must average as DDP does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from trainperf import StepProfiler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs_dir")
    parser.add_argument("--strategies", default="single", help="comma-separated: single, ddp, fsdp, fsdp1, local")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds of 'compute' per step")
    parser.add_argument("--slow-rank", type=int, default=-1, help="only this rank sleeps --step-sleep (a straggler)")
    parser.add_argument("--hold-rank", type=int, default=-1)
    parser.add_argument("--hold-mib", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--checkpoint-every", type=int, default=0, help="save a checkpoint every N steps")
    parser.add_argument("--write-every-steps", type=int, default=100)
    parser.add_argument("--write-every-s", type=float, default=1.0)
    parser.add_argument("--wall-clock-log", action="store_true")
    parser.add_argument("--evaluate-rank", type=int, default=-1, help="the one rank that evaluates")
    parser.add_argument("--evaluate-after", default="", help="comma-separated steps after which it evaluates")
    parser.add_argument("--evaluate-s", type=float, default=0.0, help="seconds each evaluation takes")
    parser.add_argument("--batch-norm", action="store_true", help="a model with buffers, which DDP broadcasts")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    distributed = strategies != ["single"]
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if distributed:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    for strategy in strategies:
        train(Path(args.runs_dir) / strategy, strategy, args)
    if distributed:
        gc.collect()  # a gloo process group left to interpreter exit can abort the process
        dist.destroy_process_group()


def mlp(device: str = "cpu", batch_norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    norm = [nn.BatchNorm1d(64)] if batch_norm else []
    return nn.Sequential(nn.Linear(16, 64), *norm, nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)


def ddp(model: nn.Module) -> nn.Module:
    # small buckets: several all-reduces per backward
    return nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)


def train(run_dir: Path, strategy: str, args: argparse.Namespace) -> None:
    rank = dist.get_rank() if dist.is_initialized() else 0
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    model = mlp(device, args.batch_norm)
    if strategy == "ddp":
        model = ddp(model)
    elif strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
    elif strategy == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        model = FullyShardedDataParallel(model, device_id=device)
    held = torch.ones(args.hold_mib * 2**18) if rank == args.hold_rank else None  # 4-byte floats  # noqa: F841
    prof = StepProfiler(run_dir, config={"model": "mlp-16-64-64-1", "precision": "fp32"}, warmup_steps=1,
                        write_every_steps=args.write_every_steps, write_every_s=args.write_every_s)
    model = prof.watch(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    data = [(torch.randn(8, 16, generator=generator).to(device), torch.randn(8, 1, generator=generator).to(device))
            for _ in range(args.steps)]
    wall_ns = []
    for i, (x, y) in enumerate(prof.batches(data)):
        if rank == args.kill_rank and i == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        wall_ns.append(time.time_ns())
        with prof.step(tokens=x.numel(), samples=x.shape[0]) as step:
            with prof.phase("forward"):
                out = model(x)
                if args.slow_rank in (-1, rank):
                    time.sleep(args.step_sleep)
            with prof.phase("loss"):
                loss = nn.functional.mse_loss(out, y)
            with prof.phase("backward"):
                loss.backward()
            with prof.phase("optimizer"):
                opt.step()
                opt.zero_grad()
            step.loss = loss
        if rank == args.evaluate_rank and str(i) in args.evaluate_after.split(","):
            with prof.phase("validation"):
                time.sleep(args.evaluate_s)
        if args.checkpoint_every and (i + 1) % args.checkpoint_every == 0:
            with prof.phase("checkpoint"):
                torch.save(model.state_dict(), run_dir.with_name(f"{run_dir.name}-checkpoint-rank{rank}.pt"))
    prof.close()
    if args.wall_clock_log:
        run_dir.with_name(f"{run_dir.name}-wall-rank{rank}.json").write_text(json.dumps(wall_ns))
    if strategy == "ddp":
        assert_same_weights(model, trained_without_hook(data, device, args.batch_norm))
    del model, opt


def trained_without_hook(data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
                         batch_norm: bool = False) -> nn.Module:
    """The DDP model trained on ``data`` with DDP's built-in gradient averaging."""
    model = ddp(mlp(device, batch_norm))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in data:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model


def assert_same_weights(model: nn.Module, reference: nn.Module) -> None:
    for (name, got), expected in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, msg=lambda m, name=name: f"{name}: {m}")


if __name__ == "__main__":
    main()
