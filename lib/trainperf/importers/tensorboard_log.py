"""A run's TensorBoard event files read into step-interval records through the tags its stack writes
(:data:`STACKS`) or the user's mapping (``tensorboard_tags``) (docs/importers.md, "TensorBoard event files").
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import partial, reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf.errors import DataError, UnknownFormat
from trainperf.importers import event_files, records
from trainperf.importers.core import Format, ParsedLog, ParsedRun, log_stem
from trainperf.importers.settings import Settings, sidecar_path

NAN = math.nan
STEP, INTERVAL, PER_LOG_FREQ = "step", "interval", "per log_freq"
"""What a point's step time covers: the step it is written at; the mean over the steps since the
previous point; the time since the previous point divided by the logging interval (torchtitan's log_freq)."""
MAPPABLE = tuple(group for group in records.GROUPS if group not in ("step", "epoch"))
"""Figures a tag may give (a point's step is the event's own)."""
SHOWN_TAGS = 30
"""Scalar tags a refusal lists."""


@dataclass(frozen=True)
class TagMapping:
    """The tags of one stack: for each figure the tags that give it (the first one the events hold is read), what a
    point's step time covers (:data:`STEP`), the number of the training's first step (``origin``), the FLOPs
    convention of the stack's own TFLOP/s and MFU, and runs columns a tag gives (its last value)."""

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
    """The mapping ``{figure: tag}`` a user gave, checked (``records.check_names``; each tag a string)."""
    records.check_names(tags, MAPPABLE, "figure", "a mapping", where, "tensorboard_tags",
                        " (a point's step is the event's own)")
    bad = sorted(str(k) for k, v in tags.items() if not isinstance(v, str) or not v.strip())
    if bad:
        raise DataError(f"the tag of {', '.join(bad)} must be a tag name (a string)", path=where,
                        column="tensorboard_tags")
    return TagMapping("tensorboard_tags", "the tags the settings map",
                      {str(group): (str(tag),) for group, tag in tags.items()})


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


def latest_points(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The points of one tag (in the order written) that no later point at their step or an earlier one replaces (a
    restart from a checkpoint): their steps, values, whether each is the first after a restart, how many replaced."""
    if not len(steps):
        return steps, values, np.zeros(0, dtype=bool), 0
    later = np.minimum.accumulate(steps[::-1])[::-1]
    kept = steps < np.append(later[1:], np.iinfo(np.int64).max)
    restart = np.concatenate([[False], steps[1:] <= steps[:-1]])
    return steps[kept], values[kept], restart[kept], int((~kept).sum())


def covered_steps(steps: np.ndarray, restart: np.ndarray, step_time: str) -> tuple[np.ndarray, np.ndarray]:
    """Per record at ``steps``: the steps it covers (NaN: unknown) and the steps its step time is multiplied by."""
    if step_time == STEP:
        ones = np.ones(len(steps))
        return ones, ones
    n = np.diff(steps, prepend=0).astype(float)
    if len(n):
        n[0] = 1.0 if steps[0] == 1 else NAN
    n[restart] = NAN
    if step_time == INTERVAL:
        return n, n
    assert step_time == PER_LOG_FREQ
    later = steps[steps > 1]
    interval = float(reduce(math.gcd, later.tolist())) if len(later) else NAN
    return n, np.full(len(steps), interval)


def read_events(path: Path, settings: Settings) -> ParsedLog:
    """The run of TensorBoard event files: a log dir, or one event file."""
    files = event_files.log_dir_files(path) if path.is_dir() else {0: [path]}
    if not files:
        raise DataError("a folder without TensorBoard event files (events.out.tfevents.*, directly or in "
                        "rank_<N> folders): name a log file or a log dir", path=path)
    ranks = {rank: event_files.read_scalars(rank_files) for rank, rank_files in files.items()}
    tags = set().union(*(scalars.points for scalars in ranks.values()))
    if settings.tensorboard_tags is not None:
        mapping = user_mapping(settings.tensorboard_tags, settings.tensorboard_tags_source)
        absent = sorted(tag for names in mapping.figures.values() for tag in names if tag not in tags)
        if absent:
            raise DataError(f"the mapped tag(s) {', '.join(map(repr, absent))} are not among the events' "
                            f"scalars: {', '.join(sorted(tags)) or 'none'}", path=path, column="tensorboard_tags")
    else:
        mapping = next((stack for stack in STACKS if set(stack.chosen(tags)) & set(records.TIMING)), None)
        if mapping is None:
            raise UnknownFormat(unknown_tags(tags, sidecar_path(path).name), path=path)
    chosen = mapping.chosen(tags)
    run = records.Run(1, {}, records.REPORTED)
    notes: list[str] = []
    for rank, scalars in ranks.items():
        notes += _add_rank(run, rank, scalars, chosen, mapping)
    damage = [d for scalars in ranks.values() for d in scalars.damage]
    skipped = [(str(d.path), d.record, f"event record cut short or damaged at byte {d.offset:,}: "
                                       f"{d.unread_bytes:,} bytes not read") for d in damage]
    undecoded = sum(scalars.undecoded for scalars in ranks.values())
    if undecoded:
        skipped.append((str(path), 0, f"{undecoded} record(s) that hold no TensorBoard event"))
    notes = [str(d) for d in damage] + notes
    timing = ", ".join(tag for group, tag in chosen.items() if group in records.TIMING)
    finish = partial(records.measure_figures, run, origin=mapping.origin,
                     time_source=f"TensorBoard scalars ({timing})", convention=mapping.convention)
    return ParsedLog([ParsedRun(log_stem(path), 1, run.config, finish)], skipped, len(damage) + undecoded,
                     sum(scalars.records for scalars in ranks.values()), notes)


def _add_rank(run: records.Run, rank: int, scalars: event_files.Scalars, chosen: Mapping[str, str],
              mapping: TagMapping) -> list[str]:
    """Add the records of one rank's scalars to ``run`` (and the runs columns its tags give to its configuration);
    notes on points a restart replaced."""
    notes = []
    series: dict[str, pd.Series] = {}
    restarts = np.zeros(0, dtype=np.int64)
    for group, tag in chosen.items():
        steps, values, restart, replaced = latest_points(*scalars.series(tag))
        series[group] = pd.Series(values, index=steps)
        if group in records.TIMING:
            restarts = np.union1d(restarts, steps[restart])
            if replaced:
                notes.append(f"rank {rank}: {replaced} point(s) of {tag!r} written before a restart from a "
                             "checkpoint are replaced by those written after it at the same or earlier steps")
    timing = reduce(np.union1d, [s.index.to_numpy() for g, s in series.items() if g in records.TIMING])
    table = pd.DataFrame({group: s.reindex(timing) for group, s in series.items()})
    n, timed = covered_steps(timing, np.isin(timing, restarts), mapping.step_time)
    for step, row, n_steps, timed_steps in zip(timing, table.to_numpy(), n, timed):
        values = {group: value for group, value in zip(table.columns, row) if math.isfinite(value)}
        run.records.add(records.record(values, rank, int(step), n_steps, timed_steps))
    for column, tag in mapping.config.items():
        _, values, _, _ = latest_points(*scalars.series(tag))
        if len(values) and values[-1] > 0 and values[-1] == int(values[-1]):
            run.config[column] = int(values[-1])
    return notes


TENSORBOARD = Format("tensorboard", "TensorBoard event files", read_events)
