"""One vocabulary of the fields training logs print (docs/importers.md, "The vocabulary"): a cleaned line's fields
(:func:`fields_of`), a printed value with its unit (:func:`value`) and each field once, with its names (:func:`lookup`).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainperf.importers.text import LEADING_TIME, NUMBER, current, number, rank_prefix

VALUE = rf"(?:{NUMBER})(?:\s*/\s*(?:{NUMBER}))?(?:\s?(?:ms|sec|s|min|m|h|%|[KMBGT]i?B?)\b|%)?"
"""A value as printed: a number, a ``current/average`` pair or ``N/M``, a unit or a multiplier."""
_PAIR = re.compile(rf"(?:^|(?<=[\s|,\[{{(]))(?P<key>[A-Za-z_][\w./()%\- ]{{0,63}}?)\s*(?:[:=]\s*|\s+)"
                   rf"(?P<value>{VALUE})(?=$|[\s|,\])}}])")
"""``key: value``, ``key=value``, ``key value``: a key (at most 64 characters, so a line costs linear time)
starts at a separator, its value ends at one."""
_PROGRESS = re.compile(r"(?:^|\s)(\d+)\s*/\s*\d+(?=\s|$)")
_ENVELOPE = re.compile(rf"^(?:{LEADING_TIME}|\s*[IWEF]\d{{4}} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[\w.]+:\d+\])")
"""A collector's or logger's timestamp (ISO, or absl's ``I0804 08:14:00.123 140 file.py:196]``) before the record."""
_SEPARATOR = re.compile(r"[\s_\-.]+")
_UNIT_IN_KEY = re.compile(r"\((ms|s|sec|min|h|%|gb|gib|mb|mib)\)|\bin (ms|s|sec|min|h)\b|[ _](ms|s|sec|min|h|gb|"
                          r"mib|mb)$|/s/(?:gpu|device)\b|per (?:gpu|device)\b")
_SUFFIX = re.compile(r"([KMBGT])(i?B)?$|(ms|sec|s|min|m|h|%)$")
_COMMON_UNITS = ("ms", "%", "s")
SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
"""Multipliers of a count printed with a suffix (``1.2K``, ``3M``, ``2B`` tokens)."""
SECONDS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
"""Seconds per printed time unit."""
MAX_LINE_CHARS = 1 << 16
"""A line longer than this (no log prints records so long) has no fields, nor a JSON object so long."""


def normal(key: str) -> str:
    """A key as the vocabulary holds it: lower case, ``_ - .`` and runs of spaces as one space."""
    return _SEPARATOR.sub(" ", key.strip().lower()).strip()


def fields_of(line: str) -> tuple[int | None, dict[str, str]]:
    """The rank the launcher prefix names (None: none) and the fields of ``line``, normalised key -> printed
    value (the first of a key wins); a JSON object's strings and numbers as text, ``[a, b]`` as ``key 0``,
    ``key 1``."""
    rank, body = rank_prefix(line)
    if len(body) > MAX_LINE_CHARS:
        return rank, {}
    if envelope := _ENVELOPE.match(body):
        body = body[envelope.end():]
    out: dict[str, str] = {}
    brace = body.find("{")
    if brace >= 0 and '":' in body:
        try:
            found, _ = json.JSONDecoder().raw_decode(body, brace)
        except (ValueError, RecursionError):  # not JSON, or nested beyond Python's stack
            found = None
        if isinstance(found, dict):
            _flatten(found, "", out)
            return rank, out
    for match in _PAIR.finditer(body):
        out.setdefault(normal(match.group("key")), match.group("value"))
    if (progress := _PROGRESS.search(body)) and "/" not in "".join(out.values()):
        out.setdefault("progress", progress.group(1))
    return rank, out


def _flatten(found: object, key: str, out: dict[str, str]) -> None:
    if isinstance(found, dict):
        for name, item in found.items():
            _flatten(item, f"{key}.{name}" if key else str(name), out)
    elif isinstance(found, list) and len(found) <= 8:
        for k, item in enumerate(found):
            _flatten(item, f"{key} {k}", out)
    elif isinstance(found, (int, float, str)) and not isinstance(found, bool):
        out.setdefault(normal(key), str(found))


@functools.lru_cache(maxsize=4096)
def unit_of_key(key: str) -> str:
    """The unit a normalised key prints its value in (``elapsed time per iteration (ms)`` -> ``ms``,
    ``train step timing in s`` -> ``s``, ``tokens/s/gpu`` and ``per gpu`` -> ``per device``); '' if none."""
    match = _UNIT_IN_KEY.search(key.lower())
    return "" if match is None else next((g for g in match.groups() if g), "per device")


def value(text: str, key: str = "") -> tuple[float, str]:
    """The number printed as ``text`` and its unit: ``1,234.5`` -> (1234.5, ''), ``12.3ms`` -> (12.3, 'ms'), ``45%``
    -> (45.0, '%'), ``1.2K`` -> (1200.0, ''), ``13100.0/13240.9`` -> (13100.0, ''); a unit not printed is ``key``'s
    (:func:`unit_of_key`; '' if none). :class:`~trainperf.importers.text.LineError` if it is no number."""
    text = text.strip()
    try:
        return float(text), unit_of_key(key)
    except ValueError:
        pass
    for unit in _COMMON_UNITS:
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]), unit
            except ValueError:
                break
    unit, multiplier = "", 1.0
    if suffix := _SUFFIX.search(text):
        if suffix.group(2) or suffix.group(3):  # a size in bytes (GB, GiB, MB), a time or a percentage
            unit = suffix.group(3) or suffix.group(0).lower()
        else:
            multiplier = SCALE[suffix.group(1)]
        text = text[:suffix.start()].rstrip()
    return number(current(text)) * multiplier, unit or unit_of_key(key)


