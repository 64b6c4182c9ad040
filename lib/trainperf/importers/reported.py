"""Figures a source printed itself (``reported_*``) against trainperf's own (``(source − trainperf) / trainperf``), for
the importer's check of a log and the reports' data-quality section."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf import flops
from trainperf.importers.core import FLOPS, RATE_FROM_REPORTED, REPORTED_CONVENTION

TOLERANCE = 0.02
"""Relative difference above which the importer flags a reported figure."""
RATE_COLUMNS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "samples_per_s_per_gpu", "step_time_s")
"""Throughput figures: not compared where the run's time was taken from the reported throughput (circular)."""
SAME_DEVICE_PEAKS = 2.5
"""Largest ratio between the peak a log divides by and trainperf's at which the two are of one device (a 2:4-sparse
figure is twice the dense one); beyond it, another device's peak, not comparable."""
OTHER_PEAK = "not comparable: other peak"
"""The ``note`` of a printed peak of another device."""
DTYPES = {"run_id": "string", "metric": "string", "convention": "string", "reported": float, "recomputed": float,
          "relative_difference": float, "flagged": bool, "note": "string"}
"""The columns, and their types, of :func:`compare_reported`."""


def printed_precision(values: pd.Series) -> pd.Series:
    """One unit of the last digit each value shows when printed plainly (``0`` → 1, ``0.56`` → 0.01, ``122599`` → 1,
    ``7.6e9`` → 10⁸): what a figure printed by a source may lose to rounding."""
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
    """One row per run and reported figure ``reported_X`` of ``derived_runs`` (``trainperf.derive``'s output) whose
    ``X`` is a column too (docs/importers.md, "Reported against recomputed"): ``run_id``, ``metric`` (X),
    ``convention``, ``reported``, ``recomputed``, ``relative_difference = (reported − recomputed) / recomputed``,
    ``flagged`` (beyond ``tolerance``, relative, and the last digit printed: :func:`printed_precision`) and ``note``.
    With ``source_convention`` (the importer's check), FLOPs figures are recomputed in the form of the log's own
    convention that reproduces its figures (:func:`_source_forms`) and MFU against the log's own peak; without it
    (the reports), against trainperf's figures, converted only to another device's peak."""
    parts = []
    run_ids = derived_runs["run_id"].to_numpy()
    circular = derived_runs.get("extra_time_source", pd.Series(pd.NA, index=derived_runs.index))
    circular = circular.astype("string").eq(RATE_FROM_REPORTED).fillna(False).to_numpy(bool)
    if source_convention:
        form_factors, forms = _source_forms(derived_runs, tolerance)
    for column in derived_runs.columns:
        metric = str(column).removeprefix("reported_")
        if not str(column).startswith("reported_") or metric not in derived_runs.columns:
            continue
        reported = _numbers(derived_runs[column])
        recomputed = _numbers(derived_runs[metric])
        conventions = pd.Series(pd.NA, index=derived_runs.index, dtype="string")
        note = np.full(len(run_ids), pd.NA, dtype=object)
        if metric in FLOPS:  # they depend on the FLOPs convention (and, for MFU, on the peak)
            conventions = derived_runs.get("flops_convention_used", conventions)
            peak = _peak_factors(derived_runs, metric)  # MFU in the log's units: against the log's own peak
            if source_convention:
                recomputed, conventions = recomputed * form_factors, forms
            else:  # the reports: only another device's peak; a sparse one is a finding
                peak = np.where(np.abs(np.log(peak)) > np.log(SAME_DEVICE_PEAKS), peak, 1.0)
            recomputed = recomputed * peak
            note[peak != 1.0] = "trainperf's converted to the log's peak"
        usable = np.isfinite(reported) & np.isfinite(recomputed)
        if metric in RATE_COLUMNS:
            usable &= ~circular
        beyond = _beyond(reported, recomputed, tolerance)
        with np.errstate(divide="ignore", invalid="ignore"):
            difference = (reported - recomputed) / recomputed
        if metric == "peak_tflops_per_gpu":
            other = ~(np.abs(np.log(reported / recomputed)) <= np.log(SAME_DEVICE_PEAKS))
            note[other], difference[other], beyond[other] = OTHER_PEAK, np.nan, False
        parts.append(pd.DataFrame({
            "run_id": run_ids[usable], "metric": metric, "convention": conventions.to_numpy()[usable],
            "reported": reported[usable], "recomputed": recomputed[usable], "relative_difference": difference[usable],
            "flagged": beyond[usable], "note": note[usable], "position": np.flatnonzero(usable)}))
    if not parts:
        return pd.DataFrame(columns=list(DTYPES)).astype(DTYPES)
    table = pd.concat(parts, ignore_index=True).sort_values("position", kind="stable")  # in the runs' order
    return table[list(DTYPES)].astype(DTYPES).reset_index(drop=True)


