"""Reading a run folder: its manifest, its ranks' steps files as step intervals in parts of whole ranks
(:data:`PART_BYTES` each, so that a run of thousands of ranks is read part by part), what each rank did outside
its steps, and the runs row its measurements make (``run_id`` defaults to the folder's name, ``experiment`` to its
parent's, ``source`` to its path).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from trainperf.aggregate import repeated_steps
from trainperf.errors import DataError, DataWarning
from trainperf.runfolder.eventfile import EVENTS_FILE, read_events
from trainperf.runfolder.manifest import MANIFEST_FILE, read_manifest
from trainperf.runfolder.rankfile import (LINE_COLUMNS, STEPS_FILE_PATTERN, TIME_DECIMALS, BadLine, RankFile,
                                         empty_columns, read_rank_file)
from trainperf.runfolder.tail import StepsTail
from trainperf.schema import INPUT_COLUMNS, PREFIXES, STEP_INTERVAL_COLUMNS

PART_BYTES = 48 << 20
"""Steps-file bytes per part (about 300,000 steps): what one reader holds at once."""
WRITTEN_TO_S = 2 * 10.0 ** -TIME_DECIMALS
"""How far two times of the files may differ and still be one instant (s): each is written rounded to
``TIME_DECIMALS`` decimals (1 µs), so a step's start plus its length may land a microsecond past the phase that
began when the step ended."""
BATCH_FACTS = ("grad_accum_steps", "micro_batch_size", "global_batch_size")
"""Measurements that fill in the run's configuration where it has none."""


@dataclass(frozen=True)
class RunFolder:
    """A run folder, opened: its manifest (``config`` with the defaults above) and its steps files, ``(rank, path)``
    by rank."""

    path: Path
    manifest: dict[str, Any]
    rank_files: tuple[tuple[int, Path], ...]

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest["config"]

    @property
    def run_id(self) -> str:
        return str(self.config["run_id"])

    @property
    def environment(self) -> Mapping[str, Any]:
        return self.manifest.get("environment") or {}

    @property
    def world_size(self) -> int | None:
        world = self.environment.get("world_size")
        return int(world) if world else None

    def parts(self) -> list[Callable[[], tuple[pd.DataFrame, dict[str, list]]]]:
        """Readers (:func:`read_ranks`) of the steps files in groups of whole ranks of about :data:`PART_BYTES` each:
        the parts of its store entry."""
        groups: list[list[tuple[int, Path]]] = [[]]
        size = 0
        for rank, path in self.rank_files:
            length = path.stat().st_size
            if groups[-1] and size + length > PART_BYTES:
                groups.append([])
                size = 0
            groups[-1].append((rank, path))
            size += length
        upto = self.written_by_all()
        return [partial(read_ranks, self, tuple(g), upto) for g in groups if g]

    def written_by_all(self) -> int | None:
        """While no rank has closed its steps file (the run is still being written), the last step every rank that
        wrote one has written: a rank writes its steps in batches, so one file may run ahead of another, and the steps
        beyond this one are not yet the job's (their tokens would count against the time of only part of the ranks).
        None once a rank closed its file (the job ended: a rank still open stopped early), or while none wrote a
        step."""
        last = []
        for _, path in self.rank_files:
            tail = StepsTail(path)
            rows = tail.read()
            if tail.closed:
                return None
            if rows:
                last.append(rows[-1][0])
        return int(min(last)) if last else None


def open_run_folder(path: str | Path) -> RunFolder:
    """Open a run folder: read its manifest (checked) and list its steps files; DataError naming a steps file whose
    rank lies beyond the manifest's ``world_size``."""
    path = Path(path)
    manifest = read_manifest(path / MANIFEST_FILE)
    config = dict(manifest.get("config") or {})
    config.setdefault("run_id", path.name)
    config.setdefault("experiment", path.resolve().parent.name)
    config.setdefault("source", str(path))
    files = sorted((int(m.group(1)), p) for p in path.iterdir() if (m := STEPS_FILE_PATTERN.match(p.name)))
    folder = RunFolder(path, {**manifest, "config": config}, tuple(files))
    world = folder.world_size
    if world and files and files[-1][0] >= world:
        raise DataError(f"rank {files[-1][0]} is beyond the manifest's world_size, {world} (ranks 0 to {world - 1})",
                        path=files[-1][1])
    return folder


