"""Reading inputs, the one dispatcher: ``load_runs``, ``load_steps`` and ``load_summaries`` (docs/data.md, "Readers
and the dispatcher"). Each input is classified once (:func:`inputs`) and read by its kind's reader alone. The first
bad value raises ``DataError`` naming the file, the row (1-based; for CSV also the line) and the column. The result's
``attrs`` hold ``inputs`` and ``skipped`` (``(path, reason)`` pairs), as tuples (``trainperf.errors.provenance``).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.errors import DataError, DataWarning, NoMeasuredSteps, UnknownFormat, provenance
from trainperf.importers import detect, import_runs, reads_as_log, tensorboard_parts
from trainperf.partials import measured
from trainperf.reading import run_folders, store
from trainperf.reading import scheduler as schedule
from trainperf.reading.cache import entries_dir
from trainperf.reading.input_cache import cached, input_key
from trainperf.reading.tables import SUFFIXES as TABLE_SUFFIXES
from trainperf.reading.tables import is_claims_file, is_runs_table, is_steps_table, parts, read_runs_table

LOG_SUFFIXES = {".log", ".txt", ".out"}
"""In a folder, files with these endings are read as logs (a file named is read as one whatever its ending)."""
STEPS_PART_ROWS = 1 << 20
"""Rows of a steps table per part of the store (whole ranks)."""
RANK_STEPS_MAX = 64
"""Ranks up to which :func:`rank_step_times` reads each rank's step times."""
PINNED = "TRAINPERF_PINNED_INPUTS"
"""Environment variable: the inputs a report build read before its kernels
started (:func:`pin_inputs`), JSON ``{"<kind>:<resolved path>": {"key": its
input_key then, "read_at": Unix time (s), "last_step": {run_id: step}}}``.
Every reader of a pinned input reads the entry stored under that key."""


@dataclass(frozen=True)
class Kind:
    """A kind of input. ``sniff(path, found)``: whether ``path`` (``found`` in a folder, else named) is one; DataError
    where it looks like one that cannot be read. ``runs(path)`` (``(path, scheduler, key)`` where ``engine``) /
    ``entry(path, scheduler, key)``: its checked runs / its step intervals' store entry (None: it holds none);
    ``key``: the input's ``input_key``, when known."""

    sniff: Callable[[Path, bool], bool]
    runs: Callable[..., pd.DataFrame] | None = None
    entry: Callable[[Path, Any, str | None], store.Entry] | None = None
    engine: bool = False


def _is_log(path: Path, found: bool) -> bool:
    """A TensorBoard log dir; a table file the importers read (a column
    mapping, a Lightning ``metrics.csv``); any other file named, or found and
    recognised by an importer."""
    if path.is_dir():
        return bool(tensorboard_parts(path))
    if path.suffix.lower() in TABLE_SUFFIXES and (is_claims_file(path) or not reads_as_log(path)):
        return False
    if found:
        try:
            detect(path)
        except DataError as exc:
            raise DataError(f"not a log trainperf can read ({exc})", path=path) from exc
    return True


KINDS = {"run": Kind(lambda path, _: run_folders.is_run_folder(path), run_folders.read_runs, run_folders.entry, True),
         "log": Kind(_is_log, import_runs),
         "steps": Kind(lambda path, _: is_steps_table(path), entry=lambda path, scheduler, key: store.entry(
             partial(parts, path, STEPS_PART_ROWS), scheduler, key)),
         "table": Kind(lambda path, _: is_runs_table(path), read_runs_table)}
"""The kinds of input, in the order they are sniffed."""
STEP_KINDS = tuple(name for name, kind in KINDS.items() if kind.entry)


@dataclass(frozen=True)
class Input:
    """One input: its path, its kind (a name of :data:`KINDS`) and whether the user named it (else it was found)."""

    path: Path
    kind: str
    named: bool


