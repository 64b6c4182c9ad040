"""Named figures into records: what a line read with a pattern
(``trainperf.importers.pattern``) or a step of TensorBoard scalars
(``trainperf.importers.tensorboard_log``) gives, by the documented names of
:data:`GROUPS`, becomes a record of ``trainperf.importers.records`` — and its
run's measurement.

The figures are those of one optimizer step; a record may cover ``n`` steps
that the figures describe on average (a TensorBoard point written every
``n`` steps with the mean over them). The rest follows from whatever the
figures give:

* the step's wall time: ``step_time_s``, ``step_time_ms``, else ``tokens`` /
  ``tokens_per_s`` (or ``samples`` / ``samples_per_s``); where there is only a
  rate, the run's throughput is the rate, averaged over the measured window
  as total work / total time (``extra_time_source`` says so);
* ``tokens`` and ``samples`` are the whole job's in a step (a record of ``n``
  steps did ``n`` times as much; each rank that gives the step gets its share);
* ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``samples_per_s``,
  ``mfu_percent`` (or ``mfu``, a fraction), ``tflops_per_gpu`` and ``power_w_per_gpu`` are kept as the
  source's own figures (``reported_*``; ``mfu_percent`` as the fraction ``reported_mfu``);
* ``energy_per_gpu_j`` (a step's energy on each device, J) gives the record's ``energy_j`` per device: its
  reader multiplies it by the devices once they are known.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import REPORTED_CONVENTION, rate_from_reported

NAN = math.nan
GROUPS = {
    "step": "the optimizer step the figures are of (a whole number; without it the records of a rank are "
            "steps 1, 2, 3, ...)",
    "epoch": "the epoch of that step, where the step counter restarts each epoch (a whole number)",
    "step_time_s": "wall time of that step (s)",
    "step_time_ms": "wall time of that step (ms)",
    "tokens": "tokens the whole job processed in that step",
    "samples": "samples (sequences) the whole job processed in that step",
    "tokens_per_s": "throughput, whole job (tokens/s)",
    "tokens_per_s_per_gpu": "throughput, per device (tokens/s)",
    "samples_per_s": "throughput, whole job (samples/s)",
    "loss": "training loss",
    "mfu_percent": "MFU (%)",
    "tflops_per_gpu": "TFLOP/s per device",
    "memory_gb": "peak device memory (GiB)",
}
"""The named figures a pattern's groups or a TensorBoard tag mapping may give, and what each one is."""
TIMING = ("step_time_s", "step_time_ms", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s")
"""A mapping needs one of these: a step time or a rate."""
REPORTED = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "tflops_per_gpu", "power_w_per_gpu")
"""The source's own figures a record keeps, after :data:`records.FIELDS`."""
RATES = REPORTED[:3]


def step_seconds(values: Mapping[str, float]) -> float:
    """The wall time of one step (s) the figures give; NaN where they give none."""
    seconds = values.get("step_time_s")
    if seconds is None:
        seconds = values.get("step_time_ms", NAN) / 1000.0
    if math.isfinite(seconds):
        return seconds
    rates = ((values.get(work, NAN), values.get(f"{work}_per_s", NAN)) for work in ("tokens", "samples"))
    return next((work / rate for work, rate in rates if work > 0 and rate > 0), NAN)


def record(values: Mapping[str, float], rank: int, step: int, n_steps: float = 1.0,
           timed_steps: float | None = None) -> tuple[float, ...]:
    """The record of ``rank`` ending at ``step`` that covers ``n_steps`` steps
    (NaN: unknown) with the per-step figures ``values`` (names of :data:`GROUPS`).
    Its wall time is the step time times ``timed_steps`` (default ``n_steps``:
    the figures are the mean over the steps the record covers)."""
    seconds = step_seconds(values) * (n_steps if timed_steps is None else timed_steps)
    get = values.get
    weight = seconds
    if not math.isfinite(seconds):
        rate = next((values[r] for r in RATES if get(r, NAN) > 0), NAN)
        weight = (n_steps if math.isfinite(n_steps) else 1.0) / rate
    return (rank, step, n_steps, seconds, weight, n_steps * get("samples", NAN), n_steps * get("tokens", NAN),
            get("loss", NAN), get("memory_gb", NAN), 0.0, n_steps * get("energy_per_gpu_j", NAN),
            get("tokens_per_s", NAN), get("tokens_per_s_per_gpu", NAN), get("samples_per_s", NAN),
            get("mfu", get("mfu_percent", NAN) / 100.0), get("tflops_per_gpu", NAN), get("power_w_per_gpu", NAN))


def measure(run: records.Run, config: Mapping[str, Any], origin: float | None, time_source: str,
            convention: str | None = None, least_warmup: int = 1) -> tuple[dict[str, Any], pd.DataFrame]:
    """The measurements and step intervals of a run of figure records
    (``records.aggregate``, steps numbered from ``origin``, None: unknown, and
    at least ``least_warmup`` warm-up steps where the run states none),
    with where the times came from (``extra_time_source``), the FLOPs
    convention of the source's own figures where known, and the source's
    rate as the throughput where nothing counts the work (``rate_from_reported``)."""
    measured, steps = records.aggregate(run.records, config, None if run.restarted else origin, least_warmup)
    if "elapsed_s" in measured:
        measured["extra_time_source"] = time_source
    if convention is not None:
        measured[REPORTED_CONVENTION] = convention
    rate_from_reported(measured, config)
    return measured, steps
