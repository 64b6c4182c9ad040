"""The step-intervals store: each input's step intervals as Parquet part files (whole ranks of one run each, in
the order recorded, the warm-up flagged), their summaries and the reader's facts, in an entry ``store/<key>``
keyed as the input cache (``trainperf.reading.input_cache.input_key``). Its layout, how an entry is built and
what happens when one is damaged, another process builds it or the store cannot be written: docs/data.md,
"The store" and "What the caches guarantee". ``TRAINPERF_INPUT_CACHE=off`` turns it off too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from trainperf.aggregate import FRAMES, Summaries, combine, combine_step_times, finish, settled_times, summarize
from trainperf.partials import empty_intervals, partials, settle, step_times
from trainperf.reading.cache import (Damaged, building, damaged, entries_dir, holding, open_entry, private_dir,
                                     read_checked, read_frame, seal, warn_once, write_frame)

FORMAT = "trainperf-store"
VERSION = 2
KEEP = 64
"""Entries kept; the least recently written beyond this are removed."""

Part = Callable[[], tuple[pd.DataFrame, dict[str, list]]]
"""Reads one part of an input: its step intervals (whole ranks) and facts (lists, joined over the parts in order)."""


@dataclass
class Entry:
    """An input's step intervals, their summaries and the reader's facts: in a store ``folder`` (its ``parts``, read
    again from ``source`` when one cannot be read), or held in memory (``folder`` None)."""

    folder: Path | None
    facts: dict[str, list]
    summaries: Summaries
    held: pd.DataFrame | None = field(default=None, repr=False)
    parts: list[str] = field(default_factory=list)
    source: Callable[[], list[Part]] | None = field(default=None, repr=False)

    def intervals(self, columns: Sequence[str] | None = None, *, runs: Sequence[str] | None = None,
                  lazy: bool = False) -> Any:
        """The step intervals (only ``columns``, of the ``runs`` named; default all): a pandas frame, or with ``lazy``
        a Dask DataFrame over the store (a partition per part file: whole ranks)."""
        wanted = None if columns is None else list(columns)
        if self.folder is None or not self.parts:
            frame = _select(self.held if self.held is not None else empty_intervals(), wanted, runs)
            if not lazy:
                return frame
            import dask.dataframe as dd

            return dd.from_pandas(frame, npartitions=1)
        paths = [str(self.folder / p) for p in self.parts]
        read = dict(columns=wanted, runs=None if runs is None else list(runs), source=self.source,
                    warmup=self.summaries.warmup)
        if not lazy:
            return pd.concat([_read_part(p, **read) for p in paths], ignore_index=True)
        import dask.dataframe as dd

        meta = pq.read_schema(paths[0]).empty_table().to_pandas()
        return dd.from_map(_read_part, paths, **read, meta=meta if wanted is None else meta[wanted],
                           label="read-step-intervals")


def entry(parts: Callable[[], list[Part]], scheduler: Any, key: str | None,
          rules: str | Mapping[str, str] = "mser") -> Entry:
    """The store entry of an input whose ``input_key`` is ``key`` (None only with the store off), written first when
    there is none: every part of ``parts()`` is read on ``scheduler`` (a ``dask.compute`` scheduler) and written, then
    summarized, each run's warm-up found by its rule in ``rules`` (one for every run, or by run_id)."""
    root = entries_dir("store")
    if root is None or key is None:
        return _in_memory(parts(), scheduler, rules)
    folder = root / key
    found = _open(folder, parts)
    try:
        if found is None:
            with holding(private_dir(root) / f".{folder.name}.lock"):  # one building the same entry finishes first
                found = _open(folder, parts)
                if found is None:
                    with building(folder, KEEP) as built:
                        _write(built, parts(), scheduler, rules)
                    found = _open(folder, parts)
    except OSError as exc:
        warn_once(f"the step-intervals store {root} cannot be written ({exc}): inputs are read from their "
                  "source into memory")
    return found if found is not None else _in_memory(parts(), scheduler, rules)


