"""trainperf's cache folder: what it measured about this machine (the CPU
peak), the runs read from each input and the step-intervals store."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$TRAINPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainperf``, else ``~/.cache/trainperf``."""
    if os.environ.get("TRAINPERF_CACHE_DIR"):
        return Path(os.environ["TRAINPERF_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "trainperf"
