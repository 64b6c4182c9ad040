"""What every report page has: its inputs opened and checked against the
notebook's parameters, a header, and a closing data-quality section.

A bad parameter (a path that does not exist, an experiment or platform with
no runs, an unknown precision) raises :class:`InputError`, which a notebook
shows as one line, not a traceback.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from trainperf import derive, load_runs
from trainperf.errors import DataError
from trainperf.flops import FORMULAS
from trainperf.report.html import Col, Fragment, bullet_list, esc, heading, join, paragraph, table

CONVENTIONS = {**FORMULAS, "given": "flops_per_token as given in the data"}
"""How each FLOPs convention (``flops_convention_used``) counts, for the reader."""

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The checkout the package is installed from (editable install): paths below it are shown relative."""

HEADER_VALUES = 6
"""Experiments, platforms or models named in a report's header before it counts the rest."""

NAMES_IN_ERRORS = 12
"""Experiments or platforms an error message names before it counts the rest."""

REPORTED_SHOWN = 12
"""Largest differences listed one by one in the data-quality section."""

REPORTED_TOLERANCE = 0.005
"""Relative difference between a source's own figure and trainperf's that is listed."""


class InputError(DataError):
    """A report parameter or input that cannot be used. Jupyter shows it as
    one line (``InputError: …``) instead of a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"InputError: {self}"]


def open_runs(data: str | Sequence[str], *, experiments: Sequence[str] | str | None = None,
              platforms: Sequence[str] | str | None = None, baseline: str | None = None,
              precision: str | None = None, price_per_gpu_hour: float | None = None) -> pd.DataFrame:
    """Load ``data`` (paths), keep the selected ``experiments`` and
    ``platforms`` (``None`` or empty: all), apply the overrides and derive
    every metric.

    Overrides: ``precision`` for every run (its peak and MFU follow),
    ``price_per_gpu_hour`` (USD) for every run, ``baseline`` (a run_id) as
    the run its experiment is measured against. The result's ``attrs`` hold
    ``inputs`` (absolute paths), ``skipped`` (``(where, reason)`` pairs,
    runs left out by the selection included), ``warnings`` and
    ``overrides``. Raises :class:`InputError` naming the parameter.
    """
    paths = _existing(data, "data")
    if not paths:
        raise InputError("no data given (parameter data)")
    with _reading() as caught:
        runs = load_runs(*paths)
        skipped = list(runs.attrs.get("skipped", []))
        inputs = [str(Path(p).resolve()) for p in runs.attrs.get("inputs", [])]
        runs = _select(runs, "experiment", experiments, skipped)
        runs = _select(runs, "platform", platforms, skipped)
        runs, overrides = _override(runs, baseline=baseline, precision=precision,
                                    price_per_gpu_hour=price_per_gpu_hour)
        runs.attrs = {}
        derived = derive(runs)
    derived.attrs = {"inputs": inputs, "skipped": skipped, "overrides": overrides,
                     "warnings": list(dict.fromkeys(str(w.message) for w in caught))}
    return derived


@contextmanager
def _reading() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised inside (the yielded list) and turn a
    :class:`DataError` of the data into an :class:`InputError`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield caught
        except InputError:
            raise
        except DataError as exc:
            raise InputError(str(exc)) from None


def _existing(paths: str | Path | Sequence[str | Path] | None, parameter: str) -> list[str | Path]:
    """``paths`` as a list; InputError naming ``parameter`` for one that does not exist."""
    given = [paths] if isinstance(paths, (str, Path)) else list(paths or [])
    for path in given:
        if not Path(path).exists():
            raise InputError(f"{Path(path).resolve()}: no such file or folder (parameter {parameter})")
    return given


def open_steps(paths: str | Sequence[str] | None, runs: pd.DataFrame) -> pd.DataFrame | None:
    """The steps table (one row per rank per step) of ``paths``, restricted to
    the selected ``runs``; ``None`` when no path is given. Its ``attrs`` hold
    ``inputs`` and ``skipped`` (steps of runs not selected). Raises
    :class:`InputError` naming the parameter."""
    from trainperf import load_steps

    given = _existing(paths, "steps")
    if not given:
        return None
    with _reading() as caught:
        steps = load_steps(*given)
    keep = steps["run_id"].astype(str).isin(set(runs["run_id"].astype(str))).to_numpy(bool)
    skipped = []
    if (~keep).any():
        others = steps.loc[~keep, "run_id"].astype(str).unique()
        skipped.append((f"{(~keep).sum()} step row(s)", f"run not selected: {', '.join(others)}"))
    selected = steps.loc[keep].reset_index(drop=True)
    selected.attrs = {"inputs": [str(Path(p).resolve()) for p in given], "skipped": skipped,
                      "warnings": [str(w.message) for w in caught]}
    return selected


def shown_path(path: str | Path) -> str:
    """``path`` relative to the project root when it lies below it, else absolute."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        return str(resolved)


