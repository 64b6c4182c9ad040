"""``LightningCallback``: profile a Lightning ``Trainer`` run.

::

    trainer = L.Trainer(..., callbacks=[LightningCallback("data/runs/my-run")])
    trainer.fit(module, datamodule)

One step is one optimizer step: ``accumulate_grad_batches`` micro-batches on
each rank; a step ends with the batch after which ``trainer.global_step``
moved, so the shorter last step of an epoch is counted as it is. What
Lightning's hooks let the callback see, per micro-batch:

* ``data``: from the end of a batch (or the start of an epoch) to the start
  of the next batch (the loader's wait and Lightning's own work between
  batches; Lightning fetches the first batch of an epoch ahead);
* ``forward``: ``training_step`` (forward and loss), to ``on_before_backward``;
* ``backward``: ``on_before_backward`` to ``on_after_backward``;
* ``optimizer``: ``on_before_optimizer_step`` to the end of the batch
  (optimizer step and zeroing of gradients);
* ``comm_s``/``comm_exposed_s``: DDP's gradient all-reduces (the
  communication hook of ``StepProfiler.watch`` on the strategy's wrapped
  model), FSDP's collectives (sampled);
* outside the steps (``events-rank{R}.jsonl``): ``validation``, a validation
  run during training (``on_validation_start`` to ``on_validation_end``;
  one that Lightning starts within an optimizer step of several
  micro-batches is that step's ``validation`` phase), and ``checkpoint``,
  each ``trainer.save_checkpoint`` (what ``ModelCheckpoint`` calls; the
  ``on_save_checkpoint`` hook fires before the file is written, and no hook
  after it, so the callback wraps the method for the run).

Tokens and samples come from each batch (see ``driver.py``); the step's loss
is the mean of its micro-batches' ``training_step`` losses (the sum of the parts
Lightning divides by the accumulation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning
from lightning.pytorch.callbacks import Callback

from trainperf.integrations.driver import (HookedProfiler, TokenCounter, activation_checkpointing, batch_counts,
                                           global_batch, guarded, model_facts)

STRATEGIES = {"DDPStrategy": "ddp", "FSDPStrategy": "fsdp", "ModelParallelStrategy": "fsdp",
              "DeepSpeedStrategy": "deepspeed", "SingleDeviceStrategy": "single"}
"""Lightning strategy classes and their canonical names (others: the class
name without ``Strategy``, lower case)."""


def precision_of(precision: str) -> str:
    """Canonical precision of Lightning's ``trainer.precision`` (``32-true``,
    ``bf16-mixed``, ``16-mixed``, ``transformer-engine``, ...)."""
    text = str(precision)
    if text.startswith("bf16"):
        return "bf16"
    if text.startswith("16"):
        return "fp16"
    if text.startswith("transformer-engine"):
        return "fp8"
    if text.startswith("64"):
        return "fp64"
    return "fp32"


def strategy_of(strategy: Any) -> str:
    name = type(strategy).__name__
    return STRATEGIES.get(name, name.removesuffix("Strategy").lower())


class LightningCallback(Callback):
    """Write a trainperf run folder for a Lightning run (every rank).

    ``config``: run columns, which win over what the callback detects
    (framework and version, accumulation, precision, strategy, world size,
    activation checkpointing (a transformers model's flag, or FSDP's checkpoint
    wrappers), micro-batch and sequence length from the first batch, model
    facts from a transformers-style ``config`` of the module or a submodule).
    ``count_tokens``: tokens of a micro-batch (default: ``input_ids``
    elements, or those of the batch's first integer tensor, padding
    included). ``profiler_options``: ``StepProfiler``'s."""

    def __init__(self, run_dir: str | Path, config: dict[str, Any] | None = None, *,
                 count_tokens: TokenCounter | None = None, **profiler_options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.config = dict(config or {})
        self.count_tokens = count_tokens
        self.profiler_options = profiler_options
        self._hooked: HookedProfiler | None = None
        self._trainer: Any = None
        self._step_began_at = 0
        self._batch_known = False

    @guarded
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._accum = trainer.accumulate_grad_batches
        self._world = trainer.world_size
        model = trainer.strategy.model if trainer.strategy.model is not None else pl_module  # FSDP wraps the blocks
        checkpointing = activation_checkpointing(model)
        detected = {"framework": "lightning", "framework_version": lightning.__version__,
                    "precision": precision_of(trainer.precision), "strategy": strategy_of(trainer.strategy),
                    **global_batch(None, self._accum, self._world), **model_facts(pl_module),
                    **({} if checkpointing is None else {"activation_checkpointing": checkpointing})}
        self._hooked = HookedProfiler(self.run_dir, {**detected, **self.config}, self.profiler_options)
        self._hooked.profiler.watch(model)
        self._trainer = trainer
        trainer.save_checkpoint = self._timed_save(trainer.save_checkpoint)

    def _timed_save(self, save: Any) -> Any:
        """``trainer.save_checkpoint``, timed as the phase ``checkpoint``
        (outside the steps between two of them); the wait for data it
        interrupts goes on after it."""
        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            self._save_begins()
            try:
                return save(*args, **kwargs)
            finally:
                self._save_ends()

        return save_checkpoint

    @guarded
    def _save_begins(self) -> None:
        if self._hooked is not None:
            self._hooked.end("data")
            self._hooked.begin("checkpoint")

    @guarded
    def _save_ends(self) -> None:
        if self._hooked is not None:
            self._hooked.end("checkpoint")
            self._hooked.begin("data")

    @guarded
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._hooked is not None:
            self._hooked.begin("data")

    @guarded
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        hooked = self._hooked
        if hooked is None:
            return
        hooked.end("data")
        if not hooked.in_step:
            hooked.begin_step()
            self._step_began_at = trainer.global_step
        samples, tokens, seq_len = batch_counts(batch, self.count_tokens)
        hooked.micro_batch(samples, tokens)
        if not self._batch_known:
            self._batch_known = True
            facts = global_batch(samples, self._accum, self._world)
            if seq_len is not None:
                facts["seq_len"] = seq_len
            hooked.profiler.update_config(facts)
        hooked.begin("forward")

    @guarded
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._hooked is not None:
            self._hooked.end("forward")
            self._hooked.begin("backward")

    @guarded
    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._hooked is not None:
            self._hooked.end("backward")

    @guarded
    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self._hooked is not None:
            self._hooked.begin("optimizer")

    @guarded
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        hooked = self._hooked
        if hooked is None:
            return
        hooked.end("forward")  # a training_step that returned no loss has no backward
        hooked.end("optimizer")
        # Lightning hands over the loss divided by the accumulation: a part of the step's
        hooked.add_loss(outputs.get("loss") if isinstance(outputs, dict) else outputs, part=True)
        if trainer.global_step != self._step_began_at:
            hooked.end_step()
        hooked.begin("data")

    @guarded
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._hooked is not None:  # only between on_train_start and on_train_end
            self._hooked.end("data")
            self._hooked.begin("validation")

    @guarded
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._hooked is not None:
            self._hooked.end("validation")
            self._hooked.begin("data")

    @guarded
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.stop()

    @guarded
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.stop(exception)  # a step that ran out of memory is recorded as such

    def stop(self, error: BaseException | None = None) -> None:
        """Give the trainer its own ``save_checkpoint`` back and close the profiler (the files are
        complete); ``error``: what the open step raised."""
        trainer, self._trainer = self._trainer, None
        if trainer is not None and "save_checkpoint" in vars(trainer):
            del trainer.save_checkpoint
        hooked, self._hooked = self._hooked, None
        if hooked is not None:
            hooked.end("data")
            hooked.close(error)
