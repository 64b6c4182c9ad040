"""Named figures (:data:`GROUPS`, of a pattern's line or a TensorBoard step) into records and their run's
measurement (docs/importers.md, "A log of any stack").
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd

from trainperf.errors import DataError
from trainperf.importers import records
from trainperf.importers.core import REPORTED_CONVENTION, rate_from_reported, timed_by

NAN = math.nan
GROUPS = ("step", "epoch", "step_time_s", "step_time_ms", "tokens", "samples", "tokens_per_s", "tokens_per_s_per_gpu",
          "samples_per_s", "loss", "mfu_percent", "tflops_per_gpu", "memory_gb")
"""The named figures a pattern's groups or a TensorBoard tag mapping may give (docs/importers.md, "A log of any
stack"): the optimizer step and its epoch (whole numbers), the step's wall time (s, ms), the tokens and samples
the whole job processed in it, the job's rates (tokens/s, samples/s) and the per-device one (tokens/s), the
training loss, MFU (%), TFLOP/s per device and peak device memory (GiB)."""
TIMING = ("step_time_s", "step_time_ms", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s")
"""A pattern or a mapping needs one of these: a step time or a rate."""
REPORTED = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "tflops_per_gpu", "power_w_per_gpu")
"""The source's own figures a record keeps, after :data:`records.FIELDS`."""
RATES = REPORTED[:3]


def check_names(names: Collection[Any], allowed: tuple[str, ...], noun: str, what: str, where: object,
                column: str, hint: str = "") -> None:
    """DataError naming ``where`` and ``column`` unless each of ``names`` is one of the ``allowed`` figures (the
    ``noun``: a pattern's groups, a mapping's figures) and one of them is of :data:`TIMING`, as ``what`` needs."""
    unknown = sorted(str(name) for name in names if name not in allowed)
    if unknown:
        raise DataError(f"unknown {noun}(s) {', '.join(unknown)}: the {noun}s are {', '.join(allowed)}{hint}",
                        path=where, column=column)
    if not set(names) & set(TIMING):  # none at all too
        raise DataError(f"{what} needs a step time or a rate: one of the {noun}s {', '.join(TIMING)}", path=where,
                        column=column)


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
    get = values.get
    seconds = get("step_time_s", NAN)  # most records: their step time, read without a call
    if not math.isfinite(seconds):
        seconds = step_seconds(values)
    seconds *= n_steps if timed_steps is None else timed_steps
    weight = seconds
    if not math.isfinite(seconds):
        rate = next((values[r] for r in RATES if get(r, NAN) > 0), NAN)
        weight = (n_steps if math.isfinite(n_steps) else 1.0) / rate
    return (rank, step, n_steps, seconds, weight, n_steps * get("samples", NAN), n_steps * get("tokens", NAN),
            get("loss", NAN), get("memory_gb", NAN), 0.0, n_steps * get("energy_per_gpu_j", NAN),
            get("tokens_per_s", NAN), get("tokens_per_s_per_gpu", NAN), get("samples_per_s", NAN),
            get("mfu", get("mfu_percent", NAN) / 100.0), get("tflops_per_gpu", NAN), get("power_w_per_gpu", NAN))


def measure(run: records.Run, config: Mapping[str, Any], origin: float | None, time_source: str,
            convention: str | None = None, least_warmup: int = 1,
            rate_measures: bool = True) -> tuple[dict[str, Any], pd.DataFrame]:
    """The measurements and step intervals of a run of figure records
    (``records.measure_window``, steps numbered from ``origin``, None: unknown, and
    at least ``least_warmup`` warm-up steps where the run states none),
    with where the times came from (``extra_time_source``), the FLOPs
    convention of the source's own figures where known, and (``rate_measures``) the source's
    rate as the throughput where nothing counts the work (``rate_from_reported``)."""
    measured, steps = records.measure_window(run.records, config, None if run.restarted else origin, least_warmup)
    timed_by(measured, time_source)
    if convention is not None:
        measured[REPORTED_CONVENTION] = convention
    if rate_measures:
        rate_from_reported(measured, config)
    return measured, steps