TIME_KINDS = ("step_time", "cumulative_time", "interval_time", "interval_mean", "moving_average")
"""How a time is used, in order of preference: the line's own step; a clock since the start (differences; a
value that goes back is a timer that restarted); the time of the steps since the previous line; their mean;
a mean since the start."""
RATES = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "samples_per_s_per_gpu")
"""The rates a log prints: a record without a time is timed by its work over its rate."""


@dataclass(frozen=True)
class Field:
    """A canonical field: its ``name`` (a figure of ``records.GROUPS`` where one exists), how a record uses it
    (``kind``), the unit its value has where the log prints none (``s``, ``ms``, ``%``, ``gib``; '' for counts and
    rates) and the names logs print it under."""

    name: str
    kind: str
    unit: str
    synonyms: tuple[str, ...]


VOCABULARY: tuple[Field, ...] = (
    Field("step", "counter", "", ("step", "iter", "iteration", "global step", "it", "num updates", "updates",
                                  "completed step", "progress", "trainer global step", "batch idx")),
    Field("epoch", "epoch", "", ("epoch", "training epoch")),
    Field("step_time_s", "step_time", "s", ("time", "dt", "step time", "step timing", "train step timing",
                                            "iteration time", "batch time", "time per step", "step duration",
                                            "seconds", "sec/step", "s/step", "step time s", "time step")),
    Field("cumulative_time_s", "cumulative_time", "s", ("train time", "elapsed", "elapsed time", "total time",
                                                        "elapsedtime", "training time", "time elapsed",
                                                        "train runtime so far", "total train time")),
    Field("interval_time_s", "interval_time", "s", ("interval time", "train wall", "log interval time")),
    Field("interval_mean_s", "interval_mean", "s", ("elapsed time per iteration", "time per iteration",
                                                    "iteration time mean")),
    Field("average_time_s", "moving_average", "s", ("step avg", "avg step time", "average step time", "avg time",
                                                    "time avg")),
    Field("tokens_per_s", "rate", "", ("tok/s", "tok/sec", "tokens/s", "tokens/sec", "tokens per second",
                                       "tokens per sec", "tps", "wps", "words/s", "tokens per s", "throughput",
                                       "tokens throughput", "throughput tokens per sec")),
    Field("tokens_per_s_per_gpu", "rate", "", ("tokens/s/device", "tokens/s/gpu", "tgs", "tokens per gpu",
                                               "tokens per second per gpu", "tokens per sec per gpu",
                                               "tokens per gpu per second", "tokens per second per device",
                                               "tok/s/gpu", "wps per gpu")),
    Field("samples_per_s", "rate", "", ("samples/s", "samples/sec", "samples per second", "samplespersec",
                                        "currsamplespersec", "sps", "train samples per second", "examples/s",
                                        "sequences/s", "seq/s", "images/s", "imgs/s", "samples per sec")),
    Field("samples_per_s_per_gpu", "rate", "", ("samples/s/device", "samples/s/gpu", "samples per second per gpu")),
    Field("tflops_per_gpu", "reported", "", ("tflops", "tflop/s/device", "tflop/s/gpu", "tflops per gpu",
                                             "throughput per gpu", "model tflops", "tflop/s")),
    Field("mfu", "reported", "", ("mfu", "model flops utilization", "mfu percent")),
    Field("loss", "loss", "", ("loss", "train loss", "training loss", "lm loss", "reduced train loss", "train/loss",
                               "loss train")),
    Field("val_loss", "val_loss", "", ("val loss", "valid loss", "validation loss", "eval loss", "loss val")),
    Field("memory_gb", "memory", "gib", ("memory", "peak memory", "max memory", "maxmemallocated", "max allocated",
                                         "mem", "gpu mem", "peak memory alloc", "peak memory active",
                                         "max memory allocated", "memory gb")),
    Field("energy_j", "energy", "", ("energy", "energy j")),
    Field("energy_per_gpu_j", "energy", "", ()),
    Field("power_w_per_gpu", "reported", "", ()),
    Field("tokens", "work", "", ("wpb", "tokens per step", "tokens per iteration", "total weights", "ntokens",
                                 "batch tokens", "tokens per batch", "words/batch")),
    Field("tokens_total", "total", "", ("consumed tokens", "tokens seen", "num input tokens seen", "total tokens",
                                        "tokens processed", "tokens so far")),
    Field("samples", "work", "", ("bsz", "samples per step", "batch size")),
    Field("samples_total", "total", "", ("consumed samples", "samples seen", "samples count", "total samples")),
    Field("global_batch_size", "config", "", ("global batch size", "train batch size")),
    Field("lr", "other", "", ("lr", "learning rate", "lrm")),
)
"""Every field, once."""

