"""The platforms report: platforms × models — each pair's best configuration per device, the spread over
configurations, the winner per model where distinguishable, and capacity per day (docs/reports.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.derived import SECONDS_PER_DAY, datasheet_peak
from trainperf.estimates import distinguish, has_interval, run_intervals
from trainperf.hardware import cpu_rows, find_device, normalize_precision, platform_name
from trainperf.report.run_labels import (batch, configuration_table, doubtful, evaluation_notes, evaluation_rates,
                                         label, study_of)
from trainperf.report.page import InputError, require
from trainperf.report.html import Html, and_list, count, fmt_big, fmt_int, fmt_pct, fmt_short, headline as banner
from trainperf.report.scaling.projection import BAND_LEVEL, LAWS, MIN_FIT_POINTS, best_fit
from trainperf.scaling import SERIES_SETTINGS, fit
from trainperf.report.what_to_change import Found, row, rule, section_of
from trainperf.stats import FASTER, MIN_EFFECT, TIED, Difference, Verdict

SPARSE_MATCH = 0.02
"""Relative tolerance within which a source's peak counts as the vendor's 2:4-sparse figure."""


def comparable(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with a platform (named as the peak table names it), a model and a token rate, with ``platform_key``
    (plus the precision where a platform ran several); ``attrs["merged_platforms"]``: the spellings merged."""
    have = require(require(require(runs, "platform", "a platform", "give the column platform (e.g. NVIDIA H100 "
                                                             "SXM, cpu)"), "model", "a model", "give the column model"),
                   "tokens_per_s", "a throughput in tokens/s",
                   "give tokens and elapsed_s or tokens_per_s, or record tokens with StepProfiler "
                   "(prof.step(tokens=...))")
    given = have["platform"].astype(str)
    have = have.assign(platform=given.map(platform_name))
    merged = [f"{and_list([repr(s) for s in sorted(names)])} are one device, {name}: counted as one platform."
              for name, names in given.groupby(have["platform"].to_numpy()).unique().items() if len(names) > 1]
    several = have.groupby("platform")["precision"].transform("nunique").gt(1).to_numpy(bool)
    key = have["platform"].astype(str).where(~several, have["platform"].astype(str) + " · "
                                             + have["precision"].astype(str))
    out = have.assign(platform_key=key).reset_index(drop=True)
    out.attrs = {**have.attrs, "merged_platforms": merged}
    return out


MEANS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "tokens_per_day", "samples_per_day",
         "tflops_total", "tflops_per_gpu", "mfu", "hfu", "elapsed_s")
"""Figures of a configuration shown as the mean over its repeats."""


PAIR = ["platform_key", "model"]
"""The columns of a platform × model pair."""
PRECISION_POLICIES = {"same": "platforms are compared at the same precision: one comparison per model and precision",
                      "fastest": "each platform is compared at its fastest precision"}
"""How :func:`winners` compares platforms that ran a model at several precisions (``precision_policy``)."""


def contest(policy: str) -> list[str]:
    """What the platforms of one contest share: the model, and under the ``same`` policy the precision."""
    if policy not in PRECISION_POLICIES:
        raise InputError(f"precision_policy {policy!r}: give one of {', '.join(PRECISION_POLICIES)}")
    return ["model", "precision"] if policy == "same" else ["model"]


def best_per_device(configs: pd.DataFrame) -> pd.DataFrame:
    """Per platform × model, the configuration with the highest tokens/s per device among those without a
    ``doubt`` (a pair with only such rows keeps its best of them), in data order; never the largest job's total."""
    ranked = configs.assign(_doubt=configs["doubt"] != "").sort_values(
        ["_doubt", "tokens_per_s_per_gpu"], ascending=[True, False], kind="stable", na_position="last")
    return configs.loc[configs.index.isin(ranked.drop_duplicates(PAIR).index)]