def inputs(*paths: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[Input]:
    """Every input at or below ``paths``, classified (:func:`_walk`); a missing path is a DataError."""
    if not paths:
        raise DataError("no input given: name at least one file or folder")
    found: list[Input] = []
    for path in map(Path, paths):
        if not path.exists():
            raise DataError("no such file or folder", path=path)
        found += _walk(path, [] if skipped is None else skipped)
    return found


def _walk(path: Path, skipped: list[tuple[str, str]], found: bool = False) -> Iterator[Input]:
    """Every input at or below ``path``: itself as the first kind of :data:`KINDS` whose sniff recognises it, then, in
    a folder that is no run folder, every input below it but a TensorBoard log dir's own event files. What a folder
    holds that no kind recognises, or that cannot be read, is listed in ``skipped``; a path named (not ``found``)
    that cannot be read is refused."""
    try:
        kind = next((name for name, reader in KINDS.items() if reader.sniff(path, found)), None)
    except DataError as exc:
        if not found:
            raise
        skipped.append((str(path), str(exc).removeprefix(f"{path}: ")))
        return
    if kind is not None:
        yield Input(path, kind, not found)
    if kind == "run" or not path.is_dir():
        return
    log_dir = tensorboard_parts(path) if kind == "log" else set()
    for child in sorted(path.iterdir()):
        if child.name.startswith(".") or child in log_dir:
            continue
        if child.is_file() and child.stat().st_size == 0:
            skipped.append((str(child), "empty file"))
        elif child.is_dir() or child.suffix.lower() in {*TABLE_SUFFIXES, *LOG_SUFFIXES}:
            yield from _walk(child, skipped, found=True)
        else:
            skipped.append((str(child), "not a data file"))


def load_runs(*paths: str | Path, cache: bool = True, scheduler: Any = None) -> pd.DataFrame:
    """Read runs from tables, run folders, logs or folders of them into one canonical runs table (one row per run,
    schema columns plus any ``reported_*`` / ``extra_*``); steps tables found are skipped. Raises ``DataError`` on bad
    input or on a ``run_id`` that appears twice. With ``cache``, each input unchanged since it was last read comes
    from ``trainperf.reading.input_cache``. ``scheduler``: where run folders are aggregated
    (``trainperf.reading.scheduler``)."""
    frames: list[pd.DataFrame] = []
    read: list[str] = []
    skipped: list[tuple[str, str]] = []
    chosen = schedule(scheduler)
    found = inputs(*paths, skipped=skipped)
    for item in found:
        if KINDS[item.kind].runs is None:
            skipped.append((str(item.path), "steps table (one row per rank per step): read it with load_steps"))
            continue
        key = _key(item, pinned=cache)  # one hash for both caches
        try:
            frames.append(_runs(item, chosen, key, on=cache))
            read.append(str(item.path))
        except NoMeasuredSteps as exc:
            if item.named:  # named explicitly: the caller asked for this run
                raise
            skipped.append((str(item.path), f"still running or no measured step ({exc})"))
            warnings.warn(f"{item.path}: run skipped, still running or no measured step "
                          f"({str(exc).removeprefix(f'{item.path}: ')})", DataWarning, stacklevel=2)
        except UnknownFormat as exc:
            if item.named:
                raise
            skipped.append((str(item.path), f"not a log trainperf can read ({exc})"))
    if not frames:
        raise DataError("no runs tables, run folders or logs found", path=", ".join(map(str, paths)))
    runs = pd.concat(frames, ignore_index=True)
    duplicated = runs["run_id"].duplicated(keep="first")
    if duplicated.any():
        rid = runs["run_id"][duplicated].iloc[0]
        sources = runs.loc[runs["run_id"] == rid, "source"].astype(str).tolist() if "source" in runs else []
        raise DataError(f"run_id {rid!r} appears more than once" +
                        (f" (in {' and '.join(dict.fromkeys(sources))})" if sources else ""), column="run_id")
    runs.attrs = provenance(inputs=read, skipped=skipped, snapshots=snapshots(found) if cache else ())
    return runs


def _runs(item: Input, scheduler: Any, key: str | None, on: bool = True) -> pd.DataFrame:
    """The checked runs of one input (not a steps table), read by its kind's reader through the input cache (where
    ``on``); ``key``: its ``input_key``, when known."""
    kind = KINDS[item.kind]
    read = partial(kind.runs, item.path, scheduler, key) if kind.engine else partial(kind.runs, item.path)
    return cached(item.path, item.kind, key, read, on=on)


def pin_inputs(*paths: str | Path) -> dict[str, dict[str, Any]]:
    """Read every input at or below ``paths`` once, into the input cache and the store (a report build does, before
    its kernels start: docs/reports.md), and return what :data:`PINNED` holds for them; ``{}`` when the input cache
    is off. An input that cannot be read is left out, and warnings are not raised: its next reader says them."""
    if entries_dir("inputs") is None:
        return {}
    chosen = schedule()
    pins: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings(action="ignore"):
        for path in paths:
            try:
                found = inputs(path)
            except DataError:
                continue
            for item in found:
                try:
                    key, read_at = input_key(item.path, item.kind), time.time()
                    kind = KINDS[item.kind]
                    per_rank = kind.entry(item.path, chosen, key).summaries.per_rank if kind.entry else None
                except (DataError, OSError):
                    continue
                try:
                    if kind.runs:
                        _runs(item, chosen, key)
                except (DataError, OSError):
                    if per_rank is None:  # nothing read to pin
                        continue  # a run with no measured step yet is pinned: its readers find none in its steps
                last = {} if per_rank is None else per_rank.groupby("run_id", observed=True)["last_step"].max()
                pins[_pin_name(item)] = {"key": key, "read_at": read_at,
                                         "last_step": {str(r): int(s) for r, s in dict(last).items()}}
    return pins


def snapshots(found: Sequence[Input]) -> list[str]:
    """A sentence for each pinned input (:data:`PINNED`) of ``found`` whose files changed since it was pinned: it was
    still being written, and which snapshot is read."""
    pins = _pins()
    notes = []
    for item in (found if pins else []):
        pin = pins.get(_pin_name(item))
        if pin is None or input_key(item.path, item.kind) == pin["key"]:
            continue
        at = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(pin["read_at"]))
        steps = "; ".join(f"{run}: up to step {step}" for run, step in pin["last_step"].items())
        notes.append(f"{item.path} was still being written: every page of this build reads it as it was at "
                     f"{at}" + (f" ({steps})" if steps else ""))
    return notes


