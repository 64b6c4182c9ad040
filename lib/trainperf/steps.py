"""The steps table (one row per rank per optimizer step), read from run
folders, and its aggregation to canonical runs rows.

Columns (:data:`STEPS_COLUMNS`): ``run_id``, ``rank``, ``step``, ``node``
(host name), ``warmup``, ``start_s`` (start of the step's window, seconds
since the run started on that rank's clock), ``step_s`` (wall time of the
step, s), phase seconds ``data_s`` ... ``validation_s`` with
``comm_exposed_s`` and ``compute_s``, ``tokens``, ``samples``,
``micro_steps``, ``loss``, ``peak_memory_gb``. Missing values are NaN.

A run folder (written by ``StepProfiler``) holds ``manifest.json`` and one
``steps-rank{R}.jsonl`` per rank (format: ``trainperf.profiler.rankfile``).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf.errors import DataError, DataWarning, NoMeasuredSteps
from trainperf.loading import FALSE, TRUE
from trainperf.profiler.environment import MANIFEST_FILE
from trainperf.profiler.rankfile import (LINE_COLUMNS, STEPS_FILE_PATTERN, BadLine, RankFile, read_rank_file,
                                        warn_bad_lines)
from trainperf.schema import INPUT_COLUMNS, PHASES, PREFIXES

PHASE_COLUMNS: tuple[str, ...] = (*(f"{p}_s" for p in PHASES), "comm_exposed_s", "compute_s")
STEPS_COLUMNS: tuple[str, ...] = (
    "run_id", "rank", "step", "node", "warmup", "start_s", "step_s",
    "data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "comm_s", "comm_exposed_s",
    "validation_s", "compute_s", "tokens", "samples", "micro_steps", "loss", "peak_memory_gb",
)
"""Columns of the steps table, in order."""
STEPS_TABLE_SUFFIXES = (".csv", ".parquet")
READ_THREADS = 4


@dataclass
class RunFolder:
    """A run folder, read: its manifest (with ``closed_ranks`` added: the
    ranks whose file has an end line), its steps table, the lines skipped,
    and its aggregation to one runs row."""

    path: Path
    manifest: dict[str, Any]
    steps: pd.DataFrame
    bad_lines: list[BadLine] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.manifest["config"]["run_id"])

    @property
    def runs(self) -> pd.DataFrame:
        """The run aggregated to one canonical runs row (see :func:`aggregate_steps`)."""
        return aggregate_steps(self.steps, {self.run_id: self.manifest})


def read_run(path: str | Path) -> RunFolder:
    """Read a run folder. ``run_id`` defaults to the folder name, ``experiment``
    to the name of the folder that holds it, ``source`` to the folder's path.
    Malformed or truncated step lines are skipped and reported (file and line)
    in one DataWarning."""
    path = Path(path)
    manifest = _read_manifest(path / MANIFEST_FILE)
    config = dict(manifest.get("config") or {})
    config.setdefault("run_id", path.name)
    config.setdefault("experiment", path.resolve().parent.name)
    config.setdefault("source", str(path))
    manifest = {**manifest, "config": config}
    files = sorted((int(m.group(1)), p) for p in path.iterdir() if (m := STEPS_FILE_PATTERN.match(p.name)))
    # Arrow and numpy release the GIL while parsing: read files side by side
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, os.cpu_count() or 1)) as pool:
        rank_files = list(pool.map(_read_rank_file, [file for _, file in files]))
    manifest["closed_ranks"] = [f.rank for f in rank_files if f.closed]
    nodes = {r["rank"]: r.get("node") for r in manifest.get("environment", {}).get("ranks", [])}
    steps = _steps_table(str(config["run_id"]), [(f.rank, f.node or nodes.get(f.rank), f.columns) for f in rank_files])
    bad = [b for f in rank_files for b in f.bad_lines]
    warn_bad_lines(bad, "steps files", stacklevel=2)
    return RunFolder(path, manifest, steps, bad)


def _read_rank_file(path: Path) -> RankFile:
    try:
        return read_rank_file(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read steps file: {exc}", path=path) from exc


def read_run_folder(path: str | Path) -> pd.DataFrame:
    """One canonical runs row for a run folder (``read_run(path).runs``);
    :class:`NoMeasuredSteps` when no rank recorded a step after the warm-up."""
    run = read_run(path)
    if not (~run.steps["warmup"]).any():
        lines = len(run.steps)
        raise NoMeasuredSteps(f"no measured steps: {lines} step line(s){', all warm-up' if lines else ''} "
                              f"(warmup_steps = {run.manifest.get('warmup_steps')})", path=path)
    return run.runs


def load_steps(*paths: str | Path) -> pd.DataFrame:
    """The steps table of run folders, folders holding run folders (searched
    recursively), or steps-table files (CSV or Parquet with at least ``rank``
    and ``step``). Columns missing from a file are NaN."""
    if not paths:
        raise DataError("no input given: name a run folder, a folder of them, or a steps table")
    frames = []
    for path in map(Path, paths):
        if not path.exists():
            raise DataError("no such file or folder", path=path)
        for item in _steps_inputs(path):
            frames.append(read_run(item).steps if item.is_dir() else _read_steps_table(item))
    if not frames:
        raise DataError("no run folders (with manifest.json) or steps tables found",
                        path=", ".join(map(str, paths)))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _steps_inputs(path: Path) -> list[Path]:
    """Run folders and steps-table files at or below ``path``."""
    if path.is_file():
        return [path]
    if (path / MANIFEST_FILE).exists():
        return [path]
    found = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            found += _steps_inputs(child)
        elif child.suffix.lower() in STEPS_TABLE_SUFFIXES and has_steps_columns(child):
            found.append(child)
    return found


def holds_steps(path: str | Path) -> bool:
    """Whether ``path`` is a steps table, a run folder, or a folder holding
    them (what :func:`load_steps` reads)."""
    path = Path(path)
    if path.is_file():
        return path.suffix.lower() in STEPS_TABLE_SUFFIXES and has_steps_columns(path)
    return path.is_dir() and bool(_steps_inputs(path))


def has_steps_columns(path: Path) -> bool:
    """Whether a CSV or Parquet file is a steps table (has ``rank`` and ``step``)."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
    else:
        names = list(pd.read_csv(path, nrows=0).columns) if path.stat().st_size else []
    return {"rank", "step"} <= set(names)