def peaks(configs: pd.DataFrame, policy: str = "same") -> pd.DataFrame:
    """One row per platform × model: its :func:`best_per_device` configuration (``configuration`` in words),
    ``configs`` (how many the pair measured) and ``relative`` (its per-device rate / its :func:`contest`'s
    fastest, ``_low``/``_high`` from its interval)."""
    out = best_per_device(configs).reset_index(drop=True)
    sizes = configs.groupby(PAIR, sort=False).size()
    fastest = out.groupby(contest(policy), sort=False, dropna=False)["tokens_per_s_per_gpu"].transform("max")
    return out.assign(configuration=[label(r, skip=("model", "platform")) for r in out.to_dict("records")],
                      configs=[sizes[pair] for pair in zip(out["platform_key"], out["model"])],
                      relative=out["tokens_per_s_per_gpu"] / fastest,
                      relative_low=out["tokens_per_s_low"] / out["gpus"] / fastest,
                      relative_high=out["tokens_per_s_high"] / out["gpus"] / fastest)


COMPARED = ("precision", "gpus", *(c for c in SERIES_SETTINGS if c not in ("platform", "model", "n_params",
                                                                             "precision", "extra_configuration")))
"""The settings :func:`differences` compares, besides the batch."""


def differences(a: pd.Series, b: pd.Series) -> list[str]:
    """What differs between the recorded settings of two configurations, in words (``devices 32 vs 8``)."""
    def text(value: object) -> str:
        if isinstance(value, (bool, np.bool_)):
            return "on" if value else "off"
        return fmt_int(value) if isinstance(value, (int, float)) else str(value)

    out = []
    for column in COMPARED:
        x, y = a.get(column), b.get(column)
        if not (pd.isna(x) or pd.isna(y)) and text(x) != text(y):
            out.append(f"{SERIES_SETTINGS.get(column, 'devices')} {text(x)} vs {text(y)}")
    if pd.notna(a.get("micro_batch_size")) and pd.notna(b.get("micro_batch_size")):
        x, y = batch(a, compact=True), batch(b, compact=True)
        if x != y:
            out.append(f"micro-batch × accumulation {x} vs {y}")
    return out


WINNER = "winner"
SAME_SETTINGS = "same recorded settings"
"""``also`` of :func:`winners` where the two configurations differ in no recorded setting."""


def winners(configs: pd.DataFrame, found: pd.DataFrame, policy: str = "same") -> pd.DataFrame:
    """Per :func:`contest` on two or more platforms: the ``fastest`` per device (of its :func:`best_per_device`
    configuration), the runner-up, the ``margin`` and ``verdict``: ``winner`` only when distinguishable (by their
    intervals ``found``; by single figures, a margin of :data:`~trainperf.stats.MIN_EFFECT` or more), else
    ``indistinguishable``; ``also``: what else differs between the two."""
    rate = "tokens_per_s_per_gpu"
    per_pair, of_run = best_per_device(configs), found.drop_duplicates("run_id").set_index("run_id")
    rows = []
    for _, group in per_pair.groupby(contest(policy), sort=False, dropna=False):
        fastest = group.loc[group.groupby("platform", sort=False)[rate].idxmax()]
        if len(fastest) < 2:
            continue
        order = fastest[fastest[rate].notna()].sort_values(rate, ascending=False)
        best, second = order.iloc[0], order.iloc[1]
        a, b = of_run.loc[str(second["run_id"])], of_run.loc[str(best["run_id"])]
        tested = has_interval(a) and has_interval(b)
        margin = (distinguish(found, a["configuration"], b["configuration"]).difference.times(
            second["gpus"] / best["gpus"]) if tested  # per device: the ratio of totals times the ratio of devices
            else Difference(best[rate] / second[rate] - 1))
        verdict_ = WINNER if Verdict(margin, tested).verdict == FASTER else TIED
        evidence = (f"95 % interval of the margin {fmt_pct(margin.low)} to {fmt_pct(margin.high)}" if tested else
                    "no interval: single figures, the noise is not tested"
                    + ("" if verdict_ == WINNER else f"; below {fmt_pct(MIN_EFFECT, 0)}"))
        rows.append({"model": best["model"], "precision": best["precision"] if policy == "same" else None,
                     "fastest": best["platform_key"], "fastest_rate": best[rate],
                     "runner_up": second["platform_key"], "runner_up_rate": second[rate],
                     "margin": margin.estimate, "verdict": verdict_, "evidence": evidence,
                     "also": "; ".join(differences(best, second)) or SAME_SETTINGS,
                     "fastest_mfu": best["mfu"], "runner_up_mfu": second["mfu"]})
    return pd.DataFrame(rows, columns=["model", "precision", "fastest", "fastest_rate", "runner_up", "runner_up_rate",
                                       "margin", "verdict", "evidence", "also", "fastest_mfu", "runner_up_mfu"])