def read_ranks(folder: RunFolder, files: Sequence[tuple[int, Path]] | None = None,
               upto: int | None = None) -> tuple[pd.DataFrame, dict[str, list]]:
    """The step intervals of ``files`` (default: every rank of the run), rank by rank, each in the order written, up
    to step ``upto`` where given (:meth:`RunFolder.written_by_all`), and the facts read besides them (lists, joined
    over a run's parts): ``closed``, the ranks whose file ends with the end line; ``bad_lines``, ``[file, line,
    reason]`` of each line skipped (malformed, truncated or repeated); ``out_of_memory``, ``[rank, step, ooms]`` of
    each step that ran out of memory (no intervals); ``memory_checked``, the ranks whose file can record them;
    ``ahead``, ``[rank, lines, last step]`` of each rank whose lines beyond ``upto`` were left out, as it had written
    them; ``wall_s``, ``[rank, seconds]`` of each closed rank's wall clock; ``outside``, what each rank did outside its
    steps (:func:`outside_seconds`); ``waited_for``, the ``[rank, phase]`` pairs others waited for
    (:func:`outside_waits`)."""
    read = [_read_rank_file(path) for _, path in (folder.rank_files if files is None else files)]
    out_of_memory = [[f.rank, int(step), int(np.nan_to_num(ooms, nan=1.0))] for f in read
                     for step, ooms in zip(*(f.columns[c][f.columns["out_of_memory"]] for c in ("step", "ooms")))]
    ahead = []
    for f in read:
        _keep(f, ~f.columns["out_of_memory"])  # a step that ran out of memory is run again under its number
        _read_once(f)
        if upto is not None and (later := f.columns["step"] > upto).any():
            ahead.append([f.rank, len(later), int(f.columns["step"].max())])
            _keep(f, ~later)
    nodes = {r["rank"]: r.get("node") for r in folder.environment.get("ranks", [])}
    counts = np.array([len(f.columns["step"]) for f in read], dtype=np.int64)
    total = int(counts.sum())
    data: dict[str, Any] = {
        "run_id": _repeat_strings([folder.run_id], np.array([total])),
        "rank": np.repeat(np.array([f.rank for f in read], dtype=np.int64), counts),
        "node": _repeat_strings([f.node or nodes.get(f.rank) or "" for f in read], counts),
        "n_steps": np.ones(total), "includes_evaluation": np.zeros(total, dtype=bool),
        "compute_s": np.full(total, np.nan),
    }
    columns = [f.columns for f in read] or [empty_columns(LINE_COLUMNS)]
    data.update({name: np.concatenate([c[name] for c in columns]) for name in LINE_COLUMNS})
    data["micro_steps"] = data["micro_steps"].astype(np.float64)
    waits, waited_for = outside_waits(folder, read)
    data["wait_outside_s"] = np.concatenate([waits[f.rank] for f in read]) if waits else np.full(total, np.nan)
    if waits:
        for name in ("comm_s", "comm_exposed_s"):  # the wait is booked as what it waits for, not communication
            data[name] = data[name] - np.nan_to_num(data["wait_outside_s"])
    # a column each, not consolidated into one block: building the frame copies nothing
    intervals = pd.DataFrame({name: pd.Series(data[name], copy=False) for name in STEP_INTERVAL_COLUMNS}, copy=False)
    outside, bad_events = outside_seconds(folder.path, read)
    bad = [*(b for f in read for b in f.bad_lines), *bad_events]
    return intervals, {"closed": [f.rank for f in read if f.closed], "outside": outside, "waited_for": waited_for,
                       "wall_s": [[f.rank, f.wall_s] for f in read if f.wall_s is not None],
                       "bad_lines": [[str(b.path), b.line, b.reason] for b in bad], "out_of_memory": out_of_memory,
                       "memory_checked": [f.rank for f in read if "out_of_memory" in f.written], "ahead": ahead}


def _keep(rank_file: RankFile, kept: np.ndarray) -> None:
    """Keep only the step lines of ``rank_file`` where ``kept`` is true."""
    if not kept.all():
        rank_file.columns = {name: values[kept] for name, values in rank_file.columns.items()}
        rank_file.lines = rank_file.lines[kept]