_UNIT = re.compile(r"\s*\((?:ms|s|sec|min|h|%|gb|gib|mb|mib)\)|\s+in (?:ms|s|sec|min|h)$|\s+(?:ms|s|sec)$")


NAMES = {synonym: f for f in VOCABULARY for synonym in f.synonyms}
"""Every name (normalised) of :data:`VOCABULARY` and its field."""
FIELD = {f.name: f for f in VOCABULARY}
TIMED_BY = {f.name for f in VOCABULARY if f.kind in TIME_KINDS or f.kind == "rate"}
"""The fields that time a record: times and rates."""


def is_record(values: Mapping[str, object]) -> bool:
    """Whether a line's canonical fields make a record: a step counter and a time or a rate."""
    return "step" in values and not TIMED_BY.isdisjoint(values)


OTHER_WORK = frozenset({"startup", "eval", "evaluation", "val", "valid", "validation", "test", "checkpoint", "save",
                        "dataloader", "loading"})
"""Leading words naming work that is not a training step: ``startup time``, ``eval time`` name no step time (their
key without them would). Not ``data``: DLLogger nests every figure under it (``data.train_step_timing in s``)."""


@functools.lru_cache(maxsize=4096)
def lookup(key: str) -> Field | None:
    """The field a normalised ``key`` names: the key without its unit, then without its leading words (none once
    a word of :data:`OTHER_WORK` is dropped)."""
    words = _UNIT.sub("", key).split(" ")
    for k, word in enumerate(words):
        if (tail := " ".join(words[k:])) in NAMES:
            return NAMES[tail]
        if word in OTHER_WORK:
            return None
    return None


def scale(unit: str, field: Field) -> float | None:
    """The factor from ``unit`` ('' : the field's own) to the field's base unit (:func:`in_unit`); None for MFU,
    whose unit depends on the value."""
    unit = unit or field.unit
    if field.kind in TIME_KINDS:
        return SECONDS.get(unit, 1.0)
    if field.name == "mfu":
        return None
    return 1.0 / 1024.0 if field.kind == "memory" and unit in ("mb", "mib") else 1.0


def in_unit(value: float, unit: str, field: Field) -> float:
    """``value`` printed in ``unit`` ('' : the field's own) in the field's base unit: seconds for times,
    a fraction for MFU, GiB for memory; counts and rates as printed."""
    factor = scale(unit, field)
    if factor is not None:
        return value * factor
    # MFU: a negative one (nanoGPT's -100 % before it has one) is none
    return math.nan if value < 0 else value / 100.0 if (unit or field.unit) == "%" or value > 1 else value
