"""The platforms report: platforms × models — peak throughput, achieved
TFLOP/s and MFU against dense peaks, per-device throughput, the spread over
configurations, training capacity per day and projected multi-node capacity,
and the winner per model with its margin."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from trainperf.derive import SECONDS_PER_DAY
from trainperf.errors import DataError
from trainperf.hardware import dense_peak_tflops, find_device, normalize_precision
from trainperf.report import plots
from trainperf.report.configs import rank
from trainperf.report.html import (Col, Fragment, Section, callout, fmt_big, fmt_int, fmt_pct, fmt_short,
                                   headline as banner, join, key_figures, paragraph, table)
from trainperf.report.page import require
from trainperf.report.scaling import BAND_LEVEL, LAWS, MIN_FIT_POINTS, project, usd_per_million

SPARSE_MATCH = 0.02
"""Relative tolerance within which a source's peak counts as the vendor's 2:4-sparse figure."""
MAX_BOXES = 16
"""Most groups drawn in one distribution chart."""


def comparable(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with a platform, a model and a token rate, with ``platform_key``
    (the platform, plus the precision where a platform ran several)."""
    have = require(require(require(runs, "platform", "a platform"), "model", "a model"),
                   "tokens_per_s", "a throughput in tokens/s")
    precisions = have.groupby("platform")["precision"].nunique()
    several = have["platform"].map(precisions).fillna(0).gt(1).to_numpy(bool)
    key = have["platform"].astype(str).where(~several, have["platform"].astype(str) + " · "
                                             + have["precision"].astype(str))
    out = have.assign(platform_key=key).reset_index(drop=True)
    out.attrs = have.attrs
    return out


