"""What to change: the few changes a page's runs support, each with its expected gain and confidence; the rules
several pages share, the compare page's, and the section (docs/reports.md, "What to change")."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.compare import Comparison
from trainperf.estimates import Side, configuration_keys, distinguish, estimate_steps, job_frames
from trainperf.report import run_labels
from trainperf.report.html import Html, and_list, count, esc, first_of, fmt_int, fmt_num, fmt_pct, fmt_seconds
from trainperf.report.phases import typical_s
from trainperf.report.theme import table as styled
from trainperf.stats import FASTER, INCONCLUSIVE, MIN_EFFECT, SLOWER, t_quantile

COLUMNS = ["change", "evidence", "expected_gain", "gain_of", "seconds_saved", "saved_per", "confidence",
           "applies_to"]
"""The columns of :func:`listed`: one row per change."""
MOST = 6
"""Changes a page lists at most (the largest expected gains); the others are counted."""


@dataclass(frozen=True)
class Measured:
    """What the shared rules read of a page: its ``runs`` and their ``steps`` (None: none); the oversubscription
    rule reads its ``intervals`` too (per run, the index of ``runs``)."""

    runs: pd.DataFrame
    steps: Summaries | None


def clean(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a change may be concluded from: none projected, oversubscribed or incomplete."""
    return runs[~run_labels.doubtful(runs).to_numpy(bool)] if len(runs) else runs


@dataclass
class Found:
    """What one rule found: candidate rows (:func:`row`) and, where it could not look, why."""

    rows: list[dict] = field(default_factory=list)
    lacking: str = ""


@dataclass(frozen=True)
class Rule:
    """A rule: ``what`` it looks at and ``find``, what it found on a page."""

    what: str
    find: Callable[[Any], Found]


def rule(what: str) -> Callable[[Callable[[Any], Found]], Rule]:
    """The decorated function (a page → what it found there) as a :class:`Rule` looking at ``what``."""
    return partial(Rule, what)


def row(change: str, evidence: str, gain: float, gain_of: str, applies_to: str, *,
        interval: tuple[float, float] | None = None, runs: int = 1, bound: bool = False,
        seconds: float = math.nan, per: str = "") -> dict:
    """One candidate change with the confidence of its gain (docs/reports.md, "What to change"): none where its 95 %
    ``interval`` (None: none) includes 0 (not supported); ``low`` where the gain is only an upper ``bound`` of
    unknown tightness; else ``high`` with an interval, ``medium`` where two or more ``runs`` show it (for a
    comparison, the fewer repeats of its two sides), ``low`` for one. ``listed`` where it is supported and ``gain``
    is at least :data:`MIN_EFFECT` (a gain that cannot be given, NaN, is listed on its confidence alone)."""
    supported = interval is None or interval[0] > 0 or interval[1] < 0
    level = ("" if not supported else "low" if bound else "high" if interval is not None
             else "medium" if runs > 1 else "low")
    if interval is not None:
        evidence += f" (95 % interval of the gain {fmt_pct(interval[0])} to {fmt_pct(interval[1])})"
    return {"change": change, "evidence": evidence, "expected_gain": gain, "gain_of": gain_of,
            "seconds_saved": seconds, "saved_per": per if pd.notna(seconds) else "", "confidence": level,
            "applies_to": applies_to, "listed": supported and not (pd.notna(gain) and gain < MIN_EFFECT)}


def _share_interval(rows: pd.DataFrame, share: pd.Series, column: str, frames: dict[str, pd.DataFrame]
                    ) -> tuple[float, float] | None:
    """The 95 % interval of the mean ``share`` of ``column`` in the step of a configuration's runs ``rows``: from
    their steps (block bootstrap), else from two or more repeats (Student t); None without either."""
    ids = rows["run_id"].astype(str).tolist()
    if ids and all(r in frames and column in frames[r] for r in ids):
        found = estimate_steps(Side("", rows, {r: frames[r] for r in ids}), None, [column, "mean_rank_step_s"])
        step = found.means["mean_rank_step_s"]
        centre, half = found.means[column] / step, t_quantile(found.dof) * found.errors[column] / step
        # around the share shown, of the measured window (which may hold more than the steps: an evaluation)
        scale = float(share.mean()) / centre if centre > 0 else 1.0
        return (centre - half) * scale, (centre + half) * scale
    if len(share) >= 2:
        half = t_quantile(len(share) - 1) * float(share.std(ddof=1)) / math.sqrt(len(share))
        return float(share.mean()) - half, float(share.mean()) + half
    return None


