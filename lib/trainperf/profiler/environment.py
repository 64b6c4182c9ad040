"""Where a rank runs, and the content of the run's ``manifest.json`` (format:
``trainperf.runfolder.manifest``; its fields: docs/profiler.md, "The run folder"). A *node* is named
after its host, and ``host#<node_rank>`` where one host runs several of torchrun's nodes.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainperf.runfolder.manifest import FORMAT, VERSION


@dataclass(frozen=True)
class Place:
    """This process's place in the job."""

    rank: int
    world_size: int
    host: str
    node_rank: int | None
    local_rank: int | None


def grouped(dist: Any) -> bool:
    """Whether ``dist`` (``torch.distributed``) has an initialized process group."""
    return dist is not None and dist.is_available() and dist.is_initialized()


def gather_places(dist: Any) -> tuple[Place, list[Place]]:
    """This rank's place (from the process group, else torchrun's environment variables, else a single
    process) and every rank's in rank order: a collective in a process group, else this rank's only."""
    rank, world = ((dist.get_rank(), dist.get_world_size()) if grouped(dist) else
                   (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))))
    place = Place(rank, world, socket.gethostname(), _env_int("GROUP_RANK"), _env_int("LOCAL_RANK"))
    if not grouped(dist) or world == 1:
        return place, [place]
    places: list[Any] = [None] * world
    dist.all_gather_object(places, place)
    return place, places


def first_on_host(place: Place, places: list[Place]) -> bool:
    """Whether this rank is the lowest of its node (without every rank's place: torchrun's first local rank)."""
    if len(places) != place.world_size:
        return place.local_rank in (None, 0)
    nodes = node_names(places)
    return min(r for r, n in nodes.items() if n == nodes[place.rank]) == place.rank


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def node_names(places: list[Place]) -> dict[int, str]:
    """Node name of each rank (see the module docstring)."""
    node_ranks: dict[str, set[int | None]] = {}
    for p in places:
        node_ranks.setdefault(p.host, set()).add(p.node_rank)
    return {p.rank: (f"{p.host}#{p.node_rank}" if len(node_ranks[p.host]) > 1 else p.host) for p in places}


def git_commit(cwd: Path) -> str | None:
    """The commit checked out in ``cwd``'s git repository, or None."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def host_load(threads_per_process: int) -> dict[str, Any]:
    """``cores`` this process may use, the 1-minute ``load_average`` and ``threads_per_process``: what
    ``trainperf.runfolder.reader`` tells oversubscription from."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "load_average": load, "threads_per_process": threads_per_process}


def manifest(config: dict[str, Any], places: list[Place], device_name: str, backend: str | None,
             strategy: str | None, warmup_steps: int, warmup_rule: str, torch_version: str,
             cpu_peak: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
             energy: str | None = None, device_memory_gb: float | None = None) -> dict[str, Any]:
    """The content of ``manifest.json``; ``device_memory_gb``: rank 0's device memory (GiB)."""
    from trainperf import __version__

    nodes = node_names(places)
    return {
        "format": FORMAT,
        "version": VERSION,
        "config": config,
        "environment": {
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "trainperf": __version__,
            "torch": torch_version,
            "python": platform.python_version(),
            "platform": sys.platform,
            "device": device_name,
            "backend": backend,
            "strategy": strategy,
            "world_size": places[0].world_size,
            "nodes": len(set(nodes.values())),
            "ranks": [{"rank": p.rank, "host": p.host, "node": nodes[p.rank], "node_rank": p.node_rank,
                       "local_rank": p.local_rank} for p in places],
            "git_commit": git_commit(Path.cwd()),
            **{key: value for key, value in (("cpu_peak", cpu_peak), ("host", host), ("energy", energy),
                                             ("device_memory_gb", device_memory_gb)) if value},
        },
        "warmup_steps": warmup_steps,
        "warmup_rule": warmup_rule,
    }
