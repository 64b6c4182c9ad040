"""The TensorBoard tags a training stack writes, and the figure each gives
(a name of ``trainperf.importers.figures.GROUPS``): one mapping per stack,
taken from the stack's own source, and the user's mapping (sidecar key
``tensorboard_tags``, ``trainperf import --tags``) for any other.

What a point's step time covers differs between stacks (:data:`STEP_TIMES`):

* torchtitan (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``,
  pytorch/torchtitan) writes at step 1 and every ``log_freq`` steps the time
  since its previous point divided by ``log_freq`` (``time_end_to_end =
  time_delta / log_freq``: the point at step 10 covers steps 2..10 and
  ``time_metrics/end_to_end(s)`` × 10 seconds); ``throughput(tps)`` (``wps``
  before November 2024) is tokens per second per device, ``tflops`` TFLOP/s
  per device and ``mfu(%)`` MFU in percent, torchtitan's own FLOPs
  (convention ``torchtitan``); ``loss_metrics/global_avg_loss`` the loss.
* Megatron-LM (``megatron/training/training.py``, ``training_log``,
  NVIDIA/Megatron-LM) writes ``iteration-time`` (s) and ``throughput``
  (TFLOP/s per GPU of ``num_floating_point_operations``, convention
  ``megatron``) every ``log_interval`` iterations, as the mean over the
  iterations since its previous point, and only with
  ``--log-timers-to-tensorboard``; ``batch-size`` (the global batch of the
  iteration, in samples), ``lm loss`` every ``tensorboard_log_interval``;
  ``world-size`` with ``--log-world-size-to-tensorboard``.
* NeMo on Lightning (``nemo/utils/exp_manager.py``, ``TimingCallback``;
  ``nemo/lightning/pytorch/strategies/megatron_strategy.py``;
  ``nemo/lightning/pytorch/plugins/data_sampler.py``, NVIDIA/NeMo) logs at
  every ``log_every_n_steps``-th step that step's own ``train_step_timing in
  s``, ``reduced_train_loss``, ``global_batch_size`` (samples) and, with
  ``log_tokens_per_sec``, ``tokens_per_sec_per_gpu``; steps count from 0.
  (Its ``TFLOPS_per_GPU`` uses NeMo's own FLOPs formulas, none of
  trainperf's conventions: not read.)

A user's mapping reads each point as the figures of the step it is written
at, as the pattern reader reads a line.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import DataError
from trainperf.importers.figures import GROUPS, TIMING

STEP, INTERVAL, PER_LOG_FREQ = "step", "interval", "per log_freq"
STEP_TIMES = {
    STEP: "the time of the step the point is written at",
    INTERVAL: "the mean over the steps since the previous point",
    PER_LOG_FREQ: "the time since the previous point divided by the logging interval (torchtitan's log_freq)",
}
"""What the step time of a point covers."""
MAPPABLE = tuple(group for group in GROUPS if group not in ("step", "epoch"))
"""Figures a tag may give (a point's step is the event's own)."""
SHOWN_TAGS = 30
"""Scalar tags a refusal lists."""


@dataclass(frozen=True)
class TagMapping:
    """The tags of one stack: for each figure the tags that give it (the first
    one the events hold is read: a stack renamed some between versions), what
    a point's step time covers (:data:`STEP_TIMES`), the number of the
    training's first step (``origin``), the FLOPs convention of the stack's own
    TFLOP/s and MFU, and runs columns a tag gives (its last value)."""

    name: str
    title: str
    figures: Mapping[str, tuple[str, ...]]
    step_time: str = STEP
    origin: int = 1
    convention: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    def chosen(self, tags: Collection[str]) -> dict[str, str]:
        """Each figure and the tag it is read from, of those the events hold."""
        return {group: found[0] for group, names in self.figures.items()
                if (found := [name for name in names if name in tags])}

    def measures(self, tags: Collection[str]) -> bool:
        """Whether the events hold a tag that gives a step time or a rate."""
        return any(group in TIMING for group in self.chosen(tags))


STACKS: tuple[TagMapping, ...] = (
    TagMapping("torchtitan", "torchtitan", {
        "step_time_s": ("time_metrics/end_to_end(s)",),
        "tokens_per_s_per_gpu": ("throughput(tps)", "wps"),
        "tflops_per_gpu": ("tflops",),
        "mfu_percent": ("mfu(%)",),
        "loss": ("loss_metrics/global_avg_loss",),
    }, PER_LOG_FREQ, 1, "torchtitan"),
    TagMapping("megatron", "Megatron-LM", {
        "step_time_s": ("iteration-time",),
        "tflops_per_gpu": ("throughput",),
        "samples": ("batch-size",),
        "loss": ("lm loss",),
    }, INTERVAL, 1, "megatron", {"gpus": "world-size", "global_batch_size": "batch-size"}),
    TagMapping("nemo", "NeMo", {
        "step_time_s": ("train_step_timing in s",),
        "tokens_per_s_per_gpu": ("tokens_per_sec_per_gpu",),
        "samples": ("global_batch_size",),
        "loss": ("reduced_train_loss",),
    }, STEP, 0, None, {"global_batch_size": "global_batch_size"}),
)
"""The stacks whose tags are read without a mapping, in the order they are tried."""
HINTS = {"megatron": "Megatron-LM writes iteration-time only with --log-timers-to-tensorboard"}


def user_mapping(tags: Mapping[str, Any], where: object) -> TagMapping:
    """The mapping ``{figure: tag}`` a user gave (figures of :data:`MAPPABLE`,
    one of ``figures.TIMING`` among them); DataError naming ``where`` otherwise."""
    unknown = sorted(str(k) for k in tags if k not in MAPPABLE)
    if unknown:
        raise DataError(f"unknown figure(s) {', '.join(unknown)}: the figures are {', '.join(MAPPABLE)} "
                        "(a point's step is the event's own)", path=where, column="tensorboard_tags")
    bad = sorted(str(k) for k, v in tags.items() if not isinstance(v, str) or not v.strip())
    if bad:
        raise DataError(f"the tag of {', '.join(bad)} must be a tag name (a string)", path=where,
                        column="tensorboard_tags")
    if not set(tags) & set(TIMING):  # an empty mapping too
        raise DataError(f"a mapping needs a step time or a rate: one of {', '.join(TIMING)}", path=where,
                        column="tensorboard_tags")
    return TagMapping("tensorboard_tags", "the tags the settings map",
                      {str(group): (str(tag),) for group, tag in tags.items()})


def stack_of(tags: Collection[str]) -> TagMapping | None:
    """The first stack of :data:`STACKS` whose step time or rate the events hold."""
    return next((stack for stack in STACKS if stack.measures(tags)), None)


def unknown_tags(tags: Collection[str], sidecar: str) -> str:
    """Why events with ``tags`` are not read, and how to map them."""
    shown = sorted(tags)[:SHOWN_TAGS]
    found = (f"the scalar tags here: {', '.join(shown)}" + (f" and {len(tags) - SHOWN_TAGS} more"
                                                           if len(tags) > SHOWN_TAGS else "")
             if tags else "no scalar tags here")
    stacks = "; ".join(f"{s.title} ({', '.join(s.figures['step_time_s'])}"
                       + (f": {HINTS[s.name]}" if s.name in HINTS else "") + ")" for s in STACKS)
    return (f"no step time or rate of a known stack among the events' scalars ({found}); read without a "
            f"mapping: {stacks}; map the tags of any other as 'tensorboard_tags' in {sidecar}, e.g. "
            "{step_time_s: <tag>, loss: <tag>}, or with trainperf import --tags step_time_s=<tag> "
            f"(figures: {', '.join(MAPPABLE)}; docs/importers.md)")
