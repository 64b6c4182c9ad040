"""What every report page has: its inputs opened and checked against the notebook's parameters (a bad one
raises :class:`InputError`), a header, and the data-quality section (:func:`quality`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from pandas.io.formats.style import Styler

from trainperf.aggregate import Summaries
from trainperf.compare import Side, read_side
from trainperf.derived import SCALING_NOTES, derive
from trainperf.invariants import violations
from trainperf.errors import DataError, provenance
from trainperf.flops import FORMULAS
from trainperf.hardware import normalize_precision
from trainperf.importers.reported import OTHER_PEAK, compare_reported
from trainperf.reading.cache import keeping
from trainperf.reading.loading import holds_steps, load_runs, load_summaries, pin_inputs
from trainperf.report.html import (Html, InputError, NotApplicable, bullets, callout, count, esc, first_of, fmt_pct,
                                   shown_path, title as page_title)
from trainperf.report.run_labels import doubt_notes, ordered
from trainperf.report.theme import table

CONVENTIONS = {**FORMULAS, "given": "flops_per_token as given in the data"}
"""How each FLOPs convention (``flops_convention_used``) counts, for the reader."""

NO_DIFFERENCES = ("Every figure the sources printed themselves (reported_* columns) agrees with trainperf's "
                  "recomputation within 0.5 % or the last digit printed, or none was given.")
"""What the data-quality section says when :func:`reported_differences` finds none."""

REPORTED_TOLERANCE = 0.005
"""Relative difference of a source's own figure from trainperf's that is listed (if also beyond its last digit)."""


def open_runs(data: str | Sequence[str], *, experiments: Sequence[str] | str | None = None,
              platforms: Sequence[str] | str | None = None, baseline: str | None = None,
              precision: str | None = None, price_per_gpu_hour: float | None = None) -> pd.DataFrame:
    """Load ``data`` (paths, through the input cache), keep the selected ``experiments`` and ``platforms``
    (``None`` or empty: all), override ``precision``, ``price_per_gpu_hour`` (USD) and ``baseline`` (a run_id) and
    derive every metric. ``attrs``: ``inputs`` (absolute paths), ``skipped`` (``(where, reason)`` pairs),
    ``warnings``, ``overrides``, ``snapshots`` (inputs still being written). :class:`InputError`: a bad parameter."""
    paths = _existing(data, "data")
    if not paths:
        raise InputError("no data given (parameter data)")
    with _reading() as caught:
        runs = load_runs(*paths, cache=True)
        skipped = list(runs.attrs.get("skipped", []))
        inputs = [str(Path(p).resolve()) for p in runs.attrs.get("inputs", [])]
        snapshots = runs.attrs.get("snapshots", ())
        runs = _select(runs, "experiment", experiments, skipped)
        runs = _select(runs, "platform", platforms, skipped)
        runs, overrides = _override(runs, baseline=baseline, precision=precision,
                                    price_per_gpu_hour=price_per_gpu_hour)
        runs.attrs = {}
        derived = derive(runs)
    derived.attrs = provenance(inputs=inputs, skipped=skipped, overrides=overrides, snapshots=snapshots,
                               warnings=dict.fromkeys(str(w.message) for w in caught))
    return derived


@contextmanager
def _reading() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised inside (the yielded list); a :class:`DataError` becomes an :class:`InputError`."""
    with warnings.catch_warnings(record=True, action="always") as caught:
        try:
            yield caught
        except InputError:
            raise
        except DataError as exc:
            raise InputError(str(exc)) from None


def _existing(paths: str | Path | Sequence[str | Path] | None, parameter: str) -> list[str | Path]:
    """``paths`` as a list; InputError naming ``parameter`` for one that does not exist."""
    given = _as_list(paths)
    for path in given:
        if not Path(path).exists():
            raise InputError(f"{Path(path).resolve()}: no such file or folder (parameter {parameter})")
    return given


def open_side(paths: Sequence[str], parameter: str, *, warmup: int = 0) -> Side:
    """One side of the compare report (:func:`trainperf.compare.read_side`, through the input cache);
    :class:`NotApplicable` when ``parameter`` names no path (``trainperf report --data``)."""
    if not paths:
        raise NotApplicable(f"no runs given for {parameter}: compare needs both sides, e.g. trainperf report --only "
                            "compare -p baseline_runs runs/before -p candidate_runs runs/after")
    return read_side(*paths, warmup=warmup, cache=True)


