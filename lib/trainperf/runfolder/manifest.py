"""``manifest.json``: a run's configuration (``config``: runs columns) and environment (what the profiler found),
with ``warmup_steps`` and ``warmup_rule`` (docs/profiler.md, "The run folder"), every value a reader uses checked
(docs/data.md, "Bounds, types and repeated steps").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainperf.errors import DataError
from trainperf.runfolder.rankfile import is_number
from trainperf.schema import INPUT_COLUMNS, MOST_RANKS, Column, bound_problem
from trainperf.steady_state import RULES

MANIFEST_FILE = "manifest.json"
FORMAT = "trainperf-run"
VERSION = 1
TRACE_FILE = "trace-rank{rank}.jsonl"
"""A rank's trace file (the phases of its steps as intervals)."""


def write_json(path: Path, content: dict[str, Any]) -> None:
    """Write a JSON file atomically (a reader never sees half of it)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(content, indent=2, default=str) + "\n")
    os.replace(partial, path)


def read_manifest(path: Path) -> dict[str, Any]:
    """A run folder's manifest (``path``: the file); DataError naming it when it cannot be read or is not one."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the run's manifest: {exc}", path=path) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config", {}), dict):
        raise DataError("not a trainperf run manifest (a JSON object with a 'config' object)", path=path)
    check_manifest(manifest, path)
    return manifest


TOP: dict[str, Column] = {"warmup_steps": INPUT_COLUMNS["warmup_steps"]}
ENVIRONMENT: dict[str, Column | type] = {
    "world_size": INPUT_COLUMNS["gpus"], "nodes": INPUT_COLUMNS["nodes"],
    "device_memory_gb": INPUT_COLUMNS["device_memory_gb"], "device": str, "strategy": str, "energy": str,
    "ranks": list, "host": dict, "cpu_peak": dict}
HOST: dict[str, Column] = {"cores": Column("cores", "int", "cores of the host", "count"),
                           "load_average": Column("load_average", "float", "1-minute load average", "nonnegative"),
                           "threads_per_process": Column("threads_per_process", "int", "torch threads", "count")}
RANK: dict[str, Column | type] = {"rank": Column("rank", "int", "global rank", "nonnegative", MOST_RANKS - 1),
                                  "host": str, "node": str}
"""What each value of a manifest that a reader uses must be: a number within a column's bounds, or of a type
(None is always allowed: not recorded)."""


def check_manifest(manifest: Mapping[str, Any], path: object) -> None:
    """DataError naming ``path`` and the key (``environment.world_size``) of the first value of a run manifest of the
    wrong type or out of its bounds (:data:`TOP`, :data:`ENVIRONMENT`, :data:`HOST`, :data:`RANK`, ``warmup_rule``,
    numeric ``config`` values)."""
    _check_values(manifest, TOP, "", path)
    rule = manifest.get("warmup_rule")
    if rule is not None and rule not in RULES:
        raise DataError(f"warmup_rule {rule!r} is not one of {', '.join(RULES)}", path=path, column="warmup_rule")
    config = manifest.get("config") or {}
    numeric = {k: c for k, c in INPUT_COLUMNS.items() if c.kind in ("int", "float") and k in config}
    _check_values({k: _as_number(v) for k, v in config.items() if k in numeric}, numeric, "config.", path)
    environment = manifest.get("environment")
    if environment is None:
        return
    if not isinstance(environment, dict):
        raise DataError("not an object", path=path, column="environment")
    _check_values(environment, ENVIRONMENT, "environment.", path)
    _check_values(environment.get("host") or {}, HOST, "environment.host.", path)
    _check_values(environment.get("cpu_peak") or {}, {"tflops": INPUT_COLUMNS["peak_tflops_per_gpu"]},
                  "environment.cpu_peak.", path)
    ranks = environment.get("ranks") or []
    if len(ranks) > MOST_RANKS:
        raise DataError(f"{len(ranks)} ranks: more than {MOST_RANKS}", path=path, column="environment.ranks")
    for i, rank in enumerate(ranks):
        if not isinstance(rank, dict) or "rank" not in rank:
            raise DataError("not an object with a 'rank'", path=path, column=f"environment.ranks[{i}]")
        _check_values(rank, RANK, f"environment.ranks[{i}].", path)


def _as_number(value: Any) -> Any:
    """A config value as a number where it is text that reads as one (else as it is)."""
    try:
        return float(value.replace(",", "").replace("_", "")) if isinstance(value, str) else value
    except ValueError:
        return value


def _check_values(values: Mapping[str, Any], expected: Mapping[str, Any], prefix: str, path: object) -> None:
    for key, want in expected.items():
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(want, Column):
            if not isinstance(value, want):
                raise DataError(f"{_shown(value)} is not of type {want.__name__}", path=path, column=prefix + key)
            continue
        if not is_number(value):
            raise DataError(f"{_shown(value)} is not a number", path=path, column=prefix + key)
        if problem := bound_problem(want, float(value)):
            raise DataError(f"{float(value):g} {problem}", path=path, column=prefix + key)


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
