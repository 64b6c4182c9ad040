"""The reference workload: a small GPT-style model trained under the profiler (``trainperf bench``, ``make bench``;
docs/bench.md). Names are loaded on first use, so that importing the package does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {
    "GPT": "model", "ModelConfig": "model", "model_config": "model", "MODEL_SIZES": "model",
    "corpus_bytes": "corpus", "train_val_split": "corpus", "RandomWindows": "corpus",
    "counted_flops_per_token": "model",
    "RunSpec": "spec", "launch": "launch", "RunFailed": "launch",
    "Settings": "sweeps", "Machine": "sweeps", "detect_machine": "sweeps", "default_settings": "sweeps",
    "plan": "sweeps", "run_sweeps": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainperf.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainperf.bench.{_EXPORTS[name]}"), name)