def outside_waits(folder: RunFolder, read: Sequence[RankFile]) -> tuple[dict[int, np.ndarray], list[list[Any]]]:
    """Per rank of ``read``, per step line: the seconds of its exposed communication spent waiting for another
    rank's phases outside the steps, and the ``[rank, phase]`` pairs waited for (docs/profiler.md, "Usage": a
    phase rank R timed between its steps k and k + 1 delays every other rank's step k + 1, whose wait is
    ``min(comm_exposed_s, max(0, L_R − L_r))``). Every rank's events file is read, not only those of ``read``.
    Empty where no rank timed a phase between its steps, or where the run's communication is sampled in windows
    (``comm_measurement`` in its config: FSDP), not a time of each step."""
    if folder.config.get("comm_measurement"):
        return {}, []
    mine = {f.rank: f for f in read}
    before: dict[int, dict[int, float]] = {}  # rank -> step -> seconds outside the steps just before it
    names: dict[tuple[int, int], list[str]] = {}
    for rank, path in folder.rank_files:
        events = folder.path / EVENTS_FILE.format(rank=rank)
        if not events.exists():
            continue
        phases, _ = read_events(events)  # its bad lines are listed by outside_seconds
        columns = (mine[rank] if rank in mine else _read_rank_file(path)).columns
        end = columns["start_s"] + columns["step_s"]
        for phase in phases:
            ended = int(np.searchsorted(end, phase.start_s + WRITTEN_TO_S, side="right"))
            if 0 < ended < len(end):
                step = int(columns["step"][ended])
                spent = before.setdefault(rank, {})
                spent[step] = spent.get(step, 0.0) + phase.seconds
                names.setdefault((rank, step), []).append(phase.name)
    if not before:
        return {}, []
    waits, waited = {}, set()
    for f in read:
        own = before.get(f.rank, {})
        wait = np.zeros(f.steps)
        for i, step in enumerate(f.columns["step"].tolist()):
            others = [(spent.get(step, 0.0), rank) for rank, spent in before.items() if rank != f.rank]
            longest, rank = max(others, default=(0.0, -1))
            wait[i] = max(0.0, longest - own.get(step, 0.0))
            if wait[i] > 0:
                waited.update((rank, name) for name in names[(rank, step)])
        waits[f.rank] = np.minimum(f.columns["comm_exposed_s"], wait)
    return waits, [list(pair) for pair in sorted(waited)]


def outside_seconds(run_dir: Path, read: Sequence[Any]) -> tuple[list[list[Any]], list[BadLine]]:
    """What the ranks of ``read`` (their steps files, read) did outside their steps, from their events files: ``[rank,
    phase, before_s, between_s, after_s]`` per rank and phase name, the seconds of that phase before the rank's first
    step began, between its steps, and after its last step ended (all "before" for a rank without steps); and the
    events lines that could not be read."""
    found: list[list[Any]] = []
    bad: list[BadLine] = []
    for rank_file in read:
        path = run_dir / EVENTS_FILE.format(rank=rank_file.rank)
        if not path.exists():
            continue
        try:
            phases, skipped = read_events(path)
        except OSError as exc:
            raise DataError(f"cannot read events file: {exc}", path=path) from exc
        bad += skipped
        start, seconds = rank_file.columns["start_s"], rank_file.columns["step_s"]
        first = float(np.nanmin(start)) if np.isfinite(start).any() else math.inf
        last = float(np.nanmax(start + seconds)) if np.isfinite(start + seconds).any() else math.inf
        sums: dict[str, list[float]] = {}
        for phase in phases:
            where = 0 if phase.end_s <= first + WRITTEN_TO_S else 2 if phase.start_s >= last - WRITTEN_TO_S else 1
            sums.setdefault(phase.name, [0.0, 0.0, 0.0])[where] += phase.seconds
        found += [[rank_file.rank, name, *seconds_by_place] for name, seconds_by_place in sums.items()]
    return found, bad


