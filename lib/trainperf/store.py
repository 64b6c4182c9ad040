"""The step-intervals store: each input's step intervals as Parquet, written on
its first read, and the aggregator's summaries of them.

An entry lives in ``store/<key>`` under trainperf's cache folder, beside the
input cache (``trainperf.input_cache``) and keyed the same way: the input's
path, the content of every file it holds, trainperf's source and the pandas
version. A changed input, or another version of trainperf, has another key,
so an entry is never misread; one whose ``entry.json`` does not say this
format and version (written by an older layout, or damaged) is built again.
An entry holds:

* ``intervals/part-NNNNN.parquet``: the step intervals, each file whole ranks
  of one run in the order they recorded them (what ``trainperf.aggregate``
  needs of a partition), with the warm-up found from the run's step times
  flagged (``trainperf.steady_state``);
* ``summaries.pkl``: the :class:`~trainperf.aggregate.Summaries` (per rank,
  per step: small; pickled, read in a millisecond);
* ``entry.json``: the format, the version, and what the reader learnt besides
  the intervals (``facts``: e.g. which ranks closed their profiler, the lines
  it skipped).

An entry is written in a temporary folder and renamed into place, so two
reports building at once never see half of one; a process that finds another
building the same entry waits for it (a lock file beside the entry) and
reads what it wrote. A store that cannot be
written (a read-only or full disk) is left alone: the input is read from its
source into memory, with one warning. ``TRAINPERF_INPUT_CACHE=off`` turns
the store off too.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from trainperf.aggregate import (Summaries, combine, combine_step_times, empty_intervals, finish, partials, settle,
                                 settled_times, step_times, summarize)
from trainperf.errors import DataWarning
from trainperf.input_cache import cache_dir as inputs_dir
from trainperf.input_cache import input_key

FORMAT = "trainperf-store"
VERSION = 1
ENTRY_FILE = "entry.json"
SUMMARIES_FILE = "summaries.pkl"
"""The summaries, pickled (they are small; the key holds the pandas version)."""
KEEP = 64
"""Entries kept; the least recently written beyond this are removed."""

Part = Callable[[], tuple[pd.DataFrame, dict[str, list]]]
"""Reads one part of an input: its step intervals (whole ranks) and facts
(lists, joined over the parts in order)."""

_warned: set[str] = set()


def store_dir() -> Path | None:
    """``store`` in trainperf's cache folder; ``None`` when the input cache is off."""
    inputs = inputs_dir()
    return None if inputs is None else inputs.with_name("store")


@dataclass
class Entry:
    """An input's step intervals, their summaries and the reader's facts: in a
    store ``folder``, or held in memory (``folder`` None)."""

    folder: Path | None
    facts: dict[str, list]
    summaries: Summaries
    held: pd.DataFrame | None = field(default=None, repr=False)

    def intervals(self, columns: Sequence[str] | None = None, *, runs: Sequence[str] | None = None,
                  lazy: bool = False) -> Any:
        """The step intervals (only ``columns``, of the ``runs`` named; default
        all): a pandas frame, or with ``lazy`` a Dask DataFrame over the store
        (a partition per part file: whole ranks)."""
        wanted = None if columns is None else list(columns)
        parts = sorted((self.folder / "intervals").glob("part-*.parquet")) if self.folder is not None else []
        if not parts:
            frame = self.held if self.held is not None else empty_intervals()
            frame = frame if runs is None else frame[frame["run_id"].isin(list(runs))]
            frame = frame if wanted is None else frame[wanted]
            if not lazy:
                return frame.reset_index(drop=True)
            import dask.dataframe as dd

            return dd.from_pandas(frame, npartitions=1)
        filters = None if runs is None else [("run_id", "in", list(runs))]
        if not lazy:
            return pd.concat([_read_part(str(p), wanted, filters) for p in parts], ignore_index=True)
        import dask.dataframe as dd

        meta = pq.read_schema(parts[0]).empty_table().to_pandas()
        return dd.from_map(_read_part, [str(p) for p in parts], columns=wanted, filters=filters,
                           meta=meta if wanted is None else meta[wanted], label="read-step-intervals")


def entry(path: Path, kind: str, parts: Callable[[], list[Part]], scheduler: Any = None,
          key: str | None = None, rules: str | Mapping[str, str] = "mser") -> Entry:
    """The store entry of input ``path`` read as ``kind`` (``key``: its
    ``input_key``, when the caller has it), written first when there is none:
    every part of ``parts()`` is read on ``scheduler`` (a ``dask.compute``
    scheduler) and written, then summarized, each run's warm-up found by its
    rule in ``rules`` (one for every run, or by run_id; see
    ``trainperf.aggregate.find_warmup``)."""
    root = store_dir()
    if root is None:
        return _in_memory(parts(), scheduler, rules)
    folder = root / (key or input_key(path, kind))
    found = _open(folder)
    if found is not None:
        return found
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = (root / f".{folder.name}.lock").open("a")
    except OSError as exc:
        return _unwritable(root, exc, parts, scheduler, rules)
    with lock:
        _wait_for(lock)  # a process building the same entry finishes first: its entry is read, not built again
        found = _open(folder)
        if found is not None:
            return found
        try:
            building = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
            try:
                _write(building, parts(), scheduler, rules)
                os.rename(building, folder)
            finally:
                shutil.rmtree(building, ignore_errors=True)
        except OSError as exc:
            return _unwritable(root, exc, parts, scheduler, rules)
    _prune(root)
    found = _open(folder)
    return found if found is not None else _in_memory(parts(), scheduler, rules)