def _phase_rows(page: Measured, column: str, change: str, what: str, *, devices: int = 1) -> Found:
    """Per experiment, the configuration whose ``column`` (s) takes the largest share of a typical rank's window,
    on ``devices`` or more devices: a change worth that share of the step (for ``comm_s``, of its exposed part where
    recorded; else an upper bound: a change may hide only part of it)."""
    runs = clean(page.runs)
    have = runs[(runs["gpus"] >= devices).fillna(False).to_numpy(bool)] if len(runs) else runs
    frames, out = job_frames(page.steps), Found()
    for name, group in run_labels.by_experiment(have):
        exposed = column == "comm_s" and "comm_exposed_s" in group and group["comm_exposed_s"].notna().any()
        timed = "comm_exposed_s" if exposed else column
        if timed not in group or group[timed].isna().all():
            continue
        group = group[group[timed].notna().to_numpy(bool)]
        group = group.assign(_share=group[timed].astype(float) / typical_s(group), _key=configuration_keys(group))
        means = group.groupby("_key", sort=False)["_share"].mean()
        rows = group[group["_key"] == means.idxmax()]
        share, seconds = float(means.max()), float(rows[timed].mean())
        label = run_labels.labels(group)[list(group["_key"]).index(means.idxmax())]
        bound = column == "comm_s" and not exposed
        shown = "all its communication (the part computation did not hide is not recorded)" if bound else what
        out.rows.append(row(
            change, f"{shown}: {fmt_seconds(seconds)} of a {fmt_seconds(float(typical_s(rows).mean()))} "
                    f"measured window, {fmt_pct(share)} of a step"
                    + (f" (the mean of {len(rows)} runs)" if len(rows) > 1 else ""),
            share, "step time", f"{name}: {label}", interval=_share_interval(rows, rows["_share"], timed, frames),
            runs=len(rows), bound=bound, seconds=seconds, per="measured window"))
    if not out.rows:
        out.lacking = f"no run{' on two or more devices' if devices > 1 else ''} records {what}"
    return out


@rule("data loading")
def data_loading(page: Measured) -> Found:
    """Data loading (``data_s``) as a share of the step: load the next batch while the step computes."""
    return _phase_rows(page, "data_s", "Load the next batch while the step computes (more loader workers, "
                                       "prefetching, pinned memory)", "data loading")


@rule("exposed communication")
def exposed_communication(page: Measured) -> Found:
    """Communication computation does not hide, on two or more devices: hide more of it."""
    return _phase_rows(page, "comm_s", "Hide more of the communication behind the backward pass (overlap, "
                                       "gradient bucket size, fewer or larger all-reduces)",
                       "communication not hidden by computation", devices=2)


@rule("waits for another rank's work outside the steps")
def waits_for_outside_work(page: Measured) -> Found:
    """The other ranks' wait, in their next collective, for one rank's work outside the steps (``wait_outside_s``:
    an evaluation or a checkpoint on rank 0 alone): spread that work or run it less often."""
    found = _phase_rows(page, "wait_outside_s", "Spread the evaluation or checkpoint over every rank, run it "
                                                "less often, or run it off the training's critical path: the "
                                                "other ranks wait for it in their next all-reduce",
                        "waiting for another rank's work outside the steps", devices=2)
    runs = clean(page.runs)
    named = sorted(set(runs["wait_outside_for"].dropna())) if "wait_outside_for" in runs else []
    for found_row in found.rows if named else []:
        found_row["evidence"] = f"{and_list(named)}: {found_row['evidence']}"
    return found


