"""One vocabulary of the fields training logs print: each canonical field once, with its names, unit and meaning
(docs/importers.md, "The vocabulary"); :func:`lookup` finds a key's field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainperf.importers.fields import SECONDS

TIME_KINDS = ("step_time", "cumulative_time", "interval_time", "interval_mean", "moving_average")
"""How a time is used, in order of preference: the line's own step; a clock since the start (differences; a
value that goes back is a timer that restarted); the time of the steps since the previous line; their mean;
a mean since the start."""
RATES = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "samples_per_s_per_gpu")
"""The rates a log prints: a record without a time is timed by its work over its rate."""


@dataclass(frozen=True)
class Field:
    """A canonical field: its ``name`` (a figure of ``trainperf.importers.figures`` where one exists), how a
    record uses it (``kind``), the unit its value has where the log prints none (``s``, ``ms``, ``%``,
    ``gib``; '' for counts and rates) and the names logs print it under."""

    name: str
    kind: str
    unit: str
    synonyms: tuple[str, ...]
    meaning: str


VOCABULARY: tuple[Field, ...] = (
    Field("step", "counter", "", ("step", "iter", "iteration", "global step", "it", "num updates", "updates",
                                  "completed step", "progress", "trainer global step", "batch idx"),
          "the optimizer step the line reports (a whole number; ``N/M`` is N of M)"),
    Field("epoch", "epoch", "", ("epoch", "training epoch"),
          "the epoch of that step: a step counter that restarts each epoch counts on across epochs"),
    Field("step_time_s", "step_time", "s", ("time", "dt", "step time", "step timing", "train step timing",
                                            "iteration time", "batch time", "time per step", "step duration",
                                            "seconds", "sec/step", "s/step", "step time s", "time step"),
          "wall time of the step the line reports (s): a record of that one step"),
    Field("cumulative_time_s", "cumulative_time", "s", ("train time", "elapsed", "elapsed time", "total time",
                                                        "elapsedtime", "training time", "time elapsed",
                                                        "train runtime so far", "total train time"),
          "a clock since the start of training (s): a record's time is its difference from the previous "
          "line's; a value that goes back is a timer restarted (that record's time is unknown)"),
    Field("interval_time_s", "interval_time", "s", ("interval time", "train wall", "log interval time"),
          "time of the steps since the previous line (s)"),
    Field("interval_mean_s", "interval_mean", "s", ("elapsed time per iteration", "time per iteration",
                                                    "iteration time mean"),
          "mean time per step over the steps since the previous line (s)"),
    Field("average_time_s", "moving_average", "s", ("step avg", "avg step time", "average step time",
                                                    "avg time", "time avg"),
          "mean time per step since the start (s): alone, each record is timed by it"),
    Field("tokens_per_s", "rate", "", ("tok/s", "tok/sec", "tokens/s", "tokens/sec", "tokens per second",
                                       "tokens per sec", "tps", "wps", "words/s", "tokens per s", "throughput",
                                       "tokens throughput", "throughput tokens per sec"),
          "the whole job's tokens per second, as printed (kept as reported_tokens_per_s)"),
    Field("tokens_per_s_per_gpu", "rate", "", ("tokens/s/device", "tokens/s/gpu", "tgs", "tokens per gpu",
                                               "tokens per second per gpu", "tokens per sec per gpu",
                                               "tokens per gpu per second", "tokens per second per device",
                                               "tok/s/gpu", "wps per gpu"),
          "tokens per second per device, as printed"),
    Field("samples_per_s", "rate", "", ("samples/s", "samples/sec", "samples per second", "samplespersec",
                                        "currsamplespersec", "sps", "train samples per second", "examples/s",
                                        "sequences/s", "seq/s", "images/s", "imgs/s", "samples per sec"),
          "the whole job's samples per second, as printed"),
    Field("samples_per_s_per_gpu", "rate", "", ("samples/s/device", "samples/s/gpu", "samples per second per gpu"),
          "samples per second per device, as printed"),
    Field("tflops_per_gpu", "reported", "", ("tflops", "tflop/s/device", "tflop/s/gpu", "tflops per gpu",
                                             "throughput per gpu", "model tflops", "tflop/s"),
          "TFLOP/s per device, as printed (the stack's own FLOPs count)"),
    Field("mfu", "reported", "", ("mfu", "model flops utilization", "mfu percent"),
          "model FLOPs utilisation, as printed: percent (a fraction where printed at most 1 without '%')"),
    Field("loss", "loss", "", ("loss", "train loss", "training loss", "lm loss", "reduced train loss",
                               "train/loss", "loss train"),
          "training loss"),
    Field("val_loss", "val_loss", "", ("val loss", "valid loss", "validation loss", "eval loss", "loss val"),
          "validation loss"),
    Field("memory_gb", "memory", "gib", ("memory", "peak memory", "max memory", "maxmemallocated", "max allocated",
                                         "mem", "gpu mem", "peak memory alloc", "peak memory active",
                                         "max memory allocated", "memory gb"),
          "peak device memory (GiB; MB and MiB converted)"),
    Field("energy_j", "energy", "", ("energy", "energy j"), "energy over the record (J)"),
    Field("energy_per_gpu_j", "energy", "", (), "energy of one step on each device (J; a stack's own key)"),
    Field("power_w_per_gpu", "reported", "", (), "power per device (W), as printed (a stack's own key)"),
    Field("tokens", "work", "", ("wpb", "tokens per step", "tokens per iteration", "total weights",
                                 "ntokens", "batch tokens", "tokens per batch", "words/batch"),
          "tokens the whole job processed in one step"),
    Field("tokens_total", "total", "", ("consumed tokens", "tokens seen", "num input tokens seen",
                                        "total tokens", "tokens processed", "tokens so far"),
          "tokens processed since the start: a record's tokens are its difference"),
    Field("samples", "work", "", ("bsz", "samples per step", "batch size"),
          "samples the whole job processed in one step"),
    Field("samples_total", "total", "", ("consumed samples", "samples seen", "samples count", "total samples"),
          "samples processed since the start: a record's samples are its difference"),
    Field("global_batch_size", "config", "", ("global batch size", "train batch size"),
          "samples a step (the run's global_batch_size)"),
    Field("lr", "other", "", ("lr", "learning rate", "lrm"), "learning rate (not used)"),
)
"""Every field, once."""

_UNIT = re.compile(r"\s*\((?:ms|s|sec|min|h|%|gb|gib|mb|mib)\)|\s+in (?:ms|s|sec|min|h)$|\s+(?:ms|s|sec)$")


def extended(names: Mapping[str, str]) -> dict[str, Field]:
    """The vocabulary's names (normalised) with a stack's own ``names`` (name -> canonical field) added."""
    by_name = {f.name: f for f in VOCABULARY}
    table = {synonym: f for f in VOCABULARY for synonym in f.synonyms}
    table.update({name: by_name[field] for name, field in names.items()})
    return table


NAMES = extended({})
"""Every name of :data:`VOCABULARY`."""
FIELD = {f.name: f for f in VOCABULARY}
"""Each canonical field by its name."""
KIND = {f.name: f.kind for f in VOCABULARY}
"""Each canonical field's kind."""


