"""Figures a source printed itself (``reported_*``) against trainperf's own:
one comparison, one sign (``(source − trainperf) / trainperf``), for the
importer's check of a log and for the reports' data-quality section."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf import flops
from trainperf.importers.core import RATE_FROM_REPORTED, REPORTED_CONVENTION

TOLERANCE = 0.02
"""Relative difference above which the importer flags a reported figure."""
RATE_COLUMNS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "samples_per_s_per_gpu", "step_time_s")
"""Throughput figures: not compared where the run's time was itself taken
from the reported throughput (``extra_time_source``), which would be circular."""
FLOPS_COLUMNS = ("flops_per_token", "tflops_total", "tflops_per_gpu", "mfu", "hfu")
"""Figures that depend on the FLOPs convention (and, for MFU, on the peak)."""


def printed_precision(values: pd.Series) -> pd.Series:
    """One unit of the last digit each value shows when printed plainly
    (``0`` → 1, ``0.56`` → 0.01, ``122599`` → 1, ``7.6e9`` → 10⁸: trailing zeros
    of a whole number count as rounding): what a figure printed by a source
    may lose to rounding or truncation."""
    def unit(x: float) -> float:
        if not np.isfinite(x):
            return np.nan
        text = np.format_float_positional(abs(x), trim="-")
        if "." in text:
            return 10.0 ** -len(text.split(".")[1])
        return 10.0 ** (len(text) - len(text.rstrip("0"))) if text != "0" else 1.0
    return values.astype(float).map(unit)


def compare_reported(derived_runs: pd.DataFrame, tolerance: float = TOLERANCE, *,
                     source_convention: bool = True) -> pd.DataFrame:
    """One row per run and reported figure that has a recomputed counterpart.

    For every column ``reported_X`` of ``derived_runs`` (the output of
    ``trainperf.derive``) whose ``X`` is also a column: ``run_id``,
    ``metric`` (X), ``reported``, ``recomputed``, ``relative_difference =
    (reported − recomputed) / recomputed`` and ``flagged``: the difference is
    beyond ``tolerance`` (relative, default 2 %) and beyond the last digit
    the source printed (:func:`printed_precision`; a source printing whole
    samples/s shows 0 for 0.4). A flag points at a wrong peak (MFU), a
    different FLOPs formula (TFLOPS, MFU), a wrong device count or an
    averaging error (rates, elapsed times). Cells missing on either side are
    not compared; nor are rates where the run's time came from the reported
    rate (circular).

    With ``source_convention`` (the importer's check), FLOPs figures are
    recomputed under the log's own convention
    (``extra_reported_flops_convention``, where the importer knows it) and
    MFU against the log's own peak (``reported_peak_tflops_per_gpu``), so a
    log's figures reproduce; ``convention`` names the convention used.
    Without it (the reports), the source is set against trainperf's figures
    as the reports show them.
    """
    parts = []
    run_ids = derived_runs["run_id"].to_numpy()
    circular = derived_runs.get("extra_time_source", pd.Series(pd.NA, index=derived_runs.index))
    circular = circular.astype("string").eq(RATE_FROM_REPORTED).fillna(False).to_numpy(bool)
    for column in derived_runs.columns:
        metric = str(column).removeprefix("reported_")
        if not str(column).startswith("reported_") or metric not in derived_runs.columns:
            continue
        reported = pd.to_numeric(derived_runs[column], errors="coerce").to_numpy(float)
        recomputed = pd.to_numeric(derived_runs[metric], errors="coerce").to_numpy(float)
        conventions = pd.Series(pd.NA, index=derived_runs.index, dtype="string")
        if metric in FLOPS_COLUMNS:
            conventions = derived_runs.get("flops_convention_used", conventions)
            if source_convention:
                factors, conventions = _source_convention(derived_runs, metric)
                recomputed = recomputed * factors
        usable = np.isfinite(reported) & np.isfinite(recomputed)
        if metric in RATE_COLUMNS:
            usable &= ~circular
        gap = reported - recomputed
        beyond = (np.abs(gap) > tolerance * np.abs(recomputed)) & (
            np.abs(gap) > printed_precision(pd.Series(reported)).to_numpy(float))
        with np.errstate(divide="ignore", invalid="ignore"):
            difference = gap / recomputed
        parts.append(pd.DataFrame({
            "run_id": run_ids[usable], "metric": metric, "convention": conventions.to_numpy()[usable],
            "reported": reported[usable], "recomputed": recomputed[usable], "relative_difference": difference[usable],
            "flagged": beyond[usable], "position": np.flatnonzero(usable)}))
    columns = ["run_id", "metric", "convention", "reported", "recomputed", "relative_difference", "flagged"]
    if not parts:
        return pd.DataFrame(columns=columns).astype(DTYPES)
    table = pd.concat(parts, ignore_index=True).sort_values("position", kind="stable")  # in the runs' order
    return table[columns].astype(DTYPES).reset_index(drop=True)


DTYPES = {"run_id": "string", "metric": "string", "convention": "string", "reported": float, "recomputed": float,
          "relative_difference": float, "flagged": bool}
"""Column types of :func:`compare_reported`."""


def _source_convention(runs: pd.DataFrame, metric: str) -> tuple[np.ndarray, pd.Series]:
    """Per run: the factor that turns trainperf's ``metric`` into the figure
    under the log's own FLOPs convention (and, for MFU, its own peak), and
    that convention's name."""
    factors = np.ones(len(runs))
    names = runs.get("flops_convention_used", pd.Series(pd.NA, index=runs.index)).astype("string").copy()
    source = runs.get(REPORTED_CONVENTION, pd.Series(pd.NA, index=runs.index)).astype("string")
    for i, row in enumerate(runs.to_dict("records")):
        name = source.iat[i]
        if not pd.isna(name) and name != names.iat[i] and names.iat[i] != "given":
            theirs, _ = flops.flops_per_token(row, str(name))
            factors[i] = theirs / row["flops_per_token"]
            names.iat[i] = name
        peak = row.get("reported_peak_tflops_per_gpu")
        if metric in ("mfu", "hfu") and not pd.isna(peak) and peak > 0:
            factors[i] *= row["peak_tflops_per_gpu"] / peak
    return factors, names