def open_steps(paths: str | Sequence[str] | None, runs: pd.DataFrame) -> Summaries | None:
    """The per-rank summaries of the step intervals of ``paths`` (never every step row) for the selected
    ``runs``; ``None`` without paths. ``attrs``: ``inputs``, ``skipped`` (steps of other runs), ``warnings``."""
    given = _existing(paths, "steps")
    if not given:
        return None
    with _reading() as caught:
        summaries = load_summaries(*given)
    ids = summaries.per_rank["run_id"].astype(str)
    keep = ids.isin(set(runs["run_id"].astype(str))).to_numpy(bool)
    skipped = []
    if (~keep).any():
        rows = int(summaries.per_rank.loc[~keep, "intervals"].sum())
        skipped.append((count(rows, "step row"), f"run not selected: {', '.join(ids[~keep].unique())}"))
    selected = summaries.select(ids[keep])
    selected.attrs = provenance(inputs=[str(Path(p).resolve()) for p in given], skipped=skipped,
                                warnings=[str(w.message) for w in caught])
    return selected


def data_steps(paths: str | Sequence[str] | None, runs: pd.DataFrame) -> Summaries | None:
    """The :func:`open_steps` of the ``data`` paths that hold run folders or steps tables; ``None``: none does."""
    return open_steps([p for p in _existing(paths, "data") if holds_steps(p)], runs)


def read_ahead(*paths: str) -> dict[str, dict]:
    """The pins of every input at or below ``paths`` (:func:`trainperf.reading.loading.pin_inputs`), read once
    before a build's kernels start; kept in memory for the ``open_*`` functions of this process and of those it
    forks (:func:`trainperf.reading.cache.keeping`)."""
    with keeping():
        return pin_inputs(*paths)


def _as_list(value: Sequence[str | Path] | str | Path | None) -> list:
    return [value] if isinstance(value, (str, Path)) else list(value or [])


def _select(runs: pd.DataFrame, column: str, wanted: Sequence[str] | str | None,
            skipped: list[tuple[str, str]]) -> pd.DataFrame:
    """Rows whose ``column`` is one of ``wanted``; the others are listed in ``skipped``."""
    names = _as_list(wanted)
    if not names:
        return runs
    found = list(dict.fromkeys(runs[column].dropna().astype(str))) if column in runs else []
    for name in names:
        if name not in found:
            raise InputError(f"{column} {name!r} has no runs in the data; {column}s found: "
                             f"{first_of(found, 12, total=True) or 'none'} (parameter {column}s)")
    keep = runs[column].isin(names).fillna(False).to_numpy(bool)  # the column is there: a name was found in it
    left_out = runs.loc[~keep]
    if len(left_out):
        others = ", ".join(dict.fromkeys(left_out[column].fillna("(none)").astype(str)))
        skipped.append((count(len(left_out), "run"), f"{column} not selected: {others}"))
    return runs.loc[keep].reset_index(drop=True)


def _override(runs: pd.DataFrame, *, baseline: str | None, precision: str | None,
              price_per_gpu_hour: float | None) -> tuple[pd.DataFrame, list[str]]:
    out = runs.copy()
    applied: list[str] = []
    if precision:
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
        column = out.get("baseline_run_id", pd.Series(pd.NA, index=out.index, dtype="string"))
        out["baseline_run_id"] = column.astype("string").mask(same, baseline)
        applied.append(f"baseline of experiment {experiment} set to run {baseline}")
    return out, applied


def require(runs: pd.DataFrame, column: str, what: str, supply: str) -> pd.DataFrame:
    """The runs with a value in ``column``, the others listed in ``attrs['skipped']``; :class:`NotApplicable`
    saying that none has ``what`` and how to ``supply`` it."""
    present = runs[column].notna() if column in runs else pd.Series(False, index=runs.index)
    have = runs[present]
    if have.empty:
        raise NotApplicable(f"none of the {count(len(runs), 'selected run')} has {what} ({column}): {supply}")
    missing = runs.loc[~present, "run_id"].astype(str).tolist()
    skipped = list(runs.attrs.get("skipped", []))
    if missing:
        skipped.append((f"{count(len(missing), 'run')}: {first_of(missing, 5)}",
                        f"no {what} ({column}), which this report needs"))
    have.attrs = {**runs.attrs, **provenance(skipped=skipped)}
    return have