def _as_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _select(runs: pd.DataFrame, column: str, wanted: Sequence[str] | str | None,
            skipped: list[tuple[str, str]]) -> pd.DataFrame:
    """Rows whose ``column`` is one of ``wanted``; the others are listed in ``skipped``."""
    names = _as_list(wanted)
    if not names:
        return runs
    present = runs[column].dropna().astype(str) if column in runs else pd.Series(dtype=str)
    found = list(dict.fromkeys(present))
    for name in names:
        if name not in found:
            listed = ", ".join(found[:NAMES_IN_ERRORS]) + (f", … ({len(found)} in all)"
                                                            if len(found) > NAMES_IN_ERRORS else "")
            raise InputError(f"{column} {name!r} has no runs in the data; "
                             f"{column}s found: {listed or 'none'} (parameter {column}s)")
    keep = runs[column].isin(names).fillna(False).to_numpy(bool) if column in runs else []
    left_out = runs.loc[~keep]
    if len(left_out):
        others = ", ".join(dict.fromkeys(left_out[column].fillna("(none)").astype(str)))
        skipped.append((f"{len(left_out)} run(s)", f"{column} not selected: {others}"))
    return runs.loc[keep].reset_index(drop=True)


def _override(runs: pd.DataFrame, *, baseline: str | None, precision: str | None,
              price_per_gpu_hour: float | None) -> tuple[pd.DataFrame, list[str]]:
    out = runs.copy()
    applied: list[str] = []
    if precision:
        from trainperf.hardware import normalize_precision

        try:
            canonical = normalize_precision(precision)
        except DataError as exc:
            raise InputError(f"{exc} (parameter precision)") from None
        out["precision"] = pd.Series(canonical, index=out.index, dtype="string")
        applied.append(f"precision set to {canonical} for every run")
    if price_per_gpu_hour is not None:
        if not (isinstance(price_per_gpu_hour, (int, float)) and math.isfinite(price_per_gpu_hour)
                and price_per_gpu_hour >= 0):
            raise InputError(f"price_per_gpu_hour must be a number ≥ 0 (USD), not {price_per_gpu_hour!r}")
        out["price_per_gpu_hour"] = float(price_per_gpu_hour)
        applied.append(f"price set to ${price_per_gpu_hour:,.2f} per GPU-hour for every run")
    if baseline:
        hit = out.index[out["run_id"] == baseline]
        if len(hit) == 0:
            raise InputError(f"baseline run {baseline!r} is not among the selected runs (parameter baseline)")
        experiment = out.at[hit[0], "experiment"]
        same = (out["experiment"] == experiment).fillna(False).to_numpy(bool)
        column = out["baseline_run_id"] if "baseline_run_id" in out else pd.Series(pd.NA, index=out.index,
                                                                                   dtype="string")
        out["baseline_run_id"] = column.astype("string").mask(same, baseline)
        applied.append(f"baseline of experiment {experiment} set to run {baseline}")
    return out, applied


def require(runs: pd.DataFrame, column: str, what: str) -> pd.DataFrame:
    """The runs with a value in ``column``; the others are listed in
    ``attrs['skipped']``. :class:`InputError` saying the report needs
    ``what`` when no run has it."""
    present = runs[column].notna().to_numpy(bool) if column in runs else [False] * len(runs)
    have = runs[present]
    if have.empty:
        raise InputError(f"none of the {len(runs)} selected run(s) has {what} ({column}): "
                         "this report has nothing to show")
    missing = runs.loc[~pd.Series(present, index=runs.index), "run_id"].astype(str).tolist()
    skipped = list(runs.attrs.get("skipped", []))
    if missing:
        skipped.append((f"{len(missing)} run(s): {', '.join(missing[:5])}{', …' if len(missing) > 5 else ''}",
                        f"no {what} ({column}), which this report needs"))
    have = have.copy()
    have.attrs = {**runs.attrs, "skipped": skipped}
    return have