@rule("more busy processes than cores")
def oversubscription(page: Measured) -> Found:
    """Runs with more busy processes than cores: the gain of running their study's fastest one that is not."""
    runs = page.runs
    if "oversubscribed" not in runs or not runs["oversubscribed"].eq(True).fillna(False).any():
        return Found(lacking="no run has more busy processes than cores")
    unit, out = run_labels.unit_of(runs), Found()
    for name, group in runs.groupby(run_labels.study_of(runs), sort=False):
        found = page.intervals.loc[group.index].reset_index(drop=True)
        group = group.reset_index(drop=True)
        config = found["configuration"]
        bad = group["oversubscribed"].eq(True).fillna(False).to_numpy(bool)
        good = ~run_labels.doubtful(group).to_numpy(bool) & config.notna().to_numpy(bool)
        if not bad.any() or not good.any():
            continue
        rates = group.groupby(config.to_numpy(), sort=False)[unit.rate].mean()
        best = rates[config[good].unique()].idxmax()
        for worst in config[bad].dropna().unique():
            verdict = distinguish(found, worst, best)
            a, b = group[config == worst].iloc[0], group[config == best].iloc[0]
            cores, load = a.get("extra_cpu_cores"), a.get("extra_load_average_1min")
            host = (f" on {fmt_int(cores)} cores" if pd.notna(cores) else "") + (
                f" (load average {fmt_num(load)} at start)" if pd.notna(load) else "")
            out.rows.append(row(
                f"Run {fmt_int(b['gpus'])} processes instead of {fmt_int(a['gpus'])}"
                + (f": no more busy processes than the {fmt_int(cores)} cores" if pd.notna(cores) else ""),
                f"{fmt_int(a['gpus'])} processes{host}: {fmt_int(rates[worst])} {unit.label}; "
                f"{fmt_int(b['gpus'])} processes: {fmt_int(rates[best])} {unit.label}",
                verdict.difference.estimate, unit.label,
                f"{name}: {count(a['gpus'], 'process')} against {fmt_int(b['gpus'])}",
                interval=(verdict.difference.low, verdict.difference.high) if verdict.tested else None,
                runs=int(min((config == worst).sum(), (config == best).sum()))))
    return out


@rule("the comparison's verdict")
def verdict(result: Comparison) -> Found:
    """A comparison's verdict: keep the candidate when it is faster, the baseline when it is slower (the gain
    of reverting: ``1 / (1 + d) − 1``), or the repeats a side that would tell when it is inconclusive."""
    d = result.difference
    interval = (d.low, d.high) if math.isfinite(d.low) else None
    sides = int(result.sides["runs"].min())
    named = " against ".join(", ".join(Path(p).name for p in label.split(", "))
                             for label in (result.baseline, result.candidate))
    figure = f"candidate {result.unit}/s {fmt_pct(d.estimate, signed=True)} against the baseline"
    if result.verdict == FASTER:
        return Found([row("Keep the candidate", figure, d.estimate, f"{result.unit}/s", named,
                          interval=interval, runs=sides)])
    if result.verdict == SLOWER:
        back = (1 / (1 + d.high) - 1, 1 / (1 + d.low) - 1) if interval else None
        return Found([row("Keep the baseline: the candidate is slower", figure, 1 / (1 + d.estimate) - 1,
                          f"{result.unit}/s", named, interval=back, runs=sides)])
    if result.verdict == INCONCLUSIVE:
        need = (f"about {result.repeats_needed:,} runs a side would detect {fmt_pct(result.min_effect, 0)}"
                if result.repeats_needed else "record repeats to measure the noise")
        evidence = figure + (f" (95 % interval {fmt_pct(d.low, signed=True)} to {fmt_pct(d.high, signed=True)})"
                             if interval else " (no interval)")
        return Found([{**row(f"Measure more before deciding: {need}", evidence, math.nan, f"{result.unit}/s",
                             named, runs=1), "listed": True}])
    return Found(lacking=f"the two sides differ by less than the minimum effect of "
                         f"{fmt_pct(result.min_effect, 0)} ({figure}): neither is worth changing to for speed")


COMPARISON_RULES = (verdict,)
"""The compare page's rules (each reads its :class:`trainperf.compare.Comparison`)."""