def keep_experiments(runs: pd.DataFrame, keep: pd.Series, by: list[str], why_not: str,
                     none_kept: str) -> pd.DataFrame:
    """The runs of the experiments for which ``keep`` (a bool per experiment) holds,
    :func:`~trainperf.report.run_labels.ordered` by ``by``; the others go to ``attrs['skipped']`` with ``why_not``.
    :class:`NotApplicable` saying ``none_kept`` when none is kept."""
    if not keep.any():
        raise NotApplicable(none_kept)
    out = ordered(runs[runs["experiment"].isin(keep.index[keep]).fillna(False).to_numpy(bool)], by)
    out.attrs = {**runs.attrs, **provenance(skipped=[*runs.attrs.get("skipped", ()),
                                                    *((f"experiment {name}", why_not) for name in keep.index[~keep])])}
    return out


def header(title: str, runs: pd.DataFrame, subtitle: str = "", *, steps: Summaries | None = None) -> Html:
    """The report's title and what it covers (experiments, platforms and models, ``unknown`` included; a run in
    two scaling studies counted once), then a warning per kind of run the page never headlines
    (:func:`~trainperf.report.run_labels.doubt_notes`); records the title and the inputs for the index."""
    once = runs.drop_duplicates("run_id") if "run_id" in runs else runs
    parts = [count(len(once), "run")]
    for column in ("experiment", "platform", "model"):
        found = list(dict.fromkeys(runs[column].astype("string").fillna("unknown"))) if column in runs else (
            ["unknown"] if len(runs) else [])
        most = 8 if column == "experiment" else len(found)  # experiments named before the rest are counted
        parts.append(f"{column}{'s' if len(found) > 1 else ''}: {first_of(found, most, total=True)}")
    inputs = list(runs.attrs.get("inputs", [])) + list(steps.attrs.get("inputs", []) if steps is not None else [])
    head = page_title(title, " · ".join(parts) + (f"\n{subtitle}" if subtitle else ""),
                      {"title": title, "inputs": list(dict.fromkeys(inputs))})
    marked = [callout(note, "warn") for note in doubt_notes(once)]
    return Html(head.html + "".join(m.html for m in marked), "\n".join([head.text, *(m.text for m in marked)]),
                head.facts)


def sides_header(title: str, sides: Mapping[str, Sequence[str]]) -> Html:
    """The compare page's title with each side's inputs under it (``{"baseline": paths, …}``);
    records the title and the inputs for the index."""
    paths = {side: [str(Path(p).resolve()) for p in given] for side, given in sides.items()}
    subtitle = " · ".join(f"{side}: {', '.join(shown_path(p) for p in found)}" for side, found in paths.items())
    return page_title(title, subtitle, {"title": title, "inputs": [p for found in paths.values() for p in found]})


def sides_read(sides: Mapping[str, Sequence[str]]) -> list[str]:
    """Each input of each compare side (``{"baseline": paths, …}``), as ``baseline: shown path``."""
    return [f"{side}: {shown_path(path)}" for side, paths in sides.items() for path in paths]


def inputs_read(runs: pd.DataFrame, steps: Summaries | None = None) -> list[str]:
    """The inputs read (shown paths), a line on the per-rank steps when given, and one per input that was still
    being written (the snapshot every page reads)."""
    out = [shown_path(p) for p in runs.attrs.get("inputs", [])]
    if steps is not None:
        out.append(f"per-rank steps: {count(steps.rows, 'row')} of {count(len(steps.run_ids), 'run')} from "
                   + (", ".join(shown_path(p) for p in steps.attrs.get("inputs", [])) or "–"))
    return out + list(runs.attrs.get("snapshots", []))


def skipped(runs: pd.DataFrame, steps: Summaries | None = None) -> pd.DataFrame:
    """What was left out and why: rows ``where, reason`` (then parameters that changed the data and warnings)."""
    rows = list(runs.attrs.get("skipped", [])) + list(steps.attrs.get("skipped", []) if steps is not None else [])
    rows += [("parameters", text) for text in runs.attrs.get("overrides", [])]
    rows += [("warning while reading", text) for text in runs.attrs.get("warnings", [])]
    return pd.DataFrame(rows, columns=["where", "reason"])