def _read_once(rank_file: RankFile) -> None:
    """Drop the step lines of ``rank_file`` that repeat an earlier one exactly (listed with its bad lines);
    DataError naming the file, the step and both lines where a step is recorded twice with different values (the
    file is damaged, or two jobs wrote it)."""
    found = repeated_steps(rank_file.columns)
    if found is None:
        return
    step, lines = rank_file.columns["step"], rank_file.lines
    if found.conflicts:
        earlier, later = found.conflicts[0]
        raise DataError(f"step {step[later]} is recorded twice with different values (lines {lines[earlier]} and "
                        f"{lines[later]}): the file is damaged, or two jobs wrote it", path=rank_file.path)
    rank_file.bad_lines += [BadLine(rank_file.path, int(lines[i]), f"step {step[i]} again, the same as line "
                                    f"{lines[first]}: read once") for i, first in found.copies]
    rank_file.bad_lines.sort(key=lambda b: b.line)
    _keep(rank_file, found.keep)


def _read_rank_file(path: Path) -> RankFile:
    try:
        return read_rank_file(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read steps file: {exc}", path=path) from exc


def _repeat_strings(values: list[str], counts: np.ndarray) -> pd.Series:
    """A string column holding ``values[i]`` ``counts[i]`` times (built by Arrow from codes: fast for many rows)."""
    codes = np.repeat(np.arange(len(values), dtype=np.int32), counts)
    strings = pa.array(values, type=pa.large_string()).take(pa.array(codes))
    return pd.Series(strings, dtype=pd.StringDtype("pyarrow", na_value=np.nan))


def model_parallel(config: Mapping[str, Any]) -> float:
    """Ranks that share their samples: tensor × pipeline × context parallel degrees."""
    return math.prod(float(config.get(k) or 1) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))


def oversubscribed(environment: Mapping[str, Any]) -> bool | None:
    """Whether the run competed for its host's CPU, from the manifest's ``host`` (rank 0's host at the start: cores,
    load average, torch threads per process) and the ranks on that host: on CPU, more processes × threads than cores;
    on any device, a load average above the core count (other work was running). None where not recorded."""
    host = environment.get("host") or {}
    cores = host.get("cores")
    if not cores:
        return None
    ranks = environment.get("ranks") or []
    on_host = sum(1 for r in ranks if r.get("node") == ranks[0].get("node")) if ranks else 1
    busy = on_host * (host.get("threads_per_process") or 1) if environment.get("device") == "cpu" else 0
    load = host.get("load_average")
    return busy > cores or (load is not None and load > cores)


def runs_row(folder: RunFolder, measured: Mapping[str, Any], nodes_seen: Sequence[str]) -> dict[str, Any]:
    """The run's runs row: its ``config`` keys as columns (non-canonical keys as ``extra_<key>``), its ``measured``
    columns (``trainperf.aggregate.measure``), ``gpus`` (the world size, else the ranks that recorded steps) and
    ``nodes`` (the manifest's, else those of ``nodes_seen``), with a DataWarning where the config says otherwise; and,
    where the config has none, what the profiler found (the manifest's environment) and the batch facts."""
    config, environment = folder.config, folder.environment
    row: dict[str, Any] = {"run_id": folder.run_id}
    row.update({(k if k in INPUT_COLUMNS or k.startswith(PREFIXES) else f"extra_{k}"): v for k, v in config.items()
                if k != "run_id"})
    row.update({k: v for k, v in measured.items() if k not in BATCH_FACTS})
    ranks = environment.get("ranks") or []
    found = {"gpus": folder.world_size or measured.get("ranks") or None,
             "nodes": len({r.get("node") for r in ranks}) if ranks else (len(set(nodes_seen) - {""}) or None)}
    for key, value in found.items():
        if value is None:
            continue
        if key in config and config[key] != value:
            warnings.warn(f"run {folder.run_id}: config says {key}={config[key]!r}, the run had {value}; "
                          f"using {value}", DataWarning, stacklevel=3)
        row[key] = int(value)
    host = environment.get("host") or {}
    defaults = {"platform": environment.get("device"), "strategy": environment.get("strategy"),
                "peak_tflops_per_gpu": (environment.get("cpu_peak") or {}).get("tflops"),
                "peak_method": (environment.get("cpu_peak") or {}).get("source"),
                "oversubscribed": oversubscribed(environment), "energy_counter": environment.get("energy"),
                "device_memory_gb": environment.get("device_memory_gb"),
                "extra_load_average_1min": host.get("load_average"), "extra_cpu_cores": host.get("cores"),
                **{k: measured[k] for k in BATCH_FACTS if k in measured}}
    return row | {k: v for k, v in defaults.items() if k not in config and v is not None}