def header(title: str, runs: pd.DataFrame, subtitle: str = "", *, steps: pd.DataFrame | None = None) -> Fragment:
    """The report's title and what it covers; records the title and the inputs
    (of the runs, and of the per-rank ``steps`` when given) for the index."""
    parts = [f"{len(runs)} run{'s' if len(runs) != 1 else ''}"]
    for column, label in (("experiment", "experiment"), ("platform", "platform"), ("model", "model")):
        if column in runs:
            values = list(dict.fromkeys(runs[column].dropna().astype(str)))
            if values:
                shown = ", ".join(values[:HEADER_VALUES]) + (f", … ({len(values)} in all)"
                                                            if len(values) > HEADER_VALUES else "")
                parts.append(f"{label}{'s' if len(values) > 1 else ''}: {shown}")
    lines = f"<h1>{esc(title)}</h1><p class=\"tp-subtitle\">{esc(' · '.join(parts))}</p>"
    if subtitle:
        lines += f"<p>{esc(subtitle)}</p>"
    inputs = list(runs.attrs.get("inputs", [])) + list(steps.attrs.get("inputs", []) if steps is not None else [])
    return Fragment(lines, title, {"title": title, "inputs": list(dict.fromkeys(inputs))})


def data_quality(runs: pd.DataFrame, steps: pd.DataFrame | None = None) -> Fragment:
    """The closing section: inputs read, what was skipped and why, values that
    stay empty or doubtful, the conventions used (FLOPs formula, peak table
    entries) and the source's own figures that differ from trainperf's."""
    attrs = runs.attrs
    parts = [heading("Inputs read"), bullet_list([shown_path(p) for p in attrs.get("inputs", [])])]
    if steps is not None:
        parts.append(paragraph("Per-rank steps: {n} rows of {r} run(s) from {src}.", n=f"{len(steps):,}",
                               r=steps["run_id"].nunique(),
                               src=", ".join(shown_path(p) for p in steps.attrs.get("inputs", [])) or "–"))
    parts.append(heading("Skipped and why"))
    skipped = list(attrs.get("skipped", [])) + list((steps.attrs.get("skipped", []) if steps is not None else []))
    parts.append(table(pd.DataFrame(skipped, columns=["where", "reason"]),
                       [Col("where", "Input", wrap=True), Col("reason", "Reason", wrap=True)]) if skipped
                 else paragraph("Nothing was skipped."))
    if attrs.get("overrides"):
        parts += [paragraph("Parameters that changed the data:"), bullet_list(attrs["overrides"])]
    if attrs.get("warnings"):
        parts += [paragraph("Warnings:"), bullet_list(attrs["warnings"])]
    notes = note_counts(runs)
    parts.append(heading("Empty or doubtful values"))
    parts.append(table(notes, [Col("note", "Why a value is empty or doubtful", wrap=True),
                               Col("runs", "Runs", "int"), Col("examples", "For example", wrap=True)]) if len(notes)
                 else paragraph("Every derived value of every run could be computed."))
    parts += [heading("Conventions"), conventions(runs)]
    differences = reported_differences(runs)
    parts.append(heading("Source figures vs trainperf"))
    if differences.empty:
        parts.append(paragraph("Every figure the sources printed themselves (reported_* columns) agrees with "
                               "trainperf's recomputation within {tol}, or none was given.",
                               tol=f"{REPORTED_TOLERANCE:.1%}"))
    else:
        summary = (differences.assign(size=differences["difference"].abs())
                   .groupby("figure", sort=False)
                   .agg(runs=("run_id", "size"), largest=("size", "max")).reset_index())
        parts.append(table(summary, [Col("figure", "Figure"), Col("runs", f"Runs differing by more than "
                                                                          f"{REPORTED_TOLERANCE:.1%}", "int"),
                                     Col("largest", "Largest difference", "pct")]))
        largest = differences.reindex(differences["difference"].abs().sort_values(ascending=False).index)
        parts.append(table(largest.head(REPORTED_SHOWN), [
            Col("run_id", "Run"), Col("figure", "Figure"), Col("reported", "Source printed", "sig"),
            Col("trainperf", "trainperf", "sig"), Col("difference", "Difference", "pct")],
            caption=f"The {min(REPORTED_SHOWN, len(largest))} largest differences",
            note="Fractions (MFU, efficiency, overhead) as fractions. trainperf recomputes every figure from "
                 "the run's inputs; where they differ, the report uses trainperf's."))
    unchecked = unverifiable_figures(runs)
    if unchecked:
        parts += [paragraph("Figures the sources printed that trainperf cannot recompute from their data "
                            "(shown nowhere above):"), bullet_list(unchecked)]
    return join(parts)