def _read_steps_table(path: Path) -> pd.DataFrame:
    """A steps-table file with the steps columns, typed (DataError naming the
    row and column of a value that is not a number, or a ``warmup`` that is
    not a bool spelled as ``trainperf.loading`` accepts; a missing ``warmup``
    is False)."""
    try:
        raw = pd.read_parquet(path) if path.suffix.lower() == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError) as exc:
        raise DataError(f"cannot read steps table: {exc}", path=path) from exc
    missing = [c for c in ("run_id", "rank", "step") if c not in raw.columns]
    if missing:
        raise DataError(f"not a steps table: missing column(s) {', '.join(missing)}", path=path)
    out = pd.DataFrame(index=raw.index)
    for name in STEPS_COLUMNS:
        if name not in raw.columns:
            out[name] = pd.Series(False if name == "warmup" else np.nan, index=raw.index,
                                  dtype="bool" if name == "warmup" else "str" if name == "node" else "float64")
            continue
        values = raw[name]
        if name in ("run_id", "node"):
            out[name] = values.astype("str")
        elif name == "warmup":
            spelled = values.astype(str).str.strip().str.lower()
            _raise_first(values, values.notna() & ~spelled.isin(TRUE | FALSE), "not a bool", path, name)
            out[name] = spelled.isin(TRUE)
        else:
            numbers = pd.to_numeric(values, errors="coerce")
            _raise_first(values, numbers.isna() & values.notna(), "not a number", path, name)
            out[name] = numbers.astype("int64" if name in ("rank", "step") else "float64")
    return out


