"""Callbacks that profile a job run by a framework without touching its loop: :class:`HFCallback` (Hugging Face
``Trainer``) and :class:`LightningCallback`; both write the run folder ``StepProfiler`` writes. Importing this
package imports neither framework (``pip install trainperf[hf]`` or ``trainperf[lightning]``).
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["HFCallback", "LightningCallback"]
_HOMES = {"HFCallback": "trainperf.integrations.hf", "LightningCallback": "trainperf.integrations.lightning"}


def __getattr__(name: str) -> object:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
