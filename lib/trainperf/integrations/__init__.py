"""Callbacks that profile a job run by a framework without touching its loop: :class:`HFCallback` (Hugging Face
``Trainer``) and :class:`LightningCallback`; both write the run folder ``StepProfiler`` writes. Importing this
package imports neither framework (``pip install trainperf[hf]`` or ``trainperf[lightning]``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["HFCallback", "LightningCallback"]


def __getattr__(name: str) -> Any:
    if name == "HFCallback":
        from trainperf.integrations.hf import HFCallback

        return HFCallback
    if name == "LightningCallback":
        from trainperf.integrations.lightning import LightningCallback

        return LightningCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