def _wait_for(lock: Any) -> None:
    """Hold an exclusive lock on the open file ``lock``, waiting for its holder (released when it is closed)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): builds at once only duplicate work, the rename keeps one
        return
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)


def _unwritable(root: Path, exc: OSError, parts: Callable[[], list[Part]], scheduler: Any,
                rules: str | Mapping[str, str]) -> Entry:
    _warn_once(f"the step-intervals store {root} cannot be written ({exc}): inputs are read from their "
               "source into memory")
    return _in_memory(parts(), scheduler, rules)


def _write(folder: Path, parts: list[Part], scheduler: Any, rules: str | Mapping[str, str]) -> None:
    """Read every part on ``scheduler``, write it into ``folder`` and take its
    :func:`~trainperf.aggregate.step_times` in the same task (each part is read
    from its source once); find each run's warm-up from them; then flag it in
    every part file and take its :func:`~trainperf.aggregate.partials`, and
    combine them into the summaries."""
    import dask
    import dask.dataframe as dd

    (folder / "intervals").mkdir()
    targets = [str(folder / "intervals" / f"part-{i:05d}.parquet") for i in range(len(parts))]
    tasks = [dask.delayed(_write_part, nout=2)(part, target) for part, target in zip(parts, targets)]
    found = dd.from_delayed([t[0] for t in tasks], meta=_facts_frame({}), verify_meta=False)
    found, times = dask.compute(found, combine_step_times([t[1] for t in tasks]), scheduler=scheduler)
    settled = settled_times(times, rules)
    combined = dask.compute(*combine([dask.delayed(_settle_part, nout=3)(target, settled[1]) for target in targets]),
                            scheduler=scheduler)
    facts: dict[str, list] = {}
    for key, values in zip(found["key"], found["values"]):
        facts.setdefault(key, []).extend(json.loads(values))
    with (folder / SUMMARIES_FILE).open("wb") as handle:
        pickle.dump(finish(*combined, settled), handle, protocol=pickle.HIGHEST_PROTOCOL)
    (folder / ENTRY_FILE).write_text(json.dumps({"format": FORMAT, "version": VERSION, "facts": facts}))


def _read_part(path: str, columns: list[str] | None, filters: list | None = None) -> pd.DataFrame:
    """One part file of an entry (whole ranks, in the order recorded), its ``columns`` of the rows
    that pass ``filters`` (pyarrow's): one partition."""
    return pd.read_parquet(path, columns=columns, filters=filters)


def _write_part(part: Part, target: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a part, write it to ``target`` (nothing for a part without rows), and
    return its facts (:func:`_facts_frame`) and :func:`~trainperf.aggregate.step_times`."""
    frame, facts = part()
    if len(frame):
        frame.to_parquet(target, index=False)
    return _facts_frame(facts), step_times(frame)


def _settle_part(target: str, warmup: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The part file ``target`` with its runs' warm-up flagged
    (:func:`~trainperf.aggregate.settle`; written again where that changed
    it), and its :func:`~trainperf.aggregate.partials`."""
    if not os.path.exists(target):
        return partials(empty_intervals())
    frame = pd.read_parquet(target)
    settled = settle(frame, warmup)
    if settled is not frame:
        settled.to_parquet(target, index=False)
    return partials(settled)


def _facts_frame(facts: dict[str, list]) -> pd.DataFrame:
    """A part's facts as a frame (``key``, ``values`` as JSON), to be joined with the others'."""
    return pd.DataFrame({"key": pd.Series(list(facts), dtype="string"),
                         "values": pd.Series([json.dumps(v) for v in facts.values()], dtype="string")})


def _open(folder: Path) -> Entry | None:
    """The entry in ``folder``; None when there is none, or it is not this
    format and version or cannot be read (then it is removed, to be built again)."""
    if not folder.is_dir():
        return None
    try:
        meta = json.loads((folder / ENTRY_FILE).read_text())
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"written as {meta.get('format')} version {meta.get('version')}")
        with (folder / SUMMARIES_FILE).open("rb") as handle:
            summaries = pickle.load(handle)
        rows = sum(pq.read_metadata(part).num_rows for part in (folder / "intervals").glob("part-*.parquet"))
        if rows != summaries.rows:
            raise ValueError(f"its parts hold {rows} intervals, its summaries {summaries.rows}")
    except (OSError, ValueError, EOFError, pickle.UnpicklingError, AttributeError) as exc:  # pyarrow's are these too
        _warn_once(f"step-intervals store entry {folder} is not readable ({exc}): it is built again")
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return Entry(folder, meta.get("facts") or {}, summaries)


def _in_memory(parts: list[Part], scheduler: Any, rules: str | Mapping[str, str]) -> Entry:
    """An entry held in memory: every part read and joined, then summarized."""
    frames, facts = [], {}
    for part in parts:
        frame, part_facts = part()
        frames.append(frame)
        for key, values in part_facts.items():
            facts.setdefault(key, []).extend(values)
    held = pd.concat(frames, ignore_index=True) if frames else empty_intervals()
    summaries = summarize(held, scheduler, rules)
    return Entry(None, facts, summaries, settle(held, summaries.warmup))


def _prune(root: Path) -> None:
    """Keep the :data:`KEEP` most recently written entries, with their lock files."""
    try:
        entries = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in entries[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
        (root / f".{old.name}.lock").unlink(missing_ok=True)


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, DataWarning, stacklevel=3)
