"""``manifest.json``: a run's configuration and environment.

A JSON object ``{"format": "trainperf-run", "version": 1, "config": {...},
"environment": {...}, "warmup_steps": N, "warmup_rule": "mser"}``
(``warmup_steps``: the least warm-up the profiler flagged; ``warmup_rule``:
how the reader finds the rest, ``trainperf.steady_state``; a manifest without
it reads as ``mser``). ``config`` holds the runs-table
columns the user gave (model, precision, ...); ``environment`` what the
profiler found: ``device``, ``strategy``, ``world_size``, ``nodes``, each
rank's ``host`` and ``node`` (``ranks``), and a CPU run's measured
``cpu_peak``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainperf.errors import DataError

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
    """A run folder's manifest (``path``: the file); DataError naming it when
    it cannot be read or is not a trainperf run manifest."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the run's manifest: {exc}", path=path) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config", {}), dict):
        raise DataError("not a trainperf run manifest (a JSON object with a 'config' object)", path=path)
    return manifest