def peaks(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per platform × model: its highest-throughput run (all columns),
    plus ``configs`` (runs measured) and ``best_per_device`` (the highest
    per-device rate of any of its runs)."""
    rows = []
    for (key, model), group in runs.groupby(["platform_key", "model"], sort=False):
        best = group.loc[group["tokens_per_s"].idxmax()].copy()
        best["configs"] = len(group)
        best["best_per_device"] = group["tokens_per_s_per_gpu"].max()
        rows.append(best)
    return pd.DataFrame(rows).reset_index(drop=True)


def winners(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model measured on two or more platforms: the platform with the
    highest per-device throughput, the runner-up and the margin. Platforms are
    compared with each other, each at its fastest precision (the label says
    which): one device at fp8 and at bf16 is not two contenders."""
    table_ = peaks(runs)
    rows = []
    for model, group in table_.groupby("model", sort=False):
        fastest = group.loc[group.groupby("platform", sort=False)["best_per_device"].idxmax()]
        if len(fastest) < 2:
            continue
        ranking = rank(fastest, "best_per_device")
        rows.append({"model": model, "winner": ranking.best["platform_key"],
                     "winner_rate": ranking.best["best_per_device"],
                     "runner_up": ranking.runner_up["platform_key"],
                     "runner_up_rate": ranking.runner_up["best_per_device"], "margin": ranking.margin,
                     "winner_mfu": ranking.best["mfu"], "runner_up_mfu": ranking.runner_up["mfu"]})
    return pd.DataFrame(rows)


def sparse_peak_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs whose source divided by the vendor's 2:4-sparse peak: the peak it
    used (``reported_peak_tflops_per_gpu``, else ``reported_tflops_per_gpu /
    reported_mfu``) is within :data:`SPARSE_MATCH` of the sparse figure.
    Columns: run_id, platform, source_peak, dense_peak, reported_mfu, mfu."""
    implied = pd.Series(np.nan, index=runs.index)
    if "reported_peak_tflops_per_gpu" in runs:
        implied = runs["reported_peak_tflops_per_gpu"].astype(float)
    if {"reported_tflops_per_gpu", "reported_mfu"} <= set(runs.columns):
        implied = implied.fillna(runs["reported_tflops_per_gpu"] / runs["reported_mfu"])
    rows = []
    for i, run in runs[implied.notna()].iterrows():
        device = find_device(str(run["platform"]))
        if device is None or pd.isna(run.get("precision")):
            continue
        figure = device.figures.get(normalize_precision(run["precision"]))
        if figure is None or figure.sparse is None:
            continue
        if abs(implied[i] / figure.sparse - 1) <= SPARSE_MATCH:
            rows.append({"run_id": run["run_id"], "platform": run["platform"], "source_peak": implied[i],
                         "dense_peak": figure.dense, "reported_mfu": run.get("reported_mfu"), "mfu": run["mfu"]})
    return pd.DataFrame(rows, columns=["run_id", "platform", "source_peak", "dense_peak", "reported_mfu", "mfu"])


def datasheet_peak(runs: pd.DataFrame) -> np.ndarray:
    """Whether each run's MFU divides by its device's datasheet dense peak
    (``trainperf.hardware``), rather than by a peak given in the run, such as
    one measured on a CPU. MFUs of the two kinds do not compare."""
    out = []
    for platform, precision, peak in zip(runs["platform"], runs["precision"], runs["peak_tflops_per_gpu"]):
        if pd.isna(platform) or pd.isna(precision) or pd.isna(peak):
            out.append(False)
            continue
        try:
            sheet = dense_peak_tflops(str(platform), str(precision))
        except DataError:
            sheet = None
        out.append(sheet is not None and math.isclose(sheet.tflops, float(peak), rel_tol=1e-6))
    return np.array(out, dtype=bool)


def headline(runs: pd.DataFrame) -> Fragment:
    """The first model's winner and margin; the best MFU against a datasheet
    peak (a run's own peak, e.g. a CPU's measured one, only when no run has a
    datasheet peak); the peak daily capacity."""
    found = winners(runs)
    top = runs.loc[runs["tokens_per_s"].idxmax()]
    figures = [(fmt_int(top["tokens_per_s"]), f"peak tokens/s: {top['platform_key']}, {top['model']}, "
                                              f"{fmt_int(top['gpus'])} devices"),
               (fmt_big(top["tokens_per_day"]), "tokens per day at that peak")]
    sheet = datasheet_peak(runs)
    rated = runs[sheet & runs["mfu"].notna().to_numpy(bool)]
    if len(rated):
        best_mfu = rated.loc[rated["mfu"].idxmax()]
        figures.append((fmt_pct(best_mfu["mfu"]), f"highest MFU (datasheet dense peak): "
                                                  f"{best_mfu['platform_key']}, {best_mfu['model']}"))
    elif runs["mfu"].notna().any():
        best_mfu = runs.loc[runs["mfu"].idxmax()]
        figures.append((fmt_pct(best_mfu["mfu"]), f"highest MFU (against the peak given in the run): "
                                                  f"{best_mfu['platform_key']}, {best_mfu['model']}"))
    if found.empty:
        line = banner("Peak throughput {rate} tokens/s: {platform} with {model}.", rate=fmt_int(top["tokens_per_s"]),
                      platform=top["platform_key"], model=top["model"])
    else:
        w = found.iloc[0]
        line = banner("{model}: {winner} is {margin} faster per device than {runner} "
                      "({a} vs {b} tokens/s per device).", model=w["model"], winner=w["winner"],
                      margin=fmt_pct(w["margin"]), runner=w["runner_up"], a=fmt_int(w["winner_rate"]),
                      b=fmt_int(w["runner_up_rate"]))
    return join([line, key_figures(figures)])


def sparse_note(runs: pd.DataFrame) -> Fragment:
    """A visible note for every run whose source computed MFU against a sparse peak."""
    found = sparse_peak_runs(runs)
    if found.empty:
        return paragraph("No source in the data divided by a 2:4-sparse peak: published MFU figures and "
                         "trainperf's use the same kind of peak.")
    items = "; ".join(f"{r.run_id} ({r.platform}): {r.source_peak:,.0f} sparse → {r.dense_peak:,.1f} dense, "
                      f"MFU {fmt_pct(r.reported_mfu)} → {fmt_pct(r.mfu)}" for r in found.itertuples())
    return callout("<strong>Sparse peaks in the source.</strong> The source computed MFU against the vendor's "
                   "2:4 structured-sparsity peak, twice the dense one, for {n} run(s). Training runs dense "
                   "matmuls, so trainperf divides by the dense peak: {items}.", "warn",
                   n=len(found), items=items)


def peak_table(runs: pd.DataFrame) -> Section:
    """Platform × model: peak throughput, per-device rates and daily capacity;
    then achieved TFLOP/s and MFU against the dense peak."""
    view = peaks(runs)
    sparse = set(sparse_peak_runs(runs)["run_id"].astype(str))
    view = view.assign(mfu_text=[fmt_pct(m) + (" *" if str(r) in sparse else "")
                                 for m, r in zip(view["mfu"], view["run_id"])])
    throughput = [Col("platform_key", "Platform", wrap=True), Col("model", "Model"), Col("configs", "Configs", "int"),
                  Col("tokens_per_s", "Peak tokens/s", "int"), Col("gpus", "Devices at peak", "int"),
                  Col("tokens_per_s_per_gpu", "Tokens/s per device at peak", "int"),
                  Col("best_per_device", "Best tokens/s per device", "int",
                      help="the highest per-device rate of any configuration"),
                  Col("tokens_per_day", "Tokens per day at peak", "big"),
                  Col("samples_per_day", "Samples per day at peak", "big")]
    if view["price_per_gpu_hour"].notna().any():
        view = view.assign(usd_per_million=usd_per_million(view, "tokens_per_s"))
        throughput.append(Col("usd_per_million", "$ per million tokens", "usd"))
    compute = [Col("platform_key", "Platform", wrap=True), Col("model", "Model"), Col("precision", "Precision"),
               Col("tflops_total", "TFLOP/s total", "sig"), Col("tflops_per_gpu", "TFLOP/s per device", "sig4"),
               Col("peak_tflops_per_gpu", "Dense peak per device", "sig4"), Col("mfu_text", "MFU (dense peak)"),
               Col("hfu", "HFU", "pct", help="with activation recomputation counted (× 4/3)"),
               Col("flops_convention_used", "FLOPs formula")]
    note = ("Peak: the run with the highest tokens/s of each platform × model. MFU: achieved model TFLOP/s per "
            "device / the dense peak at the run's precision.")
    if sparse:
        note += " * the source printed an MFU against the sparse peak (see the note above)."
    own = own_peak_platforms(runs)
    if own:
        note += (f" {', '.join(own)}: the peak is the one given in the run (for a CPU, a measured matmul rate), not "
                 "a datasheet figure; its MFU does not compare with the others.")
    return Section([table(view, throughput, caption="Throughput and capacity"),
                    table(view, compute, caption="Compute: achieved TFLOP/s and utilisation", note=note)])


def winner_table(runs: pd.DataFrame) -> Fragment:
    """The winner per model (per-device throughput) with its margin, and both MFUs."""
    found = winners(runs)
    if found.empty:
        return paragraph("No model was measured on two or more platforms: there is no winner to name.")
    return table(found, [Col("model", "Model"), Col("winner", "Winner", wrap=True),
                         Col("winner_rate", "Tokens/s per device", "int"), Col("runner_up", "Runner-up", wrap=True),
                         Col("runner_up_rate", "Runner-up tokens/s per device", "int"),
                         Col("margin", "Margin", "pct"), Col("winner_mfu", "Winner MFU", "pct"),
                         Col("runner_up_mfu", "Runner-up MFU", "pct")],
                 note="Platforms are compared per device (each platform's best configuration), so a platform "
                      "measured on more devices does not win by size alone.")


def comparison_charts(runs: pd.DataFrame) -> Section:
    """Per-device throughput and MFU per model, one bar per platform (best configuration)."""
    view = peaks(runs)
    fastest = view.groupby("model")["best_per_device"].transform("max")
    view = view.assign(relative=view["best_per_device"] / fastest)
    models = list(dict.fromkeys(view["model"].astype(str)))
    keys = list(dict.fromkeys(view["platform_key"].astype(str)))
    relative = {k: [_cell(view, k, m, "relative") for m in models] for k in keys}
    own = own_peak_platforms(runs)
    mfu = {_mfu_label(k, own): [_cell(view, k, m, "mfu") for m in models] for k in keys}
    return Section([
        plots.grouped_bars(models, relative, title="Per-device throughput relative to the model's fastest platform",
                           ylabel="best tokens/s per device (fastest = 100 %)", percent=True),
        plots.grouped_bars(models, mfu, title="MFU against dense peaks at the peak configuration",
                           ylabel="MFU", percent=True),
        own_peak_note(runs),
    ])


OWN_PEAK = " (own peak)"
"""Marks a platform whose MFU divides by a peak given in its runs, not a datasheet's."""


def own_peak_platforms(runs: pd.DataFrame) -> list[str]:
    """Platform keys with an MFU computed against a peak given in the run (e.g. measured on a CPU)."""
    own = runs[~datasheet_peak(runs) & runs["mfu"].notna().to_numpy(bool)]
    return list(dict.fromkeys(own["platform_key"].astype(str)))


def _mfu_label(key: str, own: list[str]) -> str:
    return key + OWN_PEAK if key in own else key


def own_peak_note(runs: pd.DataFrame) -> Fragment:
    """Which platforms' MFU is against a peak given in the run, and why it does not compare."""
    own = own_peak_platforms(runs)
    if not own:
        return Fragment("")
    return paragraph("{names}: MFU against the peak given in the run (for a CPU, a measured matmul rate), not "
                     "a datasheet figure — marked “own peak” and not comparable with the datasheet MFUs of the "
                     "other platforms.", names=", ".join(own))


def _cell(view: pd.DataFrame, key: str, model: str, column: str) -> float:
    hit = view[(view["platform_key"].astype(str) == key) & (view["model"].astype(str) == model)]
    return float(hit[column].iloc[0]) if len(hit) and pd.notna(hit[column].iloc[0]) else float("nan")


def distributions(runs: pd.DataFrame) -> Section:
    """The spread over configurations: MFU per platform, and per-device
    throughput per platform × model where that has several configurations."""
    out: list = []
    own = own_peak_platforms(runs)
    mfu = {_mfu_label(k, own): g["mfu"].dropna().to_numpy() for k, g in runs.groupby("platform_key", sort=False)}
    mfu = {k: v for k, v in mfu.items() if len(v)}
    if mfu:
        out.append(plots.distribution(mfu, title="MFU over every configuration, per platform", ylabel="MFU (fraction)"))
        out.append(own_peak_note(runs))
    groups = {f"{k}\n{m}": g["tokens_per_s_per_gpu"].to_numpy()
              for (k, m), g in runs.groupby(["platform_key", "model"], sort=False) if len(g) >= 2}
    if groups:
        largest = sorted(groups, key=lambda name: -len(groups[name]))[:MAX_BOXES]
        shown = {name: groups[name] for name in groups if name in largest}
        out.append(plots.distribution(shown, title="Tokens/s per device over configurations",
                                      ylabel="tokens/s per device"))
        if len(groups) > MAX_BOXES:
            out.append(paragraph("Showing the {n} platform × model pairs with the most configurations of {total}.",
                                 n=MAX_BOXES, total=len(groups)))
    else:
        out.append(paragraph("Every platform × model pair has a single configuration: no spread to show."))
    return Section(out)


def capacity(runs: pd.DataFrame, project_nodes: list[int], gpus_per_node: int) -> Section:
    """Tokens/s and tokens per day at ``project_nodes`` nodes of
    ``gpus_per_node`` devices, per platform × model: measured where a run
    has that size, else projected by the best-fitting scaling law (with its
    95 % band) where the pair was measured at enough device counts, else the
    linear upper bound — marked as such."""
    rows, bounds = [], False
    for (key, model), group in runs.groupby(["platform_key", "model"], sort=False):
        series = group.groupby("gpus")["tokens_per_s"].max().sort_index()
        base_gpus, base_rate = float(series.index[0]), float(series.iloc[0])
        p = series.index.to_numpy(float) / base_gpus
        fitted = None
        if len(p) >= MIN_FIT_POINTS:
            target = max(project_nodes) * gpus_per_node / base_gpus
            proj = project(f"{key} {model}", p, series.to_numpy(float) / base_rate, max(target, p.max() * 2),
                           base_gpus)
            fitted = min(proj.fits.values(), key=lambda f: f.rmse)
        row = {"platform_key": key, "model": model, "measured": f"{fmt_int(series.index.min())}–"
                                                                 f"{fmt_int(series.index.max())}"}
        for nodes in project_nodes:
            gpus = nodes * gpus_per_node
            if gpus in series.index:
                rate = float(series[gpus])
                row[f"n{nodes}"] = f"{fmt_short(rate)}/s · {fmt_short(rate * SECONDS_PER_DAY)}/day"
            elif gpus < base_gpus:
                row[f"n{nodes}"] = "– (below the measured range)"
            elif fitted is not None:
                lo, hi = fitted.band(gpus / base_gpus, BAND_LEVEL)
                rate = fitted.predict(gpus / base_gpus).item() * base_rate
                row[f"n{nodes}"] = (f"≈ {fmt_short(rate)}/s · {fmt_short(rate * SECONDS_PER_DAY)}/day "
                                    f"({LAWS[fitted.law]}, 95 %: {fmt_short(max(lo[0], 0.0) * base_rate)}–"
                                    f"{fmt_short(hi[0] * base_rate)}/s)")
            else:
                rate = float(group["tokens_per_s_per_gpu"].max()) * gpus
                row[f"n{nodes}"] = f"≤ {fmt_short(rate)}/s · {fmt_short(rate * SECONDS_PER_DAY)}/day"
                bounds = True
        rows.append(row)
    frame = pd.DataFrame(rows)
    columns = [Col("platform_key", "Platform", wrap=True), Col("model", "Model"), Col("measured", "Devices measured")] + [
        Col(f"n{n}", f"{n} node{'s' if n > 1 else ''} ({n * gpus_per_node} devices)", wrap=True)
        for n in project_nodes]
    out: list = [table(frame, columns, note=f"Tokens per second and per day; {gpus_per_node} devices per node. "
                                            "Plain: measured. ≈: projected by the Amdahl or USL fit (whichever fits "
                                            "the measured multipliers better), with its 95 % band, for pairs measured "
                                            "at three or more device counts. ≤: linear upper bound. "
                                            "k, M, B, T: thousand, million, billion, trillion.")]
    if bounds:
        out.insert(0, callout("Pairs measured at fewer than three device counts cannot be fitted: their multi-node "
                              "figures are the <strong>linear upper bound</strong> (the best per-device rate times "
                              "the devices), which real jobs do not reach — see the scaling report for how "
                              "efficiency falls with scale.", "warn"))
    return Section(out)


def capacity_headline(runs: pd.DataFrame) -> Fragment:
    """Training capacity per day of the overall peak run."""
    top = runs.loc[runs["tokens_per_s"].idxmax()]
    return paragraph("At its peak ({platform}, {model}, {gpus} devices) the fastest configuration trains {tokens} "
                     "tokens and {samples} samples per day.", platform=top["platform_key"], model=top["model"],
                     gpus=fmt_int(top["gpus"]), tokens=fmt_big(top["tokens_per_day"]),
                     samples=fmt_big(top["samples_per_day"]))

