"""Reading inputs into the runs table, step intervals and their summaries (docs/data.md): ``loading`` is the one
dispatcher, each kind of input has its reader, step intervals are kept in the ``store`` and the runs read from an
input in the ``input_cache``. Step intervals are read and aggregated by Dask on the scheduler :func:`scheduler` names
(docs/data.md, "The engine: Dask, from a laptop to a cluster").
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

SCHEDULER = "TRAINPERF_SCHEDULER"
"""Environment variable naming the scheduler when no call does."""
LOCAL = ("threads", "sync", "processes")
"""Dask's local schedulers, by name."""


def scheduler(name: Any = None) -> Any:
    """What ``dask.compute(..., scheduler=)`` takes for ``name``: a ``distributed.Client`` as it is; ``threads``,
    ``sync`` or ``processes`` (Dask's local schedulers); any other text is the address of a ``dask.distributed``
    scheduler (``tcp://host:8786``), connected to once per process. ``None`` or empty: :data:`SCHEDULER`, else
    ``threads``."""
    name = os.environ.get(SCHEDULER) or "threads" if name is None or name == "" else name
    if name == "threads":
        _new_threads_after_fork()
    return name if not isinstance(name, str) or name in LOCAL else _client(name)


@functools.cache
def _new_threads_after_fork() -> None:
    """Make a process forked from this one (a report kernel, forked from the kernel server that read the
    inputs) start Dask's thread pool anew: Dask keeps one per process, made on its first use, and a child
    inherits it without its threads, so its first computation would wait for them forever."""
    import dask.threaded  # not at the top: importing trainperf loads no Dask

    def forget() -> None:
        dask.threaded.default_pool = None
        dask.threaded.pools.clear()
        dask.threaded.pools_lock = threading.Lock()  # another thread may have held it at the fork

    os.register_at_fork(after_in_child=forget)


@functools.cache
def _client(address: str) -> Any:
    from distributed import Client

    return Client(address, set_as_default=False)
