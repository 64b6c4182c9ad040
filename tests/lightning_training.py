"""A tiny GPT-2 trained by Lightning with ``LightningCallback`` (no download:
the model is built from a config). Run alone or under ``torchrun`` (CPU,
gloo, DDP):

    python tests/lightning_training.py RUN_DIR --batch 2 --accum 3 --steps 4 --seq-len 16
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from trainperf.integrations import LightningCallback  # noqa: E402

VOCAB = 128


class TinyGPT(L.LightningModule):
    """``oom_at``: the optimizer step whose first micro-batch runs out of memory (the CPU allocator's own error);
    ``checkpointing``: each block recomputed in backward, as FSDP's activation checkpointing wraps it."""

    def __init__(self, oom_at: int | None = None, checkpointing: bool = False) -> None:
        super().__init__()
        self.model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64))
        self.oom_at = oom_at
        if checkpointing:
            blocks = self.model.transformer.h
            for i, block in enumerate(blocks):
                blocks[i] = checkpoint_wrapper(block)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.oom_at:
            torch.empty(1 << 60, dtype=torch.uint8)  # an exabyte
        return self.model(input_ids=batch, labels=batch).loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.model(input_ids=batch, labels=batch).loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=16)
    args = parser.parse_args()
    train(args.run_dir, args.batch, args.accum, args.steps, args.seq_len)


def train(run_dir: str, batch: int, accum: int, steps: int, seq_len: int, validate_every: int | None = None,
          oom_at: int | None = None, checkpoint_every: int | None = None, checkpointing: bool = False,
          **callback_options: Any) -> int:
    """Train ``steps`` optimizer steps of ``accum`` micro-batches of ``batch``
    sequences of ``seq_len`` tokens on every rank, writing ``run_dir``
    (validating on eight batches every ``validate_every`` batches: long enough
    to stand out from any wait for data; ``ModelCheckpoint`` saving every
    ``checkpoint_every`` optimizer steps; ``checkpointing``: each block wrapped
    for activation checkpointing); return the optimizer steps Lightning took."""
    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    n = batch * accum * steps * world
    ids = torch.randint(VOCAB, (n, seq_len), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(list(ids), batch_size=batch)
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(
            accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto", max_steps=steps,
            accumulate_grad_batches=accum, logger=False, enable_checkpointing=checkpoint_every is not None,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
            val_check_interval=validate_every, limit_val_batches=8 if validate_every else 0,
            num_sanity_val_steps=0,
            callbacks=[LightningCallback(run_dir, config={"experiment": "lightning", "model": "tiny-gpt2"},
                                         warmup_steps=1, **callback_options),
                       *([ModelCheckpoint(dirpath=out, every_n_train_steps=checkpoint_every, save_top_k=-1)]
                         if checkpoint_every else [])])
        validation = DataLoader(list(ids) * 4, batch_size=batch) if validate_every else None
        trainer.fit(TinyGPT(oom_at, checkpointing), loader, validation)
        taken = trainer.global_step
    del trainer
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    return taken


if __name__ == "__main__":
    main()
