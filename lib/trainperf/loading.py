"""Reading inputs, the one dispatcher: ``load_runs``, ``load_steps`` and
``load_summaries``.

Each input is classified once (:func:`inputs`) and handed to its one reader:

* ``table``: a runs table, CSV, JSON (a list of records, ``{"runs": [...]}``,
  or one record per line), JSON lines or Parquet with the canonical columns
  (``trainperf.tables``);
* ``run``: a run folder written by the profiler (it holds ``manifest.json``;
  ``trainperf.runfolder``), one runs row;
* ``steps``: a per-rank steps table, CSV or Parquet with ``rank`` and
  ``step`` (``trainperf.steps_table``);
* ``log``: a training log, or a CSV with a column-mapping sidecar
  (``trainperf.importers``);
* a folder: every table, run folder, log (``.log``, ``.txt``, ``.out``) and
  TensorBoard log dir (a folder of event files, directly or in ``rank_<N>``
  folders: one run, read as a log) below it. Other files (``.md``, ``.py``, sidecars) and text files that are
  no log trainperf can read are listed as skipped.

Run folders and steps tables are read into step intervals in the store
(``trainperf.store``, on their first read) and aggregated by the one
aggregator (``trainperf.aggregate``) on the engine's scheduler
(``trainperf.engine``): a run of thousands of ranks is read part by part,
never whole. ``load_runs`` leaves steps tables to ``load_steps`` and
``load_summaries`` (listed as skipped).

A report build reads each input once before its kernels start
(:func:`pin_inputs`) and hands the kernels the keys of what it read
(:data:`PINNED`): every page of the build reads those entries, so a run
folder still being written shows the same steps on every page, and the
pages say so.

Every value is checked against the schema; the first problem raises
``DataError`` naming the file, the row (1-based, as a spreadsheet numbers data
rows; for CSV also the line) and the column. The result's ``attrs`` hold
``inputs`` (files and folders read) and ``skipped`` (``(path, reason)`` pairs),
as tuples (``trainperf.errors.provenance``).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf import engine, store
from trainperf.aggregate import Summaries, incomplete, measure, stopped_early, summarize
from trainperf.errors import DataError, DataWarning, NoMeasuredSteps, UnknownFormat
from trainperf.goodput import goodput
from trainperf.importers import detect, import_path, reads_as_log, tensorboard_parts
from trainperf.input_cache import cache_dir, cached_read, input_key
from trainperf.partials import measured
from trainperf.errors import provenance
from trainperf.runfolder.manifest import MANIFEST_FILE, check_manifest
from trainperf.runfolder.rankfile import STEPS_FILE_PATTERN, BadLine, warn_bad_lines
from trainperf.runfolder.reader import RunFolder, model_parallel, open_run_folder, read_ranks, runs_row
from trainperf.steps_table import SUFFIXES as STEPS_SUFFIXES
from trainperf.steps_table import as_intervals, has_steps_columns, read_steps_table
from trainperf.table_rules import check_runs
from trainperf.tables import is_claims_file, read_raw, read_runs_table

TABLE_SUFFIXES = {".csv", ".json", ".jsonl", ".parquet"}
LOG_SUFFIXES = {".log", ".txt", ".out"}
"""In a folder, files with these endings are read as logs; a file named
explicitly is read as a log whatever its ending."""
STEP_KINDS = ("run", "steps")
"""The kinds of input that hold step intervals."""
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
class Input:
    """One input: its path, its kind (``table``, ``run``, ``steps`` or
    ``log``) and whether the user named it (else it was found in a folder)."""

    path: Path
    kind: str
    named: bool


def inputs(*paths: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[Input]:
    """Every input at or below ``paths``, classified. What a folder holds that
    is no input is listed in ``skipped`` (``(path, reason)``); a file named
    explicitly that no reader recognises is a DataError, as is a missing path."""
    if not paths:
        raise DataError("no input given: name at least one file or folder")
    found: list[Input] = []
    for path in map(Path, paths):
        if not path.exists():
            raise DataError("no such file or folder", path=path)
        found += [Input(item, kind, item == path) for item, kind in _walk(path, [] if skipped is None else skipped)]
    return found


def load_runs(*paths: str | Path, cache: bool = True, scheduler: Any = None) -> pd.DataFrame:
    """Read runs from tables, run folders, logs or folders of them into one
    canonical runs table (one row per run, schema columns plus any
    ``reported_*`` / ``extra_*``). Raises ``DataError`` on bad input or on a
    ``run_id`` that appears twice. With ``cache`` (the default), each input
    unchanged since it was last read comes from ``trainperf.input_cache``.
    ``scheduler``: where run folders are aggregated (``trainperf.engine``)."""
    frames: list[pd.DataFrame] = []
    read: list[str] = []
    skipped: list[tuple[str, str]] = []
    chosen = engine.scheduler(scheduler)
    for item in inputs(*paths, skipped=skipped):
        if item.kind == "steps":
            skipped.append((str(item.path), "steps table (one row per rank per step): read it with load_steps"))
            continue
        key = (_pinned_key(item) or input_key(item.path, item.kind)) if cache else None  # one hash for both caches
        reader = partial(_read_runs, item, chosen, key)
        try:
            frames.append(cached_read(item.path, item.kind, reader, key) if cache else reader())
        except NoMeasuredSteps as exc:
            if item.named:  # named explicitly: the caller asked for this run
                raise
            skipped.append((str(item.path), f"still running or no measured step ({exc})"))
            warnings.warn(f"{item.path}: run skipped, still running or no measured step "
                          f"({str(exc).removeprefix(f'{item.path}: ')})", DataWarning, stacklevel=2)
            continue
        except UnknownFormat as exc:
            if item.named:
                raise
            skipped.append((str(item.path), f"not a log trainperf can read ({exc})"))
            continue
        read.append(str(item.path))
    if not frames:
        raise DataError("no runs tables, run folders or logs found", path=", ".join(map(str, paths)))
    runs = pd.concat(frames, ignore_index=True)
    _check_unique(runs)
    runs.attrs = provenance(inputs=read, skipped=skipped, snapshots=snapshots(*paths) if cache else ())
    return runs


def pin_inputs(*paths: str | Path, scheduler: Any = None) -> dict[str, dict[str, Any]]:
    """Read every input at or below ``paths`` once, into the input cache and
    the store, and return what :data:`PINNED` holds for them: the key each was
    stored under, when, and the last step of each run. ``{}`` when the input
    cache is off. An input that cannot be read (bad data, a file that cannot
    be opened) is left out: whoever reads it next says why; warnings are left
    to those readers too."""
    if cache_dir() is None:
        return {}
    chosen = engine.scheduler(scheduler)
    pins: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in paths:
            try:
                found = inputs(path)
            except DataError:
                continue
            for item in found:
                try:
                    key, read_at = input_key(item.path, item.kind), time.time()
                    per_rank = _entry(item, chosen, key=key).summaries.per_rank if item.kind in STEP_KINDS else None
                except (DataError, OSError):
                    continue
                try:
                    if item.kind != "steps":
                        cached_read(item.path, item.kind, partial(_read_runs, item, chosen, key), key)
                except (DataError, OSError):
                    if per_rank is None:  # nothing read to pin
                        continue  # a run with no measured step yet is pinned: its readers find none in its steps
                last = {} if per_rank is None else per_rank.groupby("run_id", observed=True)["last_step"].max()
                pins[_pin_name(item)] = {"key": key, "read_at": read_at,
                                         "last_step": {str(r): int(s) for r, s in dict(last).items()}}
    return pins


def snapshots(*paths: str | Path) -> list[str]:
    """A sentence for each pinned input (:data:`PINNED`) at or below ``paths``
    whose files changed since it was pinned: it was still being written, and
    which snapshot is read."""
    pins = _pins()
    notes = []
    for item in (inputs(*paths) if pins else []):
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


def _pinned_key(item: Input) -> str | None:
    """The cache key pinned for the input in this build (:data:`PINNED`), if any."""
    return _pins().get(_pin_name(item), {}).get("key")


def load_steps(*paths: str | Path, lazy: bool = False, scheduler: Any = None) -> Any:
    """The step intervals (``trainperf.schema.STEP_INTERVALS``: one row per rank
    per step) of run folders, folders holding run folders (searched
    recursively), or steps-table files. With ``lazy``, a Dask DataFrame (for
    runs too large to hold: compute what you need of it), else a pandas frame."""
    chosen = engine.scheduler(scheduler)
    frames = [_entry(item, chosen, key=_pinned_key(item)).intervals(lazy=lazy) for item in _step_inputs(paths)]
    if lazy:
        import dask.dataframe as dd

        return dd.concat(frames) if len(frames) > 1 else frames[0]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def load_summaries(*paths: str | Path, scheduler: Any = None) -> Summaries:
    """The :class:`~trainperf.aggregate.Summaries` (per rank, per step) of the
    run folders and steps tables at or below ``paths``: what the reports read
    instead of every step row."""
    chosen = engine.scheduler(scheduler)
    return Summaries.concat([_entry(item, chosen, key=_pinned_key(item)).summaries for item in _step_inputs(paths)])


def rank_step_times(*paths: str | Path, max_ranks: int = RANK_STEPS_MAX, scheduler: Any = None) -> pd.DataFrame:
    """Each rank's measured step times, ``run_id, rank, step, step_s`` (s), of
    the runs at or below ``paths`` that have at most ``max_ranks`` ranks (a
    per-rank comparison of a run of thousands of ranks reads its per-rank
    summaries instead: ``load_summaries``). Only these columns of these runs are read."""
    chosen = engine.scheduler(scheduler)
    frames = []
    for item in _step_inputs(paths):
        found = _entry(item, chosen, key=_pinned_key(item))
        ranks = found.summaries.per_rank.groupby("run_id", observed=True)["rank"].nunique()
        small = [str(r) for r, n in ranks.items() if n <= max_ranks]
        if small:
            steps = found.intervals(["run_id", "rank", "step", "step_s", "warmup", "includes_evaluation"], runs=small)
            frames.append(steps[measured(steps)])
    columns = ["run_id", "rank", "step", "step_s"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def aggregate_steps(steps: pd.DataFrame, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One canonical runs row per ``run_id`` of step intervals (a steps table),
    measured by ``trainperf.aggregate.measure``. ``manifests`` maps a run_id to
    its run manifest (``manifest.json``'s content): its ``config`` keys become
    columns, its environment gives ``gpus``, ``nodes``, ``platform``, ... (see
    ``trainperf.runfolder.reader.runs_row``); without one, ``gpus`` is the number
    of ranks."""
    missing = [c for c in ("run_id", "rank", "step") if c not in steps.columns]
    if missing:
        raise DataError(f"not a steps table: missing column(s) {', '.join(missing)}")
    if steps.empty:
        raise DataError("no steps to aggregate")
    return summarized_runs(summarize(as_intervals(steps)), manifests)


