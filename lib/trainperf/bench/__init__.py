"""The reference workload: a small GPT-style model trained under the profiler.

``python -m trainperf bench`` (``make bench``) runs the default sweeps; see
``docs/bench.md``. The pieces, importable from here:

* :class:`GPT`, :class:`ModelConfig`, :func:`model_config`, :data:`MODEL_SIZES`
  (``model``): the decoder-only transformer;
* :func:`corpus_bytes`, :func:`train_val_split`, :class:`RandomWindows`
  (``corpus``): the byte-level corpus and its loader;
* :func:`counted_flops_per_token` (``flop_count``): FLOPs as PyTorch counts them;
* :class:`RunSpec`, :func:`launch` (``spec``, ``launch``): one run under torchrun;
* :class:`Settings`, :func:`plan`, :func:`run_sweeps` (``sweeps``, ``runner``): the sweeps.

Names are loaded on first use, so that importing the package (as the
``trainperf`` command does) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {
    "GPT": "model", "ModelConfig": "model", "model_config": "model", "MODEL_SIZES": "model",
    "corpus_bytes": "corpus", "train_val_split": "corpus", "RandomWindows": "corpus",
    "counted_flops_per_token": "flop_count",
    "RunSpec": "spec", "launch": "launch", "RunFailed": "launch",
    "Settings": "sweeps", "Machine": "sweeps", "detect_machine": "sweeps", "default_settings": "sweeps",
    "plan": "sweeps", "run_sweeps": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainperf.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainperf.bench.{_EXPORTS[name]}"), name)
