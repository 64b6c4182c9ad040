"""Figures a log printed itself (``reported_*``) against trainperf's recomputation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf import flops
from trainperf.importers.core import RATE_FROM_REPORTED, REPORTED_CONVENTION

TOLERANCE = 0.02
"""Relative difference above which a reported figure is flagged."""
RATE_COLUMNS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "samples_per_s_per_gpu", "step_time_s")
"""Throughput figures: not compared where the run's time was itself taken
from the reported throughput (``extra_time_source``), which would be circular."""
FLOPS_COLUMNS = ("flops_per_token", "tflops_total", "tflops_per_gpu", "mfu", "hfu")
"""Figures that depend on the FLOPs convention (and, for MFU, on the peak)."""


def compare_reported(derived_runs: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """One row per run and reported figure that has a recomputed counterpart.

    For every column ``reported_X`` of ``derived_runs`` (the output of
    ``trainperf.derive``) whose ``X`` is also a column: ``run_id``,
    ``metric`` (X), ``reported``, ``recomputed``, ``relative_difference =
    recomputed / reported - 1`` and ``flagged`` (``|relative_difference| >
    tolerance``, default 2 %). A flag points at a wrong peak (MFU), a
    different FLOPs formula (TFLOPS, MFU), a wrong device count or an
    averaging error (rates, elapsed times). Cells missing on either side are
    not compared.

    FLOPs figures are recomputed under the log's own convention
    (``extra_reported_flops_convention``, where the importer knows it) and
    MFU against the log's own peak (``reported_peak_tflops_per_gpu``), so a
    log's figures reproduce; ``convention`` names the convention used (the
    run's ``mfu`` column keeps the run's convention: where they differ, both
    are shown).
    """
    rows = []
    circular = derived_runs.get("extra_time_source", pd.Series(pd.NA, index=derived_runs.index))
    circular = circular.astype("string").eq(RATE_FROM_REPORTED).fillna(False).to_numpy(bool)
    for column in derived_runs.columns:
        metric = str(column).removeprefix("reported_")
        if not str(column).startswith("reported_") or metric not in derived_runs.columns:
            continue
        reported = pd.to_numeric(derived_runs[column], errors="coerce").to_numpy(float)
        recomputed = pd.to_numeric(derived_runs[metric], errors="coerce").to_numpy(float)
        usable = np.isfinite(reported) & np.isfinite(recomputed) & (reported != 0)
        if metric in RATE_COLUMNS:
            usable &= ~circular
        conventions = derived_runs.get("flops_convention_used", pd.Series(pd.NA, index=derived_runs.index))
        if metric in FLOPS_COLUMNS:
            factors, conventions = _source_convention(derived_runs, metric)
            recomputed = recomputed * factors
            usable &= np.isfinite(recomputed)
        for i in np.flatnonzero(usable):
            difference = recomputed[i] / reported[i] - 1.0
            rows.append({"run_id": derived_runs["run_id"].iat[i], "metric": metric,
                         "convention": conventions.iat[i] if metric in FLOPS_COLUMNS else pd.NA,
                         "reported": reported[i], "recomputed": recomputed[i],
                         "relative_difference": difference, "flagged": bool(abs(difference) > tolerance)})
    order = {run_id: i for i, run_id in enumerate(derived_runs["run_id"])}
    rows.sort(key=lambda row: order[row["run_id"]])
    table = pd.DataFrame(rows, columns=["run_id", "metric", "convention", "reported", "recomputed",
                                        "relative_difference", "flagged"])
    return table.astype({"run_id": "string", "metric": "string", "convention": "string",
                         "reported": float, "recomputed": float,
                         "relative_difference": float, "flagged": bool})


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