def _raise_first(values: pd.Series, bad: pd.Series, problem: str, path: Path, column: str) -> None:
    """DataError naming the first row (and CSV line) where ``bad`` holds."""
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(f"{problem}: {values.iloc[row]!r}", path=path, row=row + 1, column=column,
                        line=row + 2 if path.suffix.lower() == ".csv" else None)


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the run's manifest: {exc}", path=path) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config", {}), dict):
        raise DataError("not a trainperf run manifest (a JSON object with a 'config' object)", path=path)
    return manifest


def _steps_table(run_id: str, ranks: list[tuple[int, str | None, dict[str, np.ndarray]]]) -> pd.DataFrame:
    """Concatenate per-rank columns into the steps table (vectorised)."""
    counts = np.array([len(cols["step"]) for _, _, cols in ranks], dtype=np.int64)
    data: dict[str, Any] = {
        "run_id": _repeat_strings([run_id], np.array([counts.sum()])),
        "rank": np.repeat(np.array([r for r, _, _ in ranks], dtype=np.int64), counts),
        "node": _repeat_strings([n or "" for _, n, _ in ranks], counts),
        "compute_s": np.full(int(counts.sum()), np.nan),
    }
    for name in LINE_COLUMNS:
        data[name] = (np.concatenate([cols[name] for _, _, cols in ranks]) if ranks
                      else np.empty(0, dtype=bool if name == "warmup" else np.int64 if name == "step" else float))
    table = pd.DataFrame({name: data[name] for name in STEPS_COLUMNS})
    table["micro_steps"] = table["micro_steps"].astype("float64")
    return table


def _repeat_strings(values: list[str], counts: np.ndarray) -> pd.Series:
    """A string column holding ``values[i]`` ``counts[i]`` times (built by
    Arrow from codes: fast for a million rows)."""
    import pyarrow as pa

    codes = np.repeat(np.arange(len(values), dtype=np.int32), counts)
    strings = pa.array(values, type=pa.large_string()).take(pa.array(codes))
    return pd.Series(strings, dtype=pd.StringDtype("pyarrow", na_value=np.nan))