def note_counts(runs: pd.DataFrame, *, scaling: bool = True, mfu: bool = True) -> pd.DataFrame:
    """The distinct notes of ``derive`` (``notes``, ``; ``-separated) with how many runs carry each and up to three
    run ids; without ``scaling``, not those about scaling only (:data:`trainperf.derived.SCALING_NOTES`), without
    ``mfu``, not those about HFU only (for a report that shows none of those figures)."""
    notes = runs.get("notes", pd.Series(index=runs.index)).astype("string").str.split("; ")
    notes = runs[["run_id"]].assign(note=notes).explode("note").dropna(subset=["note"])
    if hidden := (set() if scaling else set(SCALING_NOTES)) | (set() if mfu else {"hfu"}):
        keys = notes["note"].str.split(": ", n=1).str[0].str.split(", ")
        notes = notes[~keys.map(lambda names: set(names) <= hidden).to_numpy(bool)]
    return notes.groupby("note", sort=False)["run_id"].agg(
        runs="size", examples=lambda ids: first_of(ids.astype(str).tolist(), 3)).reset_index()


def impossible(runs: pd.DataFrame, *, scaling: bool = True) -> pd.DataFrame:
    """The figures emptied because they cannot be true (``trainperf.invariants``): rows ``figures, why, runs,
    examples`` (how many runs, up to three run ids); without ``scaling``, not those of scaling figures only."""
    found = violations(runs)
    if not scaling:
        found = found[~found["figures"].str.split(", ").map(lambda names: set(names) <= SCALING_NOTES).astype(bool)]
    return found.groupby(["figures", "why"], sort=False)["run_id"].agg(
        runs="size", examples=lambda ids: first_of(ids.astype(str).tolist(), 3)).reset_index()


def conventions(runs: pd.DataFrame, *, scaling: bool = True) -> list[str]:
    """The FLOPs conventions behind the runs' figures (counting the runs whose FLOPs could be computed, saying
    how many could not) and the fixed rules; the scaling multiplier's only with ``scaling``."""
    out = []
    if "flops_convention_used" in runs and "flops_per_token" in runs:
        for name, group in runs.groupby(runs["flops_convention_used"].astype("string"), sort=False):
            done = int(group["flops_per_token"].notna().sum())
            missed = (f"; not computed for {len(group) - done}, see “Empty or doubtful values”"
                      if done < len(group) else "")
            out.append(f"FLOPs per token, {name}: {CONVENTIONS.get(str(name), name)} ({count(done, 'run')}{missed})")
    out.append("Elapsed time of a run is its slowest rank's wall clock, never the mean over ranks.")
    if scaling:
        out.append("Scaling multiplier = throughput / baseline throughput; baseline = the run with the fewest "
                   "devices in its experiment unless one is named; efficiency = multiplier / (devices / baseline "
                   "devices).")
    return out + [
        "MFU = achieved model TFLOP/s per device / dense peak at the run's precision; HFU counts activation "
        "recomputation (× 4/3).",
        "Per-device figures divide by every device of the job; tokens per day = tokens/s × 86,400 s.",
    ]


def peak_entries(runs: pd.DataFrame) -> pd.DataFrame:
    """The peak-table entries used for MFU: rows ``platform, precision, peak_tflops_per_gpu, peak_source, runs``."""
    if "peak_tflops_per_gpu" not in runs:
        return pd.DataFrame(columns=["platform", "precision", "peak_tflops_per_gpu", "peak_source", "runs"])
    return (runs[runs["peak_tflops_per_gpu"].notna()]
            .groupby(["platform", "precision", "peak_tflops_per_gpu", "peak_source"], dropna=False)
            .size().reset_index(name="runs"))


def unverifiable_figures(runs: pd.DataFrame) -> list[str]:
    """``reported_<column>`` figures whose ``<column>`` trainperf could not compute for those runs."""
    out = []
    for column in runs.columns:
        name = column.removeprefix("reported_")
        if column.startswith("reported_") and name in runs:
            orphan = runs[column].notna() & runs[name].isna()
            if orphan.any():
                out.append(f"{name}: printed for {count(orphan.sum(), 'run')} "
                           f"({first_of(runs.loc[orphan, 'run_id'].astype(str).tolist(), 3)}) — trainperf cannot "
                           "recompute it from their data")
    return out


