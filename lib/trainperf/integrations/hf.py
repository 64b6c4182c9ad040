"""``HFCallback``: profile a Hugging Face ``Trainer`` run,
``Trainer(..., callbacks=[HFCallback("data/runs/my-run")])``. One step is one optimizer step; which hook times
which phase, and what the callback detects: docs/profiler.md, "Framework integrations".
"""

from __future__ import annotations

from typing import Any

import transformers
from transformers import TrainerCallback

from trainperf.integrations.driver import (ProfilingCallback, Switch, activation_checkpointing, batch_counts,
                                           global_batch, guarded, model_facts, wrapper_of)
from trainperf.profiler.comm import strategy_of as wrapped_strategy


def precision_of(args: Any) -> str:
    """The run's precision from ``TrainingArguments``."""
    return next((flag for flag in ("bf16", "fp16", "tf32") if getattr(args, flag, None)), "fp32")


def strategy_of(args: Any) -> str:
    """``deepspeed``, ``fsdp``, ``ddp`` or ``single``: what ``TrainingArguments`` ask for."""
    return next((name for name in ("deepspeed", "fsdp") if getattr(args, name, None)),
                "ddp" if args.world_size > 1 else "single")


class HFCallback(ProfilingCallback, TrainerCallback):
    """Write a trainperf run folder for a ``Trainer`` run (every rank); the arguments are
    :class:`~trainperf.integrations.driver.ProfilingCallback`'s; what it detects: docs/profiler.md."""

    _handles: list[Any] = []
    _loss_part = False
    _part_scale = 1

    @guarded
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        accum = args.gradient_accumulation_steps
        watched = wrapper_of(model) or model
        # asked for FSDP on CPU, the Trainer (accelerate) wraps the model in DDP: the wrapper tells what runs
        strategy = wrapped_strategy(watched) or strategy_of(args)
        detected = {"framework": "transformers", "framework_version": transformers.__version__,
                    "precision": precision_of(args), "strategy": strategy,
                    **global_batch(args.per_device_train_batch_size, accum, args.world_size), **model_facts(model),
                    # TrainingArguments' activation_checkpointing (gradient_checkpointing before transformers 5)
                    **activation_checkpointing(model, asked=any(getattr(args, name, None) for name in (
                        "activation_checkpointing", "gradient_checkpointing")))}
        # averaged over devices, a micro-batch's part of the loss is scaled by the world size
        self._part_scale = args.world_size if getattr(args, "average_tokens_across_devices", False) else 1
        self._seq_len_known = "seq_len" in self.config
        profiler = self._start(detected, watched)
        if model is not None:
            self._handles = [model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                             model.register_forward_hook(self._after_forward)]
        # each wait for a batch timed through profiler.batches (accelerate's loader wraps a DataLoader,
        # base_dataloader); not with persistent workers, whose iterator the loader reuses
        inner = getattr(train_dataloader, "base_dataloader", train_dataloader)
        original = getattr(inner, "_get_iterator", None)
        if original is not None and not getattr(inner, "persistent_workers", False):
            inner._get_iterator = lambda: profiler.batches(original())

    @guarded
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begin_step()

    on_substep_end = Switch("backward")
    on_pre_optimizer_step = Switch("backward", "optimizer")

    @guarded
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end_step()

    @guarded
    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._profiler is not None:  # only between on_train_begin and on_train_end
            self._profiler.outside_since_last("validation")

    @guarded
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._profiler is not None:
            self._profiler.outside_since_last("checkpoint")

    @guarded
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Remove the model hooks and close the profiler (the files are complete)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._close()

    # -- model hooks ---------------------------------------------------------

    @guarded
    def _before_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._step is None or not module.training:
            return
        samples, tokens, seq_len = batch_counts(kwargs if kwargs else args, self.count_tokens)
        self._step.micro_step(tokens=tokens, samples=samples)
        # the Trainer passes the step's item count: the model's loss is then this micro-batch's part
        self._loss_part = kwargs.get("num_items_in_batch") is not None
        if not self._seq_len_known and seq_len is not None:
            self._seq_len_known = True
            self._profiler.update_config({"seq_len": seq_len})
        self._switch("backward", "forward")

    @guarded
    def _after_forward(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self._step is None or not module.training:
            return
        self._switch("forward")
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is not None and self._loss_part:
            loss = loss.detach() * self._part_scale
        self._add_loss(loss, part=self._loss_part)
        self._switch(None, "backward")

