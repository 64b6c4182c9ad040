"""A tiny GPT-2 trained by the Hugging Face ``Trainer`` with ``HFCallback``
(no download: the model is built from a config). Run alone or under
``torchrun`` (CPU, gloo):

    python tests/hf_training.py RUN_DIR --batch 2 --accum 3 --steps 4 --seq-len 16 [--fsdp] [--report-dir DIR]
        [--eval-every N] [--save-every N]

With ``--report-dir``, each rank writes the class of the model the Trainer
trained to ``DIR/wrapped-rank{R}.txt`` (ranks printing to one pipe interleave
their lines).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from trainperf.integrations import HFCallback  # noqa: E402

VOCAB = 128
CHECKPOINTING = ("activation_checkpointing" if "activation_checkpointing" in TrainingArguments.__dataclass_fields__
                 else "gradient_checkpointing")  # the argument's name since transformers 5, and before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--fsdp", action="store_true", help="ask the Trainer for FSDP (full_shard of each GPT2Block)")
    parser.add_argument("--report-dir", help="folder for each rank's wrapped-rank{R}.txt")
    parser.add_argument("--eval-every", type=int, help="evaluate every N optimizer steps")
    parser.add_argument("--save-every", type=int, help="save a checkpoint every N optimizer steps")
    args = parser.parse_args()
    train(args.run_dir, args.batch, args.accum, args.steps, args.seq_len, args.fsdp, args.report_dir,
          args.eval_every, args.save_every)


def train(run_dir: str, batch: int, accum: int, steps: int, seq_len: int, fsdp: bool = False,
          report_dir: str | None = None, eval_every: int | None = None, save_every: int | None = None,
          checkpointing: bool = False) -> float:
    """Train ``steps`` optimizer steps of ``accum`` micro-batches of ``batch``
    sequences of ``seq_len`` tokens on every rank, writing ``run_dir``;
    return the training loss the ``Trainer`` reports (mean over steps).
    ``eval_every``: evaluate on 32 sequences every so many steps;
    ``save_every``: save a checkpoint every so many steps.
    With ``report_dir``, write the class of the model the Trainer trained
    to ``report_dir/wrapped-rank{R}.txt``; with ``checkpointing``, ask the
    Trainer for activation (gradient) checkpointing."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    n = batch * accum * steps * world
    ids = torch.randint(VOCAB, (n, seq_len), generator=torch.Generator().manual_seed(1))
    dataset = [{"input_ids": row, "labels": row} for row in ids]
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
            max_steps=steps, report_to="none", use_cpu=True, logging_strategy="no",
            save_strategy="steps" if save_every else "no", save_steps=save_every or 500,
            eval_strategy="steps" if eval_every else "no", eval_steps=eval_every,
            disable_tqdm=True, dataloader_num_workers=0, learning_rate=1e-3,
            **({"fsdp": True, "fsdp_config": {"transformer_layer_cls_to_wrap": ["GPT2Block"]}} if fsdp else {}),
            **({CHECKPOINTING: True} if checkpointing else {}))
        trainer = Trainer(model=model, args=training, train_dataset=dataset,
                          eval_dataset=(dataset * 32)[:32] if eval_every else None,
                          callbacks=[HFCallback(run_dir, config={"experiment": "hf", "model": "tiny-gpt2"}, warmup_steps=1)])
        loss = trainer.train().training_loss
        if report_dir is not None:
            rank = int(os.environ.get("RANK", "0"))
            Path(report_dir, f"wrapped-rank{rank}.txt").write_text(type(trainer.model_wrapped).__name__)
    del trainer, model
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    return loss


if __name__ == "__main__":
    main()