def reported_differences(runs: pd.DataFrame, tolerance: float = REPORTED_TOLERANCE) -> pd.DataFrame:
    """Rows ``run_id, figure, reported, trainperf, difference, note`` for every figure a source printed
    (``reported_<column>``) that differs from trainperf's ``<column>`` beyond ``tolerance`` and the last digit
    printed (:func:`trainperf.importers.reported.compare_reported`; MFU against the log's peak where it names one).
    ``difference`` is (source − trainperf) / trainperf, largest first; a printed peak of another device has none,
    and ``note`` says it is not comparable."""
    found = compare_reported(runs, tolerance, source_convention=False)
    out = found[found["flagged"] | found["note"].eq(OTHER_PEAK).fillna(False)].rename(
        columns={"metric": "figure", "recomputed": "trainperf", "relative_difference": "difference"})
    figures = {name.removeprefix("reported_"): i for i, name in enumerate(runs.columns)}
    out = out[["run_id", "figure", "reported", "trainperf", "difference", "note"]].sort_values(
        "figure", key=lambda names: names.map(figures), kind="stable")
    return out.reindex(out["difference"].abs().sort_values(ascending=False).index).reset_index(drop=True)


def difference_summary(differences: pd.DataFrame) -> pd.DataFrame:
    """Per figure: how many runs differ and the largest difference (signed, source − trainperf)."""
    if differences.empty:
        return pd.DataFrame(columns=["figure", "runs", "difference"])
    first = differences.groupby("figure", sort=False).agg(runs=("run_id", "size"), difference=("difference", "first"))
    return first.reset_index()


SOURCE_FIGURES = ("Figures the sources printed themselves (reported_* columns) that differ from the figure trainperf "
                  f"recomputes by more than {fmt_pct(REPORTED_TOLERANCE)} and by more than the last digit the source "
                  "printed. Difference = (source − trainperf) / trainperf; fractions (MFU, efficiency) as fractions, "
                  "trainperf's MFU against the peak the source divided by where it names one; a printed peak of "
                  "another device is not comparable. Where they differ, the report uses trainperf's.")
"""What the "Source figures vs trainperf" part lists."""


def quality(runs: pd.DataFrame, steps: Summaries | None = None, *, scaling: bool = True, mfu: bool = True) -> Html:
    """The data-quality section every report ends with (under its ``## Data quality`` heading) for a page showing
    ``runs`` (and ``steps``, where it reads them), its parts under ``h3`` headings; ``scaling``, ``mfu``: see
    :func:`note_counts`; a run shown twice, in two scaling studies, once."""
    runs = runs.drop_duplicates("run_id")
    differences = reported_differences(runs)
    parts = [
        ("Inputs read", [bullets(inputs_read(runs, steps))]),
        ("Skipped and why", [table(skipped(runs, steps), empty="Nothing was skipped.")]),
        ("Impossible figures, emptied", [table(impossible(runs, scaling=scaling),
                                               empty="No figure broke an invariant.")]),
        ("Empty or doubtful values", [table(note_counts(runs, scaling=scaling, mfu=mfu),
                                            empty="Every derived value of every run could be computed.")]),
        ("Conventions", [bullets(conventions(runs, scaling=scaling)),
                         table(peak_entries(runs),
                               caption="Peak table entries used for MFU (dense, never 2:4-sparse)")]),
        ("Source figures vs trainperf", [Html(f"<p>{esc(SOURCE_FIGURES)}</p>", SOURCE_FIGURES),
                                         table(difference_summary(differences), empty=NO_DIFFERENCES),
                                         table(differences.head(12), caption="The largest differences"),
                                         bullets(unverifiable_figures(runs))]),
    ]
    shown = [(title, [Html(p.to_html(), p.data.to_string(index=False)) if isinstance(p, Styler) else p
                      for p in pieces]) for title, pieces in parts]
    # each heading's id as nbconvert makes one for a Markdown heading (spaces as hyphens)
    html = "".join(f'<h3 id="{title.replace(" ", "-")}">{esc(title)}</h3>' + "".join(p.html for p in pieces)
                   for title, pieces in shown)
    return Html(html, "\n\n".join(title + "\n" + "\n".join(p.text for p in pieces) for title, pieces in shown))