def unverifiable_figures(runs: pd.DataFrame) -> list[str]:
    """``reported_<column>`` figures whose ``<column>`` trainperf could not compute for those runs."""
    out = []
    for column in runs.columns:
        name = column.removeprefix("reported_")
        if column.startswith("reported_") and name in runs:
            orphan = runs[column].notna() & runs[name].isna()
            if orphan.any():
                out.append(f"{name}: printed for {int(orphan.sum())} run(s) "
                           f"({', '.join(runs.loc[orphan, 'run_id'].astype(str).head(3))}"
                           f"{', …' if orphan.sum() > 3 else ''})")
    return out


def note_counts(runs: pd.DataFrame) -> pd.DataFrame:
    """The distinct notes of ``derive`` (``notes`` column, ``; ``-separated)
    with how many runs carry each and up to three of their run ids."""
    rows: dict[str, list[str]] = {}
    if "notes" in runs:
        for run_id, text in zip(runs["run_id"], runs["notes"]):
            if pd.notna(text):
                for note in str(text).split("; "):
                    rows.setdefault(note, []).append(str(run_id))
    return pd.DataFrame([(note, len(ids), ", ".join(ids[:3]) + (", …" if len(ids) > 3 else ""))
                         for note, ids in rows.items()], columns=["note", "runs", "examples"])


def conventions(runs: pd.DataFrame) -> Fragment:
    """The FLOPs conventions and peak-table entries behind the runs' figures, and the fixed rules."""
    parts = []
    if "flops_convention_used" in runs:
        used = runs["flops_convention_used"].dropna().astype(str).value_counts()
        parts.append(bullet_list([f"FLOPs per token, {name} ({count} run{'s' if count > 1 else ''}): "
                                  f"{CONVENTIONS.get(name, name)}" for name, count in used.items()]))
    if "peak_tflops_per_gpu" in runs:
        peaks = (runs[runs["peak_tflops_per_gpu"].notna()]
                 .groupby(["platform", "precision", "peak_tflops_per_gpu", "peak_source"], dropna=False)
                 .size().reset_index(name="runs"))
        if len(peaks):
            parts.append(table(peaks, [Col("platform", "Platform"), Col("precision", "Precision"),
                                       Col("peak_tflops_per_gpu", "Dense peak (TFLOP/s per device)", "sig4"),
                                       Col("peak_source", "Source", wrap=True), Col("runs", "Runs", "int")],
                               caption="Peak table entries used for MFU (dense, never 2:4-sparse)"))
    parts.append(bullet_list([
        "Elapsed time of a run is its slowest rank's wall clock, never the mean over ranks.",
        "Scaling multiplier = throughput / baseline throughput; baseline = the run with the fewest devices "
        "in its experiment unless one is named; efficiency = multiplier / (devices / baseline devices).",
        "MFU = achieved model TFLOP/s per device / dense peak at the run's precision; HFU counts activation "
        "recomputation (× 4/3).",
        "Per-device figures divide by every device of the job; tokens per day = tokens/s × 86,400 s.",
    ]))
    return join(parts)


def reported_differences(runs: pd.DataFrame, tolerance: float = REPORTED_TOLERANCE) -> pd.DataFrame:
    """Rows ``run_id, figure, reported, trainperf, difference`` for every
    ``reported_<column>`` that differs from trainperf's ``<column>`` by more
    than ``tolerance`` (relative)."""
    rows = []
    for column in runs.columns:
        name = column.removeprefix("reported_")
        if not column.startswith("reported_") or name not in runs or not pd.api.types.is_numeric_dtype(runs[column]):
            continue
        reported, ours = runs[column].astype(float), pd.to_numeric(runs[name], errors="coerce").astype(float)
        relative = (reported - ours) / ours
        for i in (relative.abs() > tolerance).to_numpy().nonzero()[0]:
            rows.append((runs["run_id"].iat[i], name, reported.iat[i], ours.iat[i], relative.iat[i]))
    return pd.DataFrame(rows, columns=["run_id", "figure", "reported", "trainperf", "difference"])
