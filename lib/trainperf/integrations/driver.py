"""What both framework callbacks share: a ``StepProfiler`` driven from hooks, what a batch holds (tokens: the
positions the model computes on, padding included) and the model facts a framework exposes (docs/profiler.md,
"Framework integrations").
"""

from __future__ import annotations

import functools
import gc
import warnings
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.nn.parallel import DistributedDataParallel

from trainperf.profiler import ProfilerWarning, StepProfiler
from trainperf.profiler.flop_count import parameter_counts

TokenCounter = Callable[[Any], Any]
Hook = TypeVar("Hook", bound=Callable[..., Any])


def guarded(hook: Hook) -> Hook:
    """A callback hook whose exception becomes one ``ProfilerWarning``; the callback then stops profiling
    (``self.stop()``) and training goes on."""

    @functools.wraps(hook)
    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except Exception as exc:
            warnings.warn(f"trainperf {type(self).__name__}: {hook.__name__} failed: {type(exc).__name__}: {exc}; "
                          "profiling stopped, training goes on", ProfilerWarning, stacklevel=2)
            with suppress(Exception):
                self.stop()

    return run  # type: ignore[return-value]


class ProfilingCallback:
    """The arguments of a framework callback: ``run_dir``; ``config``: run columns, which win over what the
    callback detects; ``count_tokens``: tokens of a micro-batch (default: ``input_ids`` elements, or those of the
    batch's first integer tensor, padding included); ``profiler_options``: ``StepProfiler``'s. Every call does
    nothing where no profiler or step is open, so a hook that fires outside training does nothing."""

    def __init__(self, run_dir: str | Path, config: dict[str, Any] | None = None, *,
                 count_tokens: TokenCounter | None = None, **profiler_options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.config = dict(config or {})
        self.count_tokens = count_tokens
        self.profiler_options = profiler_options
        self._profiler: StepProfiler | None = None
        self._step: Any = None
        self._phases: dict[str, Any] = {}
        self._losses: list[Any] = []
        self._loss_parts = False

    def _start(self, detected: dict[str, Any], model: Any) -> StepProfiler:
        """Open the profiler with the ``detected`` run columns (``config`` wins) and watch ``model`` (None: none)."""
        self._profiler = StepProfiler(self.run_dir, {**detected, **self.config}, **self.profiler_options)
        if model is not None:
            self._profiler.watch(model)
        return self._profiler

    def _switch(self, end: str | None, begin: str | None = None) -> None:
        """End the phase ``end`` where it is open and begin ``begin`` where it is not (nothing outside training)."""
        timer = self._phases.pop(end, None) if end is not None else None
        if timer is not None:
            timer.__exit__(None, None, None)
        if begin is not None and self._profiler is not None and begin not in self._phases:
            timer = self._profiler.phase(begin)
            timer.__enter__()
            self._phases[begin] = timer

    def _begin_step(self) -> None:
        if self._profiler is not None and self._step is None:
            self._step = self._profiler.step()
            self._step.__enter__()
            self._losses = []

    def _end_step(self, error: BaseException | None = None) -> None:
        """Close the open phases (but a wait for data) and the step, with its micro-batches' loss (their sum
        when each is a part of the step's, else their mean), or as failed with ``error``."""
        if self._step is None:
            return
        for name in [n for n in self._phases if n != "data"]:
            self._switch(name)
        if self._losses:
            self._step.loss = sum(self._losses) / (1 if self._loss_parts else len(self._losses))
        step, self._step = self._step, None
        step.__exit__(None if error is None else type(error), error, None)

    def _add_loss(self, loss: Any, part: bool = False) -> None:
        """A micro-batch's loss; ``part``: already divided by the step's total."""
        if self._step is not None and loss is not None:
            self._losses.append(loss.detach() if hasattr(loss, "detach") else loss)
            self._loss_parts = part

    def _close(self, error: BaseException | None = None) -> None:
        """Close the open step (``error``: the one training raised in it), the phases and the profiler."""
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            self._end_step(error)
            for name in list(self._phases):
                self._switch(name)
            profiler.close()


class Switch:
    """A hook declared as ``on_x = Switch(end, begin)``: :meth:`ProfilingCallback._switch`, :func:`guarded`."""

    def __init__(self, end: str | None, begin: str | None = None) -> None:
        self.end, self.begin = end, begin

    def __set_name__(self, owner: type, name: str) -> None:
        def hook(callback: ProfilingCallback, *args: Any, **kwargs: Any) -> None:
            callback._switch(self.end, self.begin)

        hook.__name__ = hook.__qualname__ = name
        setattr(owner, name, guarded(hook))


def batch_counts(batch: Any, count_tokens: TokenCounter | None = None) -> tuple[int | None, Any, int | None]:
    """``(samples, tokens, seq_len)`` of one micro-batch, from ``input_ids`` in a mapping, else the first
    tensor found; ``tokens`` and ``seq_len`` only for integer tensors of two or more dimensions (token ids);
    ``count_tokens(batch)`` overrides the token count."""
    named = isinstance(batch, Mapping) and "input_ids" in batch
    tensor = batch["input_ids"] if named else _first_tensor(batch)
    ids = tensor if named or (tensor is not None and tensor.dim() >= 2 and not tensor.is_floating_point()
                              and not tensor.is_complex()) else None
    samples = int(tensor.shape[0]) if tensor is not None and tensor.dim() > 0 else None
    tokens = count_tokens(batch) if count_tokens is not None else ids.numel() if ids is not None else None
    return samples, tokens, int(ids.shape[-1]) if ids is not None else None


def _first_tensor(batch: Any) -> Any:
    if hasattr(batch, "dim") and hasattr(batch, "shape"):
        return batch
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    return next((found for found in map(_first_tensor, items) if found is not None), None)


CONFIG_NAMES: dict[str, tuple[str, ...]] = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "n_heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab_size": ("vocab_size",),
}
"""Run columns and the attribute names of a transformers-style model configuration that hold them, first match
wins (never ``max_position_embeddings``: docs/profiler.md, "Framework integrations")."""


