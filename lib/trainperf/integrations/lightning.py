"""``LightningCallback``: profile a Lightning ``Trainer`` run,
``L.Trainer(..., callbacks=[LightningCallback("data/runs/my-run")])``. One step is one optimizer step (it ends with
the batch after which ``trainer.global_step`` moved); which hook times which phase, and what the callback detects:
docs/profiler.md, "Framework integrations".
"""

from __future__ import annotations

from typing import Any

import lightning
from lightning.pytorch.callbacks import Callback

from trainperf.integrations.driver import (ProfilingCallback, activation_checkpointing, batch_counts, global_batch,
                                           Switch, guarded, model_facts)

STRATEGIES = {"DDPStrategy": "ddp", "FSDPStrategy": "fsdp", "ModelParallelStrategy": "fsdp",
              "DeepSpeedStrategy": "deepspeed", "SingleDeviceStrategy": "single"}
PRECISIONS = {"bf16": "bf16", "16": "fp16", "transformer-engine": "fp8", "64": "fp64"}


def precision_of(precision: str) -> str:
    """Canonical precision of Lightning's ``trainer.precision`` (``bf16-mixed``, ...) by its beginning
    (:data:`PRECISIONS`; others: ``fp32``)."""
    return next((name for start, name in PRECISIONS.items() if str(precision).startswith(start)), "fp32")


def strategy_of(strategy: Any) -> str:
    """Canonical name of a Lightning strategy (:data:`STRATEGIES`; others: the class name without ``Strategy``)."""
    name = type(strategy).__name__
    return STRATEGIES.get(name, name.removesuffix("Strategy").lower())


class LightningCallback(ProfilingCallback, Callback):
    """Write a trainperf run folder for a Lightning run (every rank); the arguments are
    :class:`~trainperf.integrations.driver.ProfilingCallback`'s; what it detects: docs/profiler.md."""

    _trainer: Any = None
    _step_began_at = 0
    _batch_known = False

    @guarded
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._accum = trainer.accumulate_grad_batches
        self._world = trainer.world_size
        model = trainer.strategy.model if trainer.strategy.model is not None else pl_module  # FSDP wraps the blocks
        detected = {"framework": "lightning", "framework_version": lightning.__version__,
                    "precision": precision_of(trainer.precision), "strategy": strategy_of(trainer.strategy),
                    **global_batch(None, self._accum, self._world), **model_facts(pl_module),
                    **activation_checkpointing(model)}
        self._start(detected, model)
        self._trainer = trainer
        save = trainer.save_checkpoint

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:  # the phase checkpoint, in the wait for data
            self._save_begins()
            try:
                return save(*args, **kwargs)
            finally:
                self._save_ends()

        trainer.save_checkpoint = save_checkpoint

    _save_begins = Switch("data", "checkpoint")
    _save_ends = Switch("checkpoint", "data")
    on_train_epoch_start = Switch(None, "data")

    @guarded
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._profiler is None:
            return
        self._switch("data")
        if self._step is None:
            self._begin_step()
            self._step_began_at = trainer.global_step
        samples, tokens, seq_len = batch_counts(batch, self.count_tokens)
        self._step.micro_step(tokens=tokens, samples=samples)
        if not self._batch_known:
            self._batch_known = True
            facts = global_batch(samples, self._accum, self._world)
            if seq_len is not None:
                facts["seq_len"] = seq_len
            self._profiler.update_config(facts)
        self._switch(None, "forward")

    on_before_backward = Switch("forward", "backward")
    on_after_backward = Switch("backward")
    on_before_optimizer_step = Switch(None, "optimizer")

    @guarded
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._profiler is None:
            return
        self._switch("forward")  # a training_step that returned no loss has no backward
        self._switch("optimizer")
        # Lightning hands over the loss divided by the accumulation: a part of the step's
        self._add_loss(outputs.get("loss") if isinstance(outputs, dict) else outputs, part=True)
        if trainer.global_step != self._step_began_at:
            self._end_step()
        self._switch(None, "data")

    on_validation_start = Switch("data", "validation")  # only between on_train_start and on_train_end
    on_validation_end = Switch("validation", "data")

    @guarded
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.stop()

    @guarded
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.stop(exception)  # a step that ran out of memory is recorded as such

    def stop(self, error: BaseException | None = None) -> None:
        """Give the trainer its ``save_checkpoint`` back and close the profiler; ``error``: what the open step
        raised."""
        trainer, self._trainer = self._trainer, None
        if trainer is not None and "save_checkpoint" in vars(trainer):
            del trainer.save_checkpoint
        self._switch("data")
        self._close(error)