def _write(folder: Path, parts: list[Part], scheduler: Any, rules: str | Mapping[str, str]) -> None:
    """Build the entry in ``folder`` from ``parts``, read on ``scheduler`` in two passes: docs/data.md, "The store"."""
    import dask
    import dask.dataframe as dd

    (folder / "intervals").mkdir()
    (folder / "summaries").mkdir()
    targets = [str(folder / "intervals" / f"part-{i:05d}.parquet") for i in range(len(parts))]
    tasks = [dask.delayed(_write_part, nout=2)(part, target) for part, target in zip(parts, targets)]
    found = dd.from_delayed([t[0] for t in tasks], meta=_facts_frame({}), verify_meta=False)
    found, times = dask.compute(found, combine_step_times([t[1] for t in tasks]), scheduler=scheduler)
    settled = settled_times(times, rules)
    combined = dask.compute(*combine([dask.delayed(_settle_part, nout=3)(target, settled[1]) for target in targets]),
                            scheduler=scheduler)
    summaries = finish(*combined, settled)
    for name in FRAMES:
        write_frame(folder / "summaries" / f"{name}.parquet", getattr(summaries, name))
    facts = _joined({key: json.loads(values)} for key, values in zip(found["key"], found["values"]))
    seal(folder, {"format": FORMAT, "version": VERSION, "facts": facts})


def _read_part(path: str, columns: list[str] | None, runs: list[str] | None = None,
               source: Callable[[], list[Part]] | None = None, warmup: pd.DataFrame | None = None) -> pd.DataFrame:
    """One part file of an entry, its ``columns`` of the ``runs`` named: one partition. A part that cannot be read
    (its entry is then removed, to be built again) is read from its ``source``, its warm-up flagged from ``warmup``."""
    try:
        return read_frame(Path(path), columns, None if runs is None else [("run_id", "in", runs)])
    except Exception as exc:  # anything a damaged file raises
        if source is None or warmup is None:
            raise
        damaged("step-intervals store entry", Path(path).parent.parent, exc, "it is built again")
    return _select(settle(source()[int(Path(path).stem.removeprefix("part-"))]()[0], warmup), columns, runs)


def _select(frame: pd.DataFrame, columns: Sequence[str] | None, runs: Sequence[str] | None) -> pd.DataFrame:
    frame = frame if runs is None else frame[frame["run_id"].isin(list(runs))]
    return (frame if columns is None else frame[list(columns)]).reset_index(drop=True)


def _write_part(part: Part, target: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    frame, facts = part()
    if len(frame):
        write_frame(Path(target), frame)
    return _facts_frame(facts), step_times(frame)


def _facts_frame(facts: dict[str, list]) -> pd.DataFrame:
    """A part's facts as a frame (``key``, ``values`` as JSON), to be joined with the others' in one Dask graph
    (computed as delayed values beside the step times' frame, Dask would warn of mixed collections)."""
    return pd.DataFrame({"key": pd.Series(list(facts), dtype="string"),
                         "values": pd.Series([json.dumps(v) for v in facts.values()], dtype="string")})


def _settle_part(target: str, warmup: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    if not os.path.exists(target):
        return partials(empty_intervals())
    frame = read_frame(Path(target))
    settled = settle(frame, warmup)
    if settled is not frame:
        write_frame(Path(target), settled)
    return partials(settled)


def _joined(facts: Iterable[dict[str, list]]) -> dict[str, list]:
    joined: dict[str, list] = {}
    for part in facts:
        for key, values in part.items():
            joined.setdefault(key, []).extend(values)
    return joined


def _open(folder: Path, source: Callable[[], list[Part]]) -> Entry | None:
    """The entry in ``folder``; None when there is none, or it is not this format and version or does not check out
    (then it is removed, to be built again)."""
    if not folder.is_dir():
        return None
    try:
        content = open_entry(folder)
        if content.get("format") != FORMAT or content.get("version") != VERSION:
            raise Damaged(f"written as {content.get('format')} version {content.get('version')}")
        facts = content["facts"]
        if not isinstance(facts, dict) or not all(isinstance(v, list) for v in facts.values()):
            raise Damaged("its facts are not lists by name")
        summaries = Summaries(*(read_checked(folder, f"summaries/{name}.parquet", content["files"])
                                for name in FRAMES))
        parts = sorted(name for name in content["files"] if name.startswith("intervals/"))
    except Exception as exc:  # anything a damaged entry raises
        damaged("step-intervals store entry", folder, exc, "it is built again")
        return None
    return Entry(folder, facts, summaries, parts=parts, source=source)


def _in_memory(parts: list[Part], scheduler: Any, rules: str | Mapping[str, str]) -> Entry:
    read = [part() for part in parts]
    held = pd.concat([frame for frame, _ in read], ignore_index=True) if read else empty_intervals()
    summaries = summarize(held, scheduler, rules)
    return Entry(None, _joined(facts for _, facts in read), summaries, settle(held, summaries.warmup))