def model_facts(model: Any) -> dict[str, Any]:
    """``n_params`` (:func:`~trainperf.profiler.flop_count.parameter_counts`), ``model`` and what a
    transformers-style ``config`` of the model or its first submodule with one gives (:data:`CONFIG_NAMES`)."""
    facts: dict[str, Any] = {}
    counts = parameter_counts(model) if hasattr(model, "parameters") else None
    if counts is not None:
        facts["n_params"] = counts["n_params"]
    modules = model.modules() if hasattr(model, "modules") else [model]
    config = next((c for c in (getattr(m, "config", None) for m in modules)
                   if c is not None and any(hasattr(c, n) for names in CONFIG_NAMES.values() for n in names)), None)
    if config is not None:
        for column, names in CONFIG_NAMES.items():
            values = [v for v in (getattr(config, n, None) for n in names)
                      if isinstance(v, int) and not isinstance(v, bool)]
            if values:
                facts[column] = values[0]
        name = getattr(config, "name_or_path", None) or getattr(config, "_name_or_path", None)
        facts["model"] = name or getattr(config, "model_type", None) or type(model).__name__
    elif model is not None:
        facts["model"] = type(model).__name__
    return facts


CHECKPOINT_WRAPPERS = ("CheckpointWrapper",)
"""Classes of torch's ``checkpoint_wrapper`` (``torch.distributed.algorithms._checkpoint``): FSDP's activation
checkpointing (Lightning's ``activation_checkpointing_policy``, accelerate's) wraps each block in one."""


def activation_checkpointing(model: Any, asked: bool = False) -> dict[str, bool]:
    """The run column ``activation_checkpointing``: True where ``asked``, a module is wrapped for it or a
    transformers module's ``gradient_checkpointing`` flag is set; False where modules carry that flag and none
    is set; none where nothing tells."""
    found = True if asked else None
    for module in [] if asked or not hasattr(model, "modules") else model.modules():
        flag = module.__dict__.get("gradient_checkpointing")  # an attribute, never the deprecated property
        if type(module).__name__ in CHECKPOINT_WRAPPERS or flag is True:
            found = True
            break
        found = False if flag is False else found
    return {} if found is None else {"activation_checkpointing": found}


def wrapper_of(model: Any) -> Any:
    """The DDP or FSDP wrapper of ``model`` (frameworks hand callbacks the bare model), found among the objects
    the garbage collector tracks; None where there is none."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    for candidate in gc.get_objects():
        # type(), not isinstance(): some objects warn when their __class__ is read
        if issubclass(type(candidate), (DistributedDataParallel, FullyShardedDataParallel)) and \
                candidate.module is model:
            return candidate
    return None


def global_batch(micro_batch_size: int | None, grad_accum_steps: int, world_size: int) -> dict[str, Any]:
    """``micro_batch_size``, ``grad_accum_steps`` and ``global_batch_size`` (samples per optimizer step)."""
    facts: dict[str, Any] = {"grad_accum_steps": grad_accum_steps}
    if micro_batch_size is not None:
        facts["micro_batch_size"] = micro_batch_size
        facts["global_batch_size"] = micro_batch_size * grad_accum_steps * world_size
    return facts