def is_record(values: Mapping[str, object]) -> bool:
    """Whether a line's canonical fields make a record: a step counter and a time or a rate."""
    return "step" in values and any(KIND[name] in TIME_KINDS or KIND[name] == "rate" for name in values)


def lookup(key: str, table: Mapping[str, Field] = NAMES) -> Field | None:
    """The field a normalised ``key`` names: the key without its unit, then without its leading words."""
    bare = _UNIT.sub("", key)
    words = bare.split(" ")
    for k in range(len(words)):
        found = table.get(" ".join(words[k:]))
        if found is not None:
            return found
    return None


def scale(unit: str, field: Field) -> float | None:
    """The factor that takes a value printed in ``unit`` ('' : the field's own) to the field's base unit:
    seconds for times, GiB for memory, 1 for counts and rates; None for MFU, whose unit depends on the value
    (:func:`in_unit`)."""
    unit = unit or field.unit
    if field.kind in TIME_KINDS:
        return SECONDS.get(unit, 1.0)
    if field.name == "mfu":
        return None
    if field.kind == "memory":
        return 1.0 / 1024.0 if unit in ("mb", "mib") else 1.0
    return 1.0


def in_unit(value: float, unit: str, field: Field) -> float:
    """``value`` printed in ``unit`` ('' : the field's own) in the field's base unit: seconds for times,
    a fraction for MFU, GiB for memory; counts and rates as printed."""
    factor = scale(unit, field)
    if factor is not None:
        return value * factor
    # MFU: a negative one (nanoGPT's -100 % before it has one) is none
    return math.nan if value < 0 else value / 100.0 if (unit or field.unit) == "%" or value > 1 else value