def _pins() -> dict[str, dict[str, Any]]:
    return json.loads(os.environ.get(PINNED) or "{}")


def _pin_name(item: Input) -> str:
    return f"{item.kind}:{item.path.resolve()}"


def _key(item: Input, pinned: bool = True) -> str | None:
    """The input's key in the caches: (where ``pinned``) the one pinned for it in this build (:data:`PINNED`), else its
    ``input_key``; None with the caches off."""
    if entries_dir("inputs") is None:
        return None
    return pinned and _pins().get(_pin_name(item), {}).get("key") or input_key(item.path, item.kind)


def _entries(paths: Sequence[str | Path], scheduler: Any) -> list[store.Entry]:
    """The store entries (each the one pinned for this build, if any) of the run folders and steps tables at or
    below ``paths`` (a file named is read as a steps table); DataError when there is none."""
    if not paths:
        raise DataError("no input given: name a run folder, a folder of them, or a steps table")
    found = [Input(Path(p), "steps", True) if Path(p).is_file() else item
             for p in paths for item in inputs(p) if Path(p).is_file() or item.kind in STEP_KINDS]
    if not found:
        raise DataError("no run folders (with manifest.json) or steps tables found", path=", ".join(map(str, paths)))
    chosen = schedule(scheduler)
    return [KINDS[item.kind].entry(item.path, chosen, _key(item)) for item in found]


def load_steps(*paths: str | Path, lazy: bool = False, scheduler: Any = None) -> Any:
    """The step intervals (``trainperf.schema.STEP_INTERVALS``: one row per rank per step) of run folders, steps-table
    files, or folders holding them. With ``lazy``, a Dask DataFrame (for runs too large to hold), else pandas."""
    frames = [found.intervals(lazy=lazy) for found in _entries(paths, scheduler)]
    if lazy:
        import dask.dataframe as dd

        return dd.concat(frames) if len(frames) > 1 else frames[0]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def load_summaries(*paths: str | Path, scheduler: Any = None) -> Summaries:
    """The :class:`~trainperf.aggregate.Summaries` (per rank, per step) of the run folders and steps tables at or below
    ``paths``: what the reports read instead of every step row."""
    return Summaries.concat([found.summaries for found in _entries(paths, scheduler)])


def rank_step_times(*paths: str | Path) -> pd.DataFrame:
    """Each rank's measured step times, ``run_id, rank, step, step_s`` (s), of the runs at or below ``paths`` that have
    at most :data:`RANK_STEPS_MAX` ranks (a larger run is compared by its per-rank summaries: ``load_summaries``).
    Only these columns of these runs are read."""
    frames = []
    for found in _entries(paths, None):
        ranks = found.summaries.per_rank.groupby("run_id", observed=True)["rank"].nunique()
        if small := [str(r) for r, n in ranks.items() if n <= RANK_STEPS_MAX]:
            steps = found.intervals(["run_id", "rank", "step", "step_s", "warmup", "includes_evaluation"], runs=small)
            frames.append(steps[measured(steps)])
    columns = ["run_id", "rank", "step", "step_s"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def holds_inputs(path: str | Path) -> bool:
    """Whether ``path`` is, or is a folder holding, a runs table, run folder or log (what :func:`load_runs` reads);
    False for a missing path or an empty folder. Every runs table found is read (a table is small) into the input
    cache, for the reports that read it next: DataError if one cannot be (a column that needs a mapping, a bad
    value), as for a run folder without its manifest. The warnings of those reads are raised when they are loaded."""
    found = list(_walk(Path(path), [])) if Path(path).exists() else []
    with warnings.catch_warnings(action="ignore"):
        for table in (item for item in found if item.kind == "table"):
            _runs(table, None, None)
    return any(item.kind != "steps" for item in found)


def holds_steps(path: str | Path) -> bool:
    """Whether ``path`` is a steps table, a run folder, or a folder holding them (what :func:`load_steps` reads)."""
    return Path(path).exists() and any(item.kind in STEP_KINDS for item in _walk(Path(path), []))