def _numbers(values: pd.Series) -> np.ndarray:
    return pd.to_numeric(values, errors="coerce").to_numpy(float)


def _beyond(reported: np.ndarray, recomputed: np.ndarray, tolerance: float) -> np.ndarray:
    """Whether each reported figure differs from its recomputation by more than ``tolerance`` (relative) and more
    than the last digit it was printed with."""
    gap = np.abs(reported - recomputed)
    return (gap > tolerance * np.abs(recomputed)) & (gap > printed_precision(pd.Series(reported)).to_numpy(float))


FORM_EVIDENCE = ("tflops_per_gpu", "tflops_total", "flops_per_token", "mfu", "hfu")
"""The reported figures a log's FLOPs form is chosen by, in order of trust."""


def _source_forms(runs: pd.DataFrame, tolerance: float) -> tuple[np.ndarray, pd.Series]:
    """Per run: the factor that turns trainperf's FLOPs into those of the log's own convention
    (``extra_reported_flops_convention``) in the form that reproduces its figures (:func:`_reproducing`; one form per
    release, ``trainperf.flops.FORMS``), and that form's name."""
    factors = np.ones(len(runs))
    names = runs.get("flops_convention_used", pd.Series(pd.NA, index=runs.index)).astype("string").copy()
    source = runs.get(REPORTED_CONVENTION, pd.Series(pd.NA, index=runs.index)).astype("string")
    evidence = [(_numbers(runs[f"reported_{m}"]), _numbers(runs[m]) * _peak_factors(runs, m))
                for m in FORM_EVIDENCE if f"reported_{m}" in runs and m in runs]
    for i, row in enumerate(runs.to_dict("records")):
        named = source.iat[i]
        if pd.isna(named) or names.iat[i] == "given":
            continue
        ratios = {form: flops.flops_per_token(row, form)[0] / row["flops_per_token"] for form in flops.forms(named)}
        chosen = _reproducing(ratios, str(named), [(r[i], c[i]) for r, c in evidence], tolerance)
        if chosen != names.iat[i]:
            factors[i] = ratios[chosen]
            names.iat[i] = chosen
    return factors, names


def _reproducing(ratios: dict[str, float], named: str, evidence: list[tuple[float, float]],
                 tolerance: float) -> str:
    """Of the forms (each with its FLOPs over trainperf's), the one whose
    recomputation of the first usable ``(reported, trainperf's)`` pair is
    within ``tolerance`` and closest; ``named`` when none is."""
    for reported, ours in evidence:
        if not (np.isfinite(reported) and np.isfinite(ours) and ours > 0 and reported > 0):
            continue
        forms = list(ratios)
        recomputed = np.array([ours * ratios[f] for f in forms])
        fits = ~_beyond(np.full(len(forms), reported), recomputed, tolerance) & np.isfinite(recomputed)
        if not fits.any():
            return named
        gaps = np.abs(np.log(reported / recomputed))
        return forms[int(np.argmin(np.where(fits, gaps, np.inf)))]
    return named


def _peak_factors(runs: pd.DataFrame, metric: str) -> np.ndarray:
    """Per run: the factor that turns trainperf's ``metric`` into the figure
    against the log's own peak (``reported_peak_tflops_per_gpu``; MFU and HFU only)."""
    if metric not in ("mfu", "hfu") or "reported_peak_tflops_per_gpu" not in runs:
        return np.ones(len(runs))
    peak = _numbers(runs["reported_peak_tflops_per_gpu"])
    ours = _numbers(runs["peak_tflops_per_gpu"]) if "peak_tflops_per_gpu" in runs else np.full(len(runs), np.nan)
    printed = np.isfinite(peak) & (peak > 0)
    return np.where(printed, ours / np.where(printed, peak, 1.0), 1.0)
