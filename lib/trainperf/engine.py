"""Where step intervals are read and aggregated: Dask, from a laptop to a cluster.

The local scheduler (Dask's threads, one per core) is the default and needs
no setup. A ``dask.distributed`` cluster is used when the user names one:
``trainperf report --scheduler tcp://host:8786``, ``load_runs(...,
scheduler="tcp://host:8786")``, or the environment variable
``TRAINPERF_SCHEDULER``. Its workers read the inputs and the store by path,
so they need the same file system (docs/data.md shows how to start a cluster
on one machine and on Slurm).
"""

from __future__ import annotations

import functools
import os
from typing import Any

ENVIRONMENT = "TRAINPERF_SCHEDULER"
"""Environment variable naming the scheduler when no call does."""
LOCAL = ("threads", "sync", "processes")
"""Dask's local schedulers, by name."""


def scheduler(name: Any = None) -> Any:
    """What ``dask.compute(..., scheduler=)`` takes for ``name``: a
    ``distributed.Client`` as it is; ``threads``, ``sync`` or ``processes``
    (Dask's local schedulers); any other text is the address of a
    ``dask.distributed`` scheduler (``tcp://host:8786``), connected to once
    per process. ``None`` or empty: ``$TRAINPERF_SCHEDULER``, else ``threads``."""
    if name is None or name == "":
        name = os.environ.get(ENVIRONMENT) or "threads"
    if not isinstance(name, str):
        return name
    if name in LOCAL:
        return name
    return _client(name)


@functools.cache
def _client(address: str) -> Any:
    from distributed import Client

    return Client(address, set_as_default=False)