def summarized_runs(summaries: Summaries, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One canonical runs row per run of ``summaries`` (``manifests`` as in
    :func:`aggregate_steps`): the runs of steps tables without holding their
    step rows (``summarized_runs(load_summaries(path))``)."""
    manifests = manifests or {}
    rows = []
    for run_id in summaries.run_ids:
        manifest = dict(manifests.get(run_id) or {})
        manifest["config"] = {"run_id": run_id, **(manifest.get("config") or {})}
        check_manifest(manifest, f"manifest of run {run_id}")
        rows.append(_runs_row(RunFolder(Path(run_id), manifest, ()), summaries, None, required=False))
    return pd.DataFrame(rows)


def holds_inputs(path: str | Path) -> bool:
    """Whether ``path`` is, or is a folder holding, a runs table, run folder or log
    (what :func:`load_runs` reads); False for a missing path or an empty folder.
    Every runs table found is read (a table is small) through the input cache,
    so that the reports that read it next find it there: DataError if one
    cannot be (a column of its own that needs a mapping, a bad value), as for
    ``path`` a run folder without its manifest. Warnings of those reads are
    raised again when the tables are loaded, not here."""
    path = Path(path)
    found = list(_walk(path, [])) if path.exists() else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for table in (where for where, kind in found if kind == "table"):
            cached_read(table, "table", partial(read_runs_table, table))
    return any(kind != "steps" for _, kind in found)


def holds_steps(path: str | Path) -> bool:
    """Whether ``path`` is a steps table, a run folder, or a folder holding
    them (what :func:`load_steps` reads)."""
    path = Path(path)
    return path.exists() and any(kind in STEP_KINDS for _, kind in _walk(path, []))


def _walk(path: Path, skipped: list[tuple[str, str]], in_folder: bool = False) -> Iterator[tuple[Path, str]]:
    """``(path, kind)`` of every input at or below ``path``. A file found in
    a folder that no reader recognises is listed in ``skipped``; one named
    explicitly is read as a log (and refused there if it is none)."""
    if path.is_dir():
        if (path / MANIFEST_FILE).exists():
            yield path, "run"
            return
        if any(STEPS_FILE_PATTERN.match(child.name) for child in path.iterdir()):
            why = (f"a run folder without {MANIFEST_FILE}: the profiler writes it next to the steps-rank files "
                   "when the run starts (its configuration, devices and peak); copy it with them")
            if not in_folder:
                raise DataError(why, path=path)
            skipped.append((str(path), why))
            return
        try:
            log_dir = tensorboard_parts(path)
        except DataError as exc:
            if not in_folder:
                raise
            skipped.append((str(path), str(exc).removeprefix(f"{path}: ")))
            return
        if log_dir:
            yield path, "log"
        for child in sorted(path.iterdir()):
            if child.name.startswith(".") or child in log_dir:
                continue
            if child.is_file() and child.stat().st_size == 0:
                skipped.append((str(child), "empty file"))
            elif child.is_dir() or child.suffix.lower() in TABLE_SUFFIXES | LOG_SUFFIXES:
                yield from _walk(child, skipped, in_folder=True)
            else:
                skipped.append((str(child), "not a data file"))
        return
    if path.suffix.lower() == ".csv" and is_claims_file(path):
        why = "a claims file (what a report concluded, not runs): give it to the reports as -p claims PATH"
        if not in_folder:
            raise DataError(why, path=path)
        skipped.append((str(path), why))
        return
    if path.suffix.lower() in TABLE_SUFFIXES and not reads_as_log(path):
        yield path, "steps" if _is_steps_table(path) else "table"
        return
    if in_folder:
        try:
            detect(path)
        except DataError as exc:
            skipped.append((str(path), f"not a log trainperf can read ({exc})"))
            return
    yield path, "log"


def _is_steps_table(path: Path) -> bool:
    if path.suffix.lower() in STEPS_SUFFIXES:
        return has_steps_columns(path)
    return {"rank", "step"} <= set(read_raw(path).columns)


def _step_inputs(paths: Sequence[str | Path]) -> list[Input]:
    """The run folders and steps tables at or below ``paths`` (a file named is
    read as a steps table, and refused there if it is none); DataError when there is none."""
    if not paths:
        raise DataError("no input given: name a run folder, a folder of them, or a steps table")
    found = [Input(Path(p), "steps", True) if Path(p).is_file() else item
             for p in paths for item in inputs(p) if Path(p).is_file() or item.kind in STEP_KINDS]
    if not found:
        raise DataError("no run folders (with manifest.json) or steps tables found", path=", ".join(map(str, paths)))
    return found


def _read_runs(item: Input, scheduler: Any, key: str | None = None) -> pd.DataFrame:
    """The checked runs of one input (not a steps table); ``key``: its ``input_key``, when known."""
    if item.kind == "table":
        return read_runs_table(item.path)
    if item.kind == "log":
        return check_runs(import_path(item.path).runs, item.path)
    folder = open_run_folder(item.path)
    entry = _entry(item, scheduler, folder, key)
    return check_runs(pd.DataFrame([_runs_row(folder, entry.summaries, entry.facts)]), item.path)


def _entry(item: Input, scheduler: Any, folder: RunFolder | None = None, key: str | None = None) -> store.Entry:
    """The store entry of a run folder or steps table, written on its first read
    (``key``: the input's ``input_key``, when known). A run folder's lines that
    could not be read are reported in one DataWarning."""
    if item.kind == "run":
        folder = folder or open_run_folder(item.path)
        found = store.entry(item.path, item.kind, partial(_run_parts, folder), scheduler, key, folder.warmup_rule)
        bad = [BadLine(Path(path), line, reason) for path, line, reason in found.facts.get("bad_lines", [])]
        events = any(STEPS_FILE_PATTERN.match(b.path.name) is None for b in bad)
        warn_bad_lines(bad, "steps and events files" if events else "steps files", stacklevel=3)
        return found
    return store.entry(item.path, item.kind, partial(_steps_table_parts, item.path), scheduler, key)


def _run_parts(folder: RunFolder) -> list[store.Part]:
    return [partial(_run_part, folder, files) for files in folder.parts()]


def _run_part(folder: RunFolder, files: Sequence[tuple[int, Path]]) -> tuple[pd.DataFrame, dict[str, list]]:
    read = read_ranks(folder, files, threads=1)
    return read.intervals, {"closed": read.closed, "wall_s": read.wall_s, "outside": read.outside,
                            "waited_for": read.waited_for,
                            "bad_lines": [[str(b.path), b.line, b.reason] for b in read.bad_lines],
                            "out_of_memory": read.out_of_memory, "memory_checked": read.memory_checked}


def _steps_table_parts(path: Path) -> list[store.Part]:
    intervals = read_steps_table(path)
    return [partial(_held, chunk) for chunk in _whole_ranks(intervals, STEPS_PART_ROWS)]


def _held(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list]]:
    return frame, {}


def _whole_ranks(intervals: pd.DataFrame, rows: int) -> list[pd.DataFrame]:
    """``intervals`` (sorted by run and rank) cut into pieces of one run each and
    at most ``rows`` rows (or one rank, when a rank has more), never inside a rank."""
    run, rank = intervals["run_id"].to_numpy(), intervals["rank"].to_numpy()
    new_run = run[1:] != run[:-1]
    bounds = [0, *(np.flatnonzero(new_run | (rank[1:] != rank[:-1])) + 1).tolist(), len(intervals)]
    runs = set((np.flatnonzero(new_run) + 1).tolist())
    pieces, begin = [], 0
    for start, end in zip(bounds[:-1], bounds[1:]):  # each rank's rows
        if start > begin and (start in runs or end - begin > rows):
            pieces.append(intervals.iloc[begin:start])
            begin = start
    pieces.append(intervals.iloc[begin:])
    return pieces


def _runs_row(folder: RunFolder, summaries: Summaries, facts: Mapping[str, list] | None,
              required: bool = True) -> dict[str, Any]:
    """The runs row of a run (a run folder; a steps table's run without one)
    from the summaries of its step intervals and the reader's ``facts``;
    :class:`NoMeasuredSteps` when none is measured and the row is ``required``,
    unless a step ran out of memory (then the row says that it does not fit)."""
    run = summaries.of(folder.run_id)
    out_of_memory = (facts or {}).get("out_of_memory", [])
    if required and not out_of_memory and not run.per_rank["measured_intervals"].gt(0).any():
        lines = int(run.per_rank["intervals"].sum())
        raise NoMeasuredSteps(f"no measured steps: {lines} step line(s){', all warm-up' if lines else ''} "
                              f"(warmup_steps = {folder.manifest.get('warmup_steps')})", path=folder.path)
    world = folder.world_size
    expected = range(world) if world else sorted(run.per_rank["rank"].astype(int))
    closed = None if facts is None else facts.get("closed", [])
    stopped = stopped_early(run.per_rank, expected, closed)
    if stopped:
        warnings.warn(incomplete(folder.run_id, stopped), DataWarning, stacklevel=4)
    measured = measure(summaries, folder.run_id, expected_ranks=expected, closed_ranks=closed, batch_facts=True,
                       model_parallel=model_parallel(folder.config))
    facts = facts or {}
    measured.update(memory_verdict(out_of_memory, facts.get("memory_checked", []), expected, measured.get("ooms")))
    measured.update(goodput(run.per_rank, {int(r): w for r, w in facts.get("wall_s", [])}, facts.get("outside", [])))
    waited = sorted({(int(rank), str(name)) for rank, name in facts.get("waited_for", [])})
    if waited and measured.get("wait_outside_s", 0.0) > 0:
        measured["wait_outside_for"] = ", ".join(f"rank {rank}'s {name}" for rank, name in waited)
    return runs_row(folder, measured, run.per_rank["node"].astype(str).tolist())


def memory_verdict(out_of_memory: Sequence[Sequence[int]], checked: Sequence[int], expected: Sequence[int],
                   ooms: int | None) -> dict[str, Any]:
    """Whether a run fits its devices, from the steps that ran out of memory
    (``[rank, step, ooms]`` each) and the ranks whose steps files can record
    them: ``fits`` false where a step did (``ooms`` counts their errors too,
    ``extra_out_of_memory`` names them), true where every expected rank could
    record one and none did; nothing where not known."""
    if out_of_memory:
        where = "; ".join(f"rank {rank} step {step}" for rank, step, _ in out_of_memory)
        return {"fits": False, "ooms": int(ooms or 0) + sum(int(n) for *_, n in out_of_memory),
                "extra_out_of_memory": where}
    return {"fits": True} if set(expected) <= set(checked) else {}


def _check_unique(runs: pd.DataFrame) -> None:
    duplicated = runs["run_id"].duplicated(keep="first")
    if duplicated.any():
        rid = runs["run_id"][duplicated].iloc[0]
        sources = runs.loc[runs["run_id"] == rid, "source"].astype(str).tolist() if "source" in runs else []
        raise DataError(f"run_id {rid!r} appears more than once" +
                        (f" (in {' and '.join(dict.fromkeys(sources))})" if sources else ""), column="run_id")
