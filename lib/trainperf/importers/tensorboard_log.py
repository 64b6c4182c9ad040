"""A run's TensorBoard event files: a log dir (``trainperf.importers.event_files``)
read into step-interval records by its stack's tag mapping, or the user's
(``trainperf.importers.tensorboard_tags``), and measured by the one aggregator.

Each rank's points of a step time or rate are its records, at their steps;
the other figures are those written at the same step (NaN where none is).
A record covers, by what the stack's step time covers:

* one step (NeMo, a user's mapping): the figures are that step's;
* the steps since the rank's previous point, ``n = step - previous step``
  (Megatron-LM, torchtitan), with the figures their mean; the first point of
  a rank covers unknown steps unless it is step 1 (a resumed job counts on
  from its checkpoint), and so has no time. Its seconds are ``n`` × the step
  time (Megatron-LM), or the logging interval × the step time (torchtitan:
  the interval is the greatest common divisor of the steps written after
  step 1, all multiples of ``log_freq``).

A job restarted from a checkpoint writes its steps again: a point replaced
by one written later at its step or an earlier one is left out, as TensorBoard
does, and the first point after the restart covers unknown steps. Warm-up is
the start of the training (steps from the stack's first step number), so a
log dir that starts later is measured from its first measurable point. What
the events do not say (``gpus``, ``seq_len``, the model) comes from the
sidecar ``<log dir>.trainperf.yaml`` next to the log dir (``<event
file>.trainperf.yaml`` for a file) or ``--set``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial, reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf.errors import DataError, UnknownFormat
from trainperf.importers import event_files, figures, records
from trainperf.importers.core import Format, ParsedLog, ParsedRun, log_stem
from trainperf.importers.settings import Settings, sidecar_path
from trainperf.importers.tensorboard_tags import (INTERVAL, PER_LOG_FREQ, STEP, TagMapping, stack_of, unknown_tags,
                                                  user_mapping)

NAN = math.nan


def rank_files(path: Path) -> dict[int, list[Path]]:
    """The event files of each rank of ``path``: a log dir, or one event file (rank 0)."""
    if path.is_dir():
        files = event_files.log_dir_files(path)
        if not files:
            raise DataError("a folder without TensorBoard event files (events.out.tfevents.*, directly or in "
                            "rank_<N> folders): name a log file or a log dir", path=path)
        return files
    return {0: [path]}


def latest_points(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The points of one tag (in the order written) that no later point
    replaces (a point at its step or an earlier one, written after a restart
    from a checkpoint): their steps, values, whether each is the first after
    a restart, and how many were replaced."""
    if not len(steps):
        return steps, values, np.zeros(0, dtype=bool), 0
    later = np.minimum.accumulate(steps[::-1])[::-1]
    kept = steps < np.append(later[1:], np.iinfo(np.int64).max)
    restart = np.concatenate([[False], steps[1:] <= steps[:-1]])
    return steps[kept], values[kept], restart[kept], int((~kept).sum())


def covered_steps(steps: np.ndarray, restart: np.ndarray, step_time: str) -> tuple[np.ndarray, np.ndarray]:
    """Per record at ``steps``: the steps it covers (NaN: unknown) and the steps
    its step time is multiplied by (its wall time = step time × that)."""
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


class TensorBoardLog(Format):
    """TensorBoard event files: a log dir or one event file, recognised by content."""

    name = "tensorboard"
    title = "TensorBoard event files"

    def sniff(self, head: str, settings: Settings) -> int:
        return 0  # told by content (event_files.is_event_file) or by a log dir, never from text

    def parse(self, path: Path, settings: Settings) -> ParsedLog:
        ranks = {rank: event_files.read_scalars(files) for rank, files in rank_files(path).items()}
        tags = set().union(*(scalars.points for scalars in ranks.values()))
        if settings.tensorboard_tags is not None:
            mapping = user_mapping(settings.tensorboard_tags, settings.tensorboard_tags_source)
            absent = sorted(tag for names in mapping.figures.values() for tag in names if tag not in tags)
            if absent:
                raise DataError(f"the mapped tag(s) {', '.join(map(repr, absent))} are not among the events' "
                                f"scalars: {', '.join(sorted(tags)) or 'none'}", path=path, column="tensorboard_tags")
        else:
            mapping = stack_of(tags)
            if mapping is None:
                raise UnknownFormat(unknown_tags(tags, sidecar_path(path).name), path=path)
        chosen = mapping.chosen(tags)
        run = records.Run(1, {}, figures.REPORTED)
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
        finish = partial(_measure, run, mapping, chosen)
        return ParsedLog([ParsedRun(log_stem(path), 1, run.config, finish)], skipped, len(damage) + undecoded,
                         sum(scalars.records for scalars in ranks.values()), notes)


def _add_rank(run: records.Run, rank: int, scalars: event_files.Scalars, chosen: Mapping[str, str],
              mapping: TagMapping) -> list[str]:
    """Add the records of one rank's scalars to ``run`` (and the runs columns
    its tags give to its configuration); notes on points a restart replaced."""
    notes = []
    series: dict[str, pd.Series] = {}
    restarts = np.zeros(0, dtype=np.int64)
    for group, tag in chosen.items():
        steps, values, restart, replaced = latest_points(*scalars.series(tag))
        series[group] = pd.Series(values, index=steps)
        if group in figures.TIMING:
            restarts = np.union1d(restarts, steps[restart])
            if replaced:
                notes.append(f"rank {rank}: {replaced} point(s) of {tag!r} written before a restart from a "
                             "checkpoint are replaced by those written after it at the same or earlier steps")
    timing = reduce(np.union1d, [s.index.to_numpy() for g, s in series.items() if g in figures.TIMING])
    table = pd.DataFrame({group: s.reindex(timing) for group, s in series.items()})
    n, timed = covered_steps(timing, np.isin(timing, restarts), mapping.step_time)
    for step, row, n_steps, timed_steps in zip(timing, table.to_numpy(), n, timed):
        values = {group: value for group, value in zip(table.columns, row) if math.isfinite(value)}
        run.records.add(figures.record(values, rank, int(step), n_steps, timed_steps))
    for column, tag in mapping.config.items():
        _, values, _, _ = latest_points(*scalars.series(tag))
        if len(values) and values[-1] > 0 and values[-1] == int(values[-1]):
            run.config[column] = int(values[-1])
    return notes


def _measure(run: records.Run, mapping: TagMapping, chosen: Mapping[str, str],
             config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
    timing = ", ".join(tag for group, tag in chosen.items() if group in figures.TIMING)
    return figures.measure(run, config, mapping.origin, f"TensorBoard scalars ({timing})", mapping.convention)