def candidates(rules: Iterable[Rule], page: Measured) -> tuple[pd.DataFrame, list[str]]:
    """Every candidate change the ``rules`` found on ``page`` (:data:`COLUMNS` and ``listed``), by expected gain;
    a sentence per rule that could not look, then one naming the runs no rule concludes from (:func:`clean`)."""
    rows, lacking = [], []
    for each in rules:
        found = each.find(page)
        rows += found.rows
        if found.lacking and not found.rows:
            lacking.append(f"{each.what}: {found.lacking}")
    runs = getattr(page, "runs", None)  # the compare page's rules read a comparison
    doubtful = run_labels.doubtful(runs) if isinstance(runs, pd.DataFrame) and len(runs) else pd.Series(False)
    if lacking and doubtful.any():
        ids = first_of(runs.loc[doubtful.to_numpy(bool), "run_id"].astype(str).tolist(), 4)
        lacking = ([f"every run shown is projected, oversubscribed or incomplete ({ids}), and no change is "
                    "concluded from such runs"] if doubtful.all() else
                   [*lacking, f"none of these looks at {ids}, projected, oversubscribed or incomplete runs, "
                               "from which no change is concluded"])
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "listed"])
    frame = frame.astype({"expected_gain": float, "seconds_saved": float, "listed": bool})
    return frame.sort_values("expected_gain", ascending=False, kind="stable", na_position="last"
                             ).reset_index(drop=True), lacking


def listed(found: pd.DataFrame) -> pd.DataFrame:
    """The changes of :func:`candidates` ``found`` a page lists: at most :data:`MOST`."""
    return found[found["listed"]][COLUMNS].head(MOST).reset_index(drop=True)


def short(change: str) -> str:
    """A change in a few words, for a sentence: its text before a colon or bracket, lower case first."""
    text = change.split(":")[0].split(" (")[0]
    return text[0].lower() + text[1:]


def section(found: pd.DataFrame, lacking: list[str]) -> Html:
    """The "What to change" section of what a page's rules found: a sentence, the table, the candidates left out."""
    shown, more = listed(found), int(found["listed"].sum()) - MOST
    left = found[~found["listed"]]
    notes = []
    if len(left):
        notes.append("Left out, within the noise or below " + fmt_pct(MIN_EFFECT, 0) + ": " + and_list(
            [f"{short(change)} ({count(len(rows), 'candidate')}, {fmt_pct(rows['expected_gain'].max())} at most)"
             for change, rows in left.groupby(left["change"].map(short), sort=False)]) + ".")
    if more > 0:
        notes.append(f"{count(more, 'more change')} with smaller gains not shown.")
    if shown.empty:
        why = [*lacking, *(["every candidate is within the noise or below " + fmt_pct(MIN_EFFECT, 0)]
                            if len(left) else [])]
        summary, html, text = "The data supports no change" + (": " + "; ".join(why) if why else "") + ".", "", []
    else:
        top = shown.iloc[0]
        gain = (f"{fmt_pct(top['expected_gain'])} of its {top['gain_of']}" if pd.notna(top["expected_gain"])
                else "no gain that can be given")
        summary = (f"{count(len(shown), 'change')} the data supports, by expected gain; the largest: "
                   f"{short(top['change'])} ({gain}, {top['confidence']} confidence).")
        timed = shown["seconds_saved"].notna().any()  # no change saves a time that can be given: no columns
        table = styled(shown[[c for c in COLUMNS if timed or c not in ("seconds_saved", "saved_per")]].rename(
            columns={"change": "what_to_change", "evidence": "based_on"}))  # "change", "evidence": other tables' formats
        html, text = table.to_html(), [table.data.to_string(index=False)]
    return Html(f"<p>{esc(summary)}</p>{html}" + "".join(f"<p>{esc(n)}</p>" for n in notes),
                "\n".join([summary, *text, *notes]))


def section_of(rules: Iterable[Rule], page: Measured) -> Html:
    """The "What to change" section of what ``rules`` found on ``page`` (each page binds its ``RULES``)."""
    return section(*candidates(rules, page))


comparison = partial(section_of, COMPARISON_RULES)
"""The compare page's "What to change" section: what the :data:`COMPARISON_RULES` found of a comparison."""