def aggregate_steps(steps: pd.DataFrame, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One canonical runs row per ``run_id`` of a steps table.

    Over the measured window (rows not flagged ``warmup``), with ``e_r`` the
    elapsed time of rank ``r`` (end of its last step minus start of its first,
    s; the sum of its ``step_s`` where ``start_s`` is missing):

    * ``elapsed_s = max_r e_r`` (the job's wall clock is its slowest rank's),
      ``slowest_rank = argmax_r e_r``, ``mean_rank_elapsed_s = mean_r e_r``,
      ``rank_imbalance = max_r e_r / min_r e_r``;
    * phase columns (``data_s`` ... ``validation_s``, ``comm_exposed_s``,
      ``compute_s``): mean over ranks of each rank's total;
    * ``tokens``, ``samples``: sums over ranks and steps;
    * ``steps``: optimizer steps in the window (most any rank recorded);
      ``warmup_steps``: steps flagged warm-up; ``ranks``: ranks with rows;
    * ``peak_memory_gb``: the largest of any rank (GiB); ``train_loss``: mean over
      ranks of each rank's last recorded loss;
    * ``complete``: every expected rank (``0 .. world_size - 1`` from the
      manifest, else the ranks present) recorded as many steps as the most
      advanced one and, when the manifest lists ``closed_ranks``, closed its
      profiler. Otherwise a DataWarning names the ranks that stopped early,
      also listed in ``extra_stopped_early_ranks`` (text, e.g. ``[1, 3]``).

    ``manifests`` maps a run_id to its run manifest (``manifest.json``'s
    content): its ``config`` keys become columns (non-canonical keys as
    ``extra_<key>``); ``gpus`` is the world size and ``nodes`` the number of
    distinct nodes; ``platform``, ``strategy``, ``peak_tflops_per_gpu`` (a CPU
    run's measured peak) and the batch facts fill in where the config has
    none: ``grad_accum_steps`` (the median of ``micro_steps``),
    ``micro_batch_size`` (the median of ``samples / micro_steps``: samples
    per micro-step on one rank) and ``global_batch_size`` (the median over
    steps of the samples all ranks processed in the step, divided by
    ``tensor_parallel · pipeline_parallel · context_parallel``, whose ranks
    share their samples).
    """
    manifests = manifests or {}
    missing = [c for c in ("run_id", "rank", "step") if c not in steps.columns]
    if missing:
        raise DataError(f"not a steps table: missing column(s) {', '.join(missing)}")
    rows = [_aggregate_run(str(run_id), group, manifests.get(str(run_id), {}))
            for run_id, group in steps.groupby("run_id", sort=False, observed=True)]
    present = {str(run_id) for run_id in steps["run_id"].unique()}
    for run_id in manifests:
        if run_id not in present:
            rows.append(_aggregate_run(run_id, steps.iloc[:0], manifests[run_id]))
    if not rows:
        raise DataError("no steps to aggregate")
    return pd.DataFrame(rows)


def _aggregate_run(run_id: str, steps: pd.DataFrame, manifest: Mapping[str, Any]) -> dict[str, Any]:
    config = dict(manifest.get("config") or {})
    environment = manifest.get("environment") or {}
    row: dict[str, Any] = {"run_id": run_id}
    for key, value in config.items():
        if key == "run_id":
            continue
        row[key if key in INPUT_COLUMNS or key.startswith(PREFIXES) else f"extra_{key}"] = value
    window = _measured(steps)
    per_rank = rank_totals(steps).droplevel("run_id")
    elapsed = per_rank["elapsed_s"].dropna()
    if not elapsed.empty:
        row["elapsed_s"] = float(elapsed.max())
        row["slowest_rank"] = int(elapsed.idxmax())
        row["mean_rank_elapsed_s"] = float(elapsed.mean())
        row["rank_imbalance"] = float(elapsed.max() / elapsed.min()) if elapsed.min() > 0 else np.nan
    for name in PHASE_COLUMNS:
        if name in per_rank.columns and per_rank[name].notna().any():
            row[name] = float(per_rank[name].mean())
    for name in ("tokens", "samples"):
        if name in window.columns and window[name].notna().any():
            row[name] = float(window[name].sum())
    counts = steps.groupby("rank").size()
    row["steps"] = int(window.groupby("rank").size().max()) if len(window) else 0
    row["warmup_steps"] = int(steps.loc[steps["warmup"].astype(bool), "step"].nunique()) if "warmup" in steps else 0
    row["ranks"] = int(len(counts))
    if "peak_memory_gb" in window and window["peak_memory_gb"].notna().any():
        row["peak_memory_gb"] = float(window["peak_memory_gb"].max())
    if "loss" in window and window["loss"].notna().any():
        row["train_loss"] = float(window.dropna(subset=["loss"]).groupby("rank")["loss"].last().mean())
    _fill_environment(row, config, environment, steps, window)
    stopped = _stopped_early(counts, manifest)
    row["complete"] = not stopped
    if stopped:
        ranks = ", ".join(str(r) for r in stopped)
        row["extra_stopped_early_ranks"] = f"[{ranks}]"  # a list, never read as a number
        reasons = "; ".join(f"rank {r}: {why}" for r, why in stopped.items())
        warnings.warn(f"run {run_id} is incomplete: rank(s) {ranks} stopped early "
                      f"({reasons})", DataWarning, stacklevel=3)
    return row


def _measured(steps: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``steps`` not flagged ``warmup``."""
    return steps[~steps["warmup"].astype(bool)] if "warmup" in steps.columns else steps


def rank_totals(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run and rank of a steps table, over the measured window (rows not
    flagged ``warmup``): ``elapsed_s`` (end of the rank's last step minus the
    start of its first, s; the sum of its ``step_s`` in a run where a step
    lacks ``start_s``) and the phase totals (s; NaN where the rank never timed
    the phase). Index ``run_id, rank``."""
    window = _measured(steps)
    keys = [window["run_id"], window["rank"]]
    grouped = window.groupby(keys, sort=True, observed=True)
    phases = [c for c in PHASE_COLUMNS if c in window.columns]
    out = grouped[phases].sum(min_count=1) if phases else pd.DataFrame(index=grouped.size().index)
    out["elapsed_s"] = grouped["step_s"].sum(min_count=1)
    if "start_s" in window.columns:
        ends = (window["start_s"] + window["step_s"]).groupby(keys, sort=True, observed=True).max()
        timed = window["start_s"].notna().groupby(window["run_id"], observed=True).all()
        every_start = timed.reindex(out.index.get_level_values("run_id")).to_numpy(bool)
        out["elapsed_s"] = np.where(every_start, ends - grouped["start_s"].min(), out["elapsed_s"])
    return out


def _fill_environment(row: dict[str, Any], config: Mapping[str, Any], environment: Mapping[str, Any],
                      steps: pd.DataFrame, window: pd.DataFrame) -> None:
    """gpus, nodes (measured, warning when the config says otherwise), and
    platform, strategy, grad_accum_steps where the config has none."""
    ranks = environment.get("ranks") or []
    measured = {
        "gpus": environment.get("world_size") or (int(steps["rank"].nunique()) if len(steps) else None),
        "nodes": len({r.get("node") for r in ranks}) if ranks else
        ((int(steps["node"].nunique()) or None) if "node" in steps and len(steps) else None),
    }
    for key, value in measured.items():
        if value is None:
            continue
        if key in config and config[key] != value:
            warnings.warn(f"run {row['run_id']}: config says {key}={config[key]!r}, the run had {value}; "
                          f"using {value}", DataWarning, stacklevel=4)
        row[key] = int(value)
    defaults = {"platform": environment.get("device"), "strategy": environment.get("strategy"),
                "peak_tflops_per_gpu": (environment.get("cpu_peak") or {}).get("tflops"),
                **_batch_facts(config, window)}
    for key, value in defaults.items():
        if key not in config and value is not None:
            row[key] = value


def _batch_facts(config: Mapping[str, Any], window: pd.DataFrame) -> dict[str, Any]:
    """grad_accum_steps, micro_batch_size and global_batch_size of the measured
    window (see :func:`aggregate_steps`); the batch sizes only where steps carry samples."""
    facts: dict[str, Any] = {}
    accumulated = "micro_steps" in window and window["micro_steps"].notna().any()
    if accumulated:
        facts["grad_accum_steps"] = int(window["micro_steps"].median())
    if "samples" not in window or not window["samples"].notna().any():
        return facts
    samples = window["samples"].astype(float)
    micro = window["micro_steps"].astype(float).fillna(1.0).clip(lower=1.0) if accumulated else 1.0
    facts["micro_batch_size"] = float((samples / micro).median())
    model_parallel = 1.0
    for key in ("tensor_parallel", "pipeline_parallel", "context_parallel"):
        model_parallel *= float(config.get(key) or 1)
    facts["global_batch_size"] = float(samples.groupby(window["step"]).sum(min_count=1).median()) / model_parallel
    return facts


def _stopped_early(counts: pd.Series, manifest: Mapping[str, Any]) -> dict[int, str]:
    """Ranks that stopped early, with the reason."""
    world = (manifest.get("environment") or {}).get("world_size")
    expected = range(int(world)) if world else sorted(counts.index)
    most = int(counts.max()) if len(counts) else 0
    closed = manifest.get("closed_ranks")
    stopped: dict[int, str] = {}
    for rank in expected:
        done = int(counts.get(rank, 0))
        reasons = []
        if rank not in counts.index:
            reasons.append("no steps recorded")
        elif done < most:
            reasons.append(f"{done} of {most} steps")
        if closed is not None and rank not in closed:
            reasons.append("profiler not closed")
        if reasons:
            stopped[int(rank)] = ", ".join(reasons)
    return stopped