def sparse_peak_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs whose source's peak (given, or its TFLOPS / MFU) is the vendor's 2:4-sparse figure."""
    nothing = pd.Series(np.nan, index=runs.index)
    implied = runs.get("reported_peak_tflops_per_gpu", nothing).astype(float)
    if {"reported_tflops_per_gpu", "reported_mfu"} <= set(runs.columns):
        implied = implied.fillna(runs["reported_tflops_per_gpu"] / runs["reported_mfu"])
    rows = []
    for r in runs.assign(source_peak=implied, reported_mfu=runs.get("reported_mfu", nothing)).to_dict("records"):
        peak, precision = r["source_peak"], r["precision"]
        device = None if pd.isna(peak) or pd.isna(precision) else find_device(str(r["platform"]))
        figure = None if device is None else device.figures.get(normalize_precision(str(precision)))
        if figure is not None and figure.sparse is not None and abs(peak / figure.sparse - 1) <= SPARSE_MATCH:
            rows.append({**r, "dense_peak": figure.dense})
    return pd.DataFrame(rows, columns=["run_id", "platform", "source_peak", "dense_peak", "reported_mfu", "mfu"])


def headline(runs: pd.DataFrame, found: pd.DataFrame, best: pd.DataFrame) -> Html:
    """The first contest's winner and margin per device (without a contest, the first pair's rate), the platform
    that wins the most, and the best MFU against a datasheet peak (a run's own only when no run has one)."""
    figures = []
    if found.empty:
        top = best.iloc[0]
        rate = f"{fmt_int(top['tokens_per_s_per_gpu'])} tokens/s per device"
        text = (f"{top['platform_key']}, {top['model']}: " + (
            f"{rate} at best ({top['configuration']})" if top["doubt"] == "" else
            f"no configuration measures throughput without doubt (every run is projected, oversubscribed or "
            f"incomplete); the highest figure, {rate} ({top['configuration']}; {top['doubt']}), is not a measurement "
            "of the hardware") + "; no model was measured on two or more platforms.")
    else:
        w = found.iloc[0]
        rates = (f"{fmt_int(w['fastest_rate'])} vs {fmt_int(w['runner_up_rate'])} tokens/s per device"
                 + (f", both {w['precision']}" if pd.notna(w["precision"]) else ""))
        text = (f"{w['model']}: {w['fastest']} is {fmt_pct(w['margin'])} faster per device than {w['runner_up']} "
                f"({rates}; {w['evidence']})." if w["verdict"] == WINNER else
                f"{w['model']}: {w['fastest']} and {w['runner_up']} are indistinguishable per device ({rates}, "
                f"{fmt_pct(w['margin'])} apart; {w['evidence']}).")
        if w["also"] != SAME_SETTINGS:
            text += f" Their best configurations also differ: {w['also']}."
        wins = found.loc[found["verdict"] == WINNER, "fastest"].value_counts(sort=True)
        if len(wins):
            figures.append((f"{wins.iloc[0]} of {len(found)}", f"comparisons won per device by {wins.index[0]}"))
    possible = (runs["mfu"].notna() & ~doubtful(runs)).to_numpy(bool)  # an impossible MFU is empty (invariants)
    rated, kind = runs[datasheet_peak(runs) & possible], "datasheet dense peak"
    if rated.empty:
        rated, kind = runs[possible], "against the peak given in the run"
    if len(rated):
        best_mfu = rated.loc[rated["mfu"].idxmax()]
        figures.append((fmt_pct(best_mfu["mfu"]), f"highest MFU ({kind}): {best_mfu['platform_key']}, "
                                                  f"{best_mfu['model']}"))
    return banner(text, figures)


def policy_notes(runs: pd.DataFrame, configs: pd.DataFrame, policy: str = "same") -> list[str]:
    """How platforms are compared, the contests measured on one platform only, and the spellings merged."""
    alone = [" at ".join(str(k) for k in key if pd.notna(k)) + f" ({group['platform'].astype(str).iloc[0]})"
             for key, group in configs.groupby(contest(policy), sort=False, dropna=False)
             if len(set(group["platform"].astype(str))) == 1]
    hint = (" precision_policy = “fastest” compares each platform at its fastest precision." if policy == "same"
            else "")
    return [f"Precision policy “{policy}”: {PRECISION_POLICIES[policy]}.",
            *([f"Measured on one platform only, so no winner is named: {and_list(alone)}.{hint}"] if alone else []),
            *runs.attrs.get("merged_platforms", [])]


def sparse_note(found: pd.DataFrame) -> str:
    """A sentence on the runs of :func:`sparse_peak_runs` ``found``."""
    if found.empty:
        return ("No source in the data divided by a 2:4-sparse peak: published MFU figures and trainperf's use "
                "the same kind of peak.")
    items = "; ".join(f"{r.run_id} ({r.platform}): {r.source_peak:,.0f} sparse → {r.dense_peak:,.1f} dense, "
                      f"MFU {fmt_pct(r.reported_mfu)} → {fmt_pct(r.mfu)}" for r in found.itertuples())
    return (f"Sparse peaks in the source. The source computed MFU against the vendor's 2:4 structured-sparsity "
            f"peak, twice the dense one, for {count(len(found), 'run')}. Training runs dense matmuls, so trainperf "
            f"divides by the dense peak: {items}.")


def own_peak_platforms(runs: pd.DataFrame) -> list[str]:
    """Platform keys with an MFU computed against a peak given in the run (e.g. measured on a CPU)."""
    own = runs[~datasheet_peak(runs) & runs["mfu"].notna().to_numpy(bool)]
    return list(dict.fromkeys(own["platform_key"].astype(str)))


def mfu_notes(runs: pd.DataFrame, sparse: pd.DataFrame) -> list[str]:
    """Which MFUs do not compare with the others: a source's against a ``sparse`` peak, and a run's own peak."""
    out = []
    if len(sparse):
        out.append("MFU: trainperf's, against the dense peak; the sources of "
                   f"{', '.join(sparse['run_id'].astype(str))} printed one against the sparse peak.")
    if own := own_peak_platforms(runs):
        out.append(f"{', '.join(own)}: MFU against the peak given in the run (for a CPU, a measured matmul rate), "
                   "not a datasheet figure — marked “own peak” in the charts and not comparable with the others.")
    return out


def mfu_label(runs: pd.DataFrame) -> pd.Series:
    """The platform key of each run, with “ (own peak)” where its MFU is against a peak given in the run."""
    own = set(own_peak_platforms(runs))
    return runs["platform_key"].astype(str).map(lambda k: f"{k} (own peak)" if k in own else k)


def capacity(configs: pd.DataFrame, project_nodes: list[int], gpus_per_node: int) -> pd.DataFrame:
    """Per accelerator platform × model and node count, from its :func:`best_per_device` configuration's scaling
    study: ``devices``, ``tokens_per_s`` (95 % band ``_low``/``_high`` where fitted), ``tokens_per_day``, ``basis``
    (``measured``, ``fitted`` by the best of Amdahl and USL from :data:`MIN_FIT_POINTS` device counts on, else
    ``upper bound``: per-device rate × devices) and the devices ``measured``."""
    if not all(isinstance(n, int) and n >= 1 for n in [gpus_per_node, *project_nodes]):
        raise InputError(f"project_nodes ({project_nodes}) and gpus_per_node ({gpus_per_node}) must be whole "
                         "numbers of 1 or more")
    rows = []
    study = study_of(configs)
    best = best_per_device(configs)
    for i, top in best[~cpu_rows(best["platform"])].iterrows():
        alike = (study == study[i]) & (configs["doubt"] == "") if top["doubt"] == "" else configs.index == i
        series = configs[alike].groupby("gpus")["tokens_per_s"].mean().sort_index()
        key, model, shown = top["platform_key"], top["model"], label(top, skip=("model", "platform"))
        base_gpus, base_rate = float(series.index[0]), float(series.iloc[0])
        p = series.index.to_numpy(float) / base_gpus
        fitted, relative = None, np.array(project_nodes, dtype=float) * gpus_per_node / base_gpus
        if len(p) >= MIN_FIT_POINTS:
            fitted = best_fit(fit(p, series.to_numpy(float) / base_rate, law) for law in LAWS)
            bands = fitted.band(relative, BAND_LEVEL)  # once for every node count
        measured = "–".join(dict.fromkeys(fmt_int(g) for g in (series.index.min(), series.index.max())))
        for j, nodes in enumerate(project_nodes):
            gpus, low, high = nodes * gpus_per_node, np.nan, np.nan
            if gpus in series.index:
                rate, basis = float(series[gpus]), "measured"
            elif gpus < base_gpus:
                rate, basis = np.nan, "below the measured range"
            elif fitted is not None:
                rate, basis = fitted.predict(relative[j]).item() * base_rate, f"fitted ({LAWS[fitted.law]})"
                low, high = max(bands[0][j], 0.0) * base_rate, bands[1][j] * base_rate
            else:
                rate, basis = float(top["tokens_per_s_per_gpu"]) * gpus, "upper bound"
            rows.append({"platform_key": key, "model": model, "configuration": shown, "nodes": nodes, "devices": gpus,
                         "tokens_per_s": rate, "tokens_per_s_low": low, "tokens_per_s_high": high,
                         "tokens_per_day": rate * SECONDS_PER_DAY, "basis": basis,
                         "measured": measured})
    return pd.DataFrame(rows, columns=["platform_key", "model", "configuration", "nodes", "devices", "tokens_per_s",
                                       "tokens_per_s_low", "tokens_per_s_high", "tokens_per_day", "basis", "measured"])


def capacity_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`capacity` one row per platform × model, one text column per node count: ``1.2 M/s · 104 B/day``
    measured, ``≈ … (USL, 95 %: …)`` fitted, ``≤ …`` the linear upper bound."""
    def text(row: pd.Series) -> str:
        if pd.isna(row["tokens_per_s"]):
            return f"– ({row['basis']})"
        mark = {"measured": "", "upper bound": "≤ "}.get(row["basis"], "≈ ")
        band = (f" ({row['basis'].removeprefix('fitted (').rstrip(')')}, 95 %: {fmt_short(row['tokens_per_s_low'])}–"
                f"{fmt_short(row['tokens_per_s_high'])}/s)" if row["basis"].startswith("fitted") else "")
        return f"{mark}{fmt_short(row['tokens_per_s'])}/s · {fmt_short(row['tokens_per_day'])}/day{band}"
    shown = frame.assign(text=frame.apply(text, axis=1) if len(frame) else [],
                         column=[f"{n:,} node{'s' if n > 1 else ''} ({d:,} devices)"
                                 for n, d in zip(frame["nodes"], frame["devices"])])
    pair = ["platform_key", "model", "configuration", "measured"]
    wide = shown.pivot(index=pair, columns="column", values="text")
    wide = wide.reindex(pd.MultiIndex.from_frame(shown[pair].drop_duplicates()))  # in the data's order
    return wide[list(dict.fromkeys(shown["column"]))].reset_index().rename_axis(columns=None)


def capacity_notes(runs: pd.DataFrame, configs: pd.DataFrame, capacity_frame: pd.DataFrame) -> list[str]:
    """The daily capacity of the measured job with the most throughput (a size, not a ranking), and what
    :func:`capacity` bounds."""
    clean = configs[configs["doubt"] == ""] if (configs["doubt"] == "").any() else configs
    top = clean.loc[clean["tokens_per_s"].idxmax()]
    samples = "" if pd.isna(top["samples_per_day"]) else f" and {fmt_big(top['samples_per_day'])} samples"
    out = [f"The measured job with the most throughput ({top['platform_key']}, {top['model']}, "
           f"{count(top['gpus'], 'device')}) trains "
           f"{fmt_big(top['tokens_per_day'])} tokens{samples} per day: the size of that job, not a ranking — "
           "platforms are ranked per device above."]
    if (capacity_frame["basis"] == "upper bound").any():
        out.append(f"Pairs whose best configuration was measured at fewer than {MIN_FIT_POINTS} device counts cannot be "
                   "fitted: their multi-node figures are the linear upper bound (that configuration's per-device "
                   "rate times the devices), which real jobs do not reach — see the scaling report for how "
                   "efficiency falls with scale.")
    cpu = runs.loc[cpu_rows(runs["platform"]), "platform_key"].astype(str).unique()
    if len(cpu):
        out.append(f"{', '.join(cpu)}: CPU runs are not projected to nodes of accelerators.")
    return out


@dataclass(frozen=True)
class PlatformsPage:
    """Every frame and sentence of the platforms page, in its order, each named after the function making it."""

    headline: Html
    sparse_peak_runs: pd.DataFrame
    sparse_note: str
    peaks: pd.DataFrame
    mfu_notes: list[str]
    policy_notes: list[str]
    winners: pd.DataFrame
    configurations: pd.DataFrame
    capacity: pd.DataFrame
    capacity_notes: list[str]
    capacity_table: pd.DataFrame
    evaluation_notes: list[str]
    evaluation_rates: pd.DataFrame


def analyse(runs: pd.DataFrame, steps: Summaries | None = None, policy: str = "same",
            project_nodes: tuple[int, ...] | list[int] = (1, 2, 4, 8), gpus_per_node: int = 8) -> PlatformsPage:
    """The platforms page of ``runs`` (:func:`comparable`), compared under the precision ``policy``, each pair's
    capacity projected to ``project_nodes`` nodes of ``gpus_per_node`` devices."""
    found, sparse = run_intervals(runs), sparse_peak_runs(runs)
    configs = configuration_table(runs, MEANS, found)
    best = peaks(configs, policy)
    found = winners(configs, found, policy)
    projected = capacity(configs, list(project_nodes), gpus_per_node)
    return PlatformsPage(
        headline=headline(runs, found, best),
        sparse_peak_runs=sparse, sparse_note=sparse_note(sparse), peaks=best, mfu_notes=mfu_notes(runs, sparse),
        policy_notes=policy_notes(runs, configs, policy), winners=found, configurations=configs, capacity=projected,
        capacity_notes=capacity_notes(runs, configs, projected), capacity_table=capacity_table(projected),
        evaluation_notes=evaluation_notes(runs, steps), evaluation_rates=evaluation_rates(runs, steps))


@rule("the settings of a faster platform")
def platform_settings(page: PlatformsPage) -> Found:
    """Per :func:`winners` winner whose best configuration differs in settings from the runner-up's: try them on
    the runner-up (no gain can be given: the margin is the hardware's too)."""
    found = page.winners
    if found.empty:
        return Found(lacking="no model was measured on two or more platforms")
    out = Found()
    for w in found[(found["verdict"] == WINNER) & (found["also"] != SAME_SETTINGS)].itertuples():
        out.rows.append(row(
            f"Try on {w.runner_up} the settings {w.fastest}'s best configuration used: "
            + "; ".join(entry.split(" vs ")[0] for entry in w.also.split("; ")),
            f"{w.fastest} is {fmt_pct(w.margin)} faster per device ({fmt_int(w.fastest_rate)} against "
            f"{fmt_int(w.runner_up_rate)} tokens/s per device; {w.evidence}); their best configurations also "
            f"differ in {w.also}", math.nan, "tokens/s per device", f"{w.model} on {w.runner_up}", bound=True))
    if not out.rows:
        out.lacking = "every winner's best configuration has the runner-up's recorded settings"
    return out


RULES = (platform_settings,)
"""The platforms page's rules (each reads the :class:`PlatformsPage`)."""


what_to_change = partial(section_of, RULES)
