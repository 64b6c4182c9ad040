"""What to change on the throughput, batch-size, platforms and compare pages: their rules (:data:`RULES`),
and the section that ends each (:func:`section`); the machinery, the confidence of a gain and the rules
several pages share are in :mod:`trainperf.report.what_to_change`, the scaling page's rules in
:mod:`trainperf.report.scaling.analysis`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from trainperf.aggregate import Summaries
from trainperf.compare import Comparison
from trainperf.goodput import PARTS as GOODPUT_PARTS
from trainperf.report import batch_size, configs, platforms, throughput
from trainperf.report.html import Html, count, fmt_int, fmt_pct, fmt_seconds
from trainperf.report.noise import call
from trainperf.report.scaling.analysis import outside_steps
from trainperf.report.time_to_train import LOOP, VALIDATION, total_parts, total_s
from trainperf.report.what_to_change import (Found, Rule, candidates as found_by, clean, data_loading,
                                             exposed_communication, listed, oversubscription, row, section as shown,
                                             waits_for_outside_work)
from trainperf.schema import OUTSIDE_PREFIX
from trainperf.stats import FASTER, INCONCLUSIVE, SLOWER

PAGES = ("throughput", "scaling", "batch_size", "platforms", "compare")
"""The pages; each ends with "What to change" (the scaling page's:
:func:`trainperf.report.scaling.analysis.what_to_change`)."""


@dataclass
class Page:
    """What one page shows: its ``kind`` (one of :data:`PAGES` but scaling), its runs and per-rank ``steps``, and
    the parameters some rules read (a batch-size sweep's ``min_gain`` and ``train_tokens``, the platforms'
    precision ``policy``, the compare page's ``comparison``)."""

    kind: str
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: Summaries | None = None
    comparison: Comparison | None = None
    min_gain: float = 0.10
    train_tokens: float | None = None
    policy: str = "same"


def node_boundary(page: Page) -> Found:
    """The first step of a study across a node boundary (:func:`trainperf.report.throughput.node_boundaries`)
    where efficiency drops: what recovering it would give per device, ``efficiency before / after − 1``."""
    if "nodes" not in page.runs or page.runs["nodes"].isna().all():
        return Found(lacking="no run records its nodes")
    frame = throughput.table(page.runs, page.steps)
    found = throughput.node_boundaries(frame)
    if found.empty:
        return Found(lacking="no study runs on several device counts with their nodes known and crosses a node")
    out = Found()
    for b in found[found["drop"] > 0].itertuples():
        study = configs.study_of(frame)
        sides = frame[(study.astype(str) == b.study).to_numpy(bool) & frame["gpus"].isin([b.from_gpus, b.to_gpus])]
        out.rows.append(row(
            "Look at communication between nodes first: per-device throughput drops most where the job "
            "leaves one node" if b.most else "Look at communication between nodes: per-device throughput drops "
                                             "where the job leaves one node",
            f"{fmt_int(b.from_gpus)} devices on {count(b.from_nodes, 'node')} → {fmt_int(b.to_gpus)} on "
            f"{count(b.to_nodes, 'node')}: scaling efficiency {fmt_pct(b.efficiency_before)} → "
            f"{fmt_pct(b.efficiency_after)}: per-device throughput drops {fmt_pct(b.drop / b.efficiency_before)}",
            b.efficiency_before / b.efficiency_after - 1, "throughput per device", f"{b.study}: "
            f"{fmt_int(b.to_gpus)} devices and more", runs=int(sides.groupby("gpus")["runs"].sum().min())))
    return out


def small_micro_batches(page: Page) -> Found:
    """Per batch-size sweep, the micro-batches below the smallest at its top (the fastest configuration and
    those indistinguishable from it, :func:`trainperf.report.batch_size.table`): what the best of them
    loses against the fastest, ``fastest / best below − 1`` of tokens/s, and the training loop's time on the
    same work."""
    unit = configs.unit_of(page.runs)
    frame, out = batch_size.table(page.runs, page.train_tokens, page.min_gain, page.steps), Found()
    for name, rows in frame.groupby("experiment", sort=False):
        rows = rows.reset_index(drop=True)
        smallest = rows.loc[rows["at_top"], "micro_batch_size"].min()
        below = rows[rows["micro_batch_size"] < smallest]
        if below.empty:
            continue
        group, found = batch_size.sweep(page.runs, name, page.steps)
        fast, slow = int(rows[unit.rate].idxmax()), int(below[unit.rate].idxmax())
        gain = call(found, found.loc[slow, "configuration"], found.loc[fast, "configuration"])
        evidence = (f"micro-batch × accumulation {rows.loc[slow, 'configuration']}: "
                    f"{fmt_int(rows.loc[slow, unit.rate])} {unit.label}, {rows.loc[fast, 'configuration']}: "
                    f"{fmt_int(rows.loc[fast, unit.rate])} {unit.label}; every micro-batch below "
                    f"{fmt_int(smallest)} is slower ({', '.join(below['configuration'])})")
        if rows.loc[fast, "total_time_s"] > rows.loc[slow, "total_time_s"]:
            evidence += (f"; in all, start-up included, {rows.loc[slow, 'configuration']} finished first "
                         f"({fmt_seconds(rows.loc[slow, 'total_time_s'])} against "
                         f"{fmt_seconds(rows.loc[fast, 'total_time_s'])}): its time outside the loop was shorter")
        out.rows.append(row(
            f"Use micro-batches of {fmt_int(smallest)} or more ({rows.loc[fast, 'configuration']} is the fastest)",
            evidence, gain.estimate, f"{unit.label} of the training loop",
            f"{name}: micro-batches below {fmt_int(smallest)}",
            interval=(gain.low, gain.high) if gain.tested else None,
            runs=int(min(group.loc[slow, "runs"], group.loc[fast, "runs"])),
            seconds=rows.loc[slow, "time_to_train_s"] - rows.loc[fast, "time_to_train_s"],
            per="training loop on the same work"))
    if not out.rows:
        out.lacking = "every micro-batch of each sweep is at its top or indistinguishable from it"
    return out


PART_CHANGES = {"startup_s": "Shorten start-up (before the first step)",
                "warmup_excess_s": "Shorten the warm-up (compilation, the first slow steps)",
                "unaccounted_s": "Find the steps whose code raised (time in no step)",
                "after_steps_s": "Shorten what runs after the last step",
                VALIDATION: "Evaluate less often, or on fewer batches"}
"""How each part of a run's total time outside its training steps is changed (default: shorten it)."""


def _wall_clock_parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run that recorded its total time: the parts of it outside the training loop, long form (``run_id``,
    ``experiment``, ``part``: its column or name, ``label``, ``seconds``, ``total_s``): the goodput parts
    (:mod:`trainperf.goodput`, of the profiler's wall clock) where it has them, else the parts of a script's
    total (:func:`trainperf.report.time_to_train.total_parts`) but the loop."""
    profiled = runs["wall_s"].notna() if "wall_s" in runs else pd.Series(False, index=runs.index)
    parts = []
    wall = runs[profiled.to_numpy(bool)]
    if len(wall):
        names = [c for c in (*GOODPUT_PARTS[1:], *(c for c in wall if c.startswith(OUTSIDE_PREFIX))) if c in wall]
        labels = {**throughput.PART_LABELS, **{c: c[len(OUTSIDE_PREFIX):-2] for c in names if c.startswith(OUTSIDE_PREFIX)}}
        long = wall.melt(id_vars=["run_id", "experiment", "wall_s"], value_vars=names, var_name="part",
                         value_name="seconds")
        parts.append(long.assign(label=long["part"].map(labels), total_s=long["wall_s"]).drop(columns="wall_s"))
    rest = runs[~profiled.to_numpy(bool)]
    timed = total_parts(rest).drop(columns=LOOP) if len(rest) else pd.DataFrame(index=rest.index)
    if len(timed.columns):
        long = pd.concat([rest[["run_id", "experiment"]], timed, total_s(rest).rename("total_s")], axis=1).melt(
            id_vars=["run_id", "experiment", "total_s"], var_name="part", value_name="seconds")
        parts.append(long.assign(label=long["part"]))
    columns = ["run_id", "experiment", "part", "label", "seconds", "total_s"]
    return pd.concat(parts, ignore_index=True)[columns].dropna(subset=["seconds"]) if parts else pd.DataFrame(
        columns=columns)


def outside_loop(page: Page) -> Found:
    """Per experiment and part of a run's total time outside its training loop (start-up, checkpoints and
    the other phases outside the steps, validation, warm-up beyond steady steps; :func:`_wall_clock_parts`):
    its mean seconds over the runs that have it, as a share of their mean total — the goodput it costs."""
    parts = _wall_clock_parts(clean(page.runs))
    if parts.empty:
        return Found(lacking="no run records its total time with start-up (the profiler's wall clock, or a "
                             "script's total), so no goodput can be told")
    out = Found()
    for (name, part), rows in parts.groupby(["experiment", "part"], sort=False):
        seconds, total = float(rows["seconds"].mean()), float(rows["total_s"].mean())
        label = rows["label"].iloc[0]
        change = PART_CHANGES.get(part) or (f"Do less {label} outside the steps, or do it asynchronously"
                                            if str(part).startswith(OUTSIDE_PREFIX) else f"Shorten the {label}")
        out.rows.append(row(change, f"{label}: {fmt_seconds(seconds)} of {fmt_seconds(total)} in all"
                                    + (f" (the mean of {len(rows)} runs)" if len(rows) > 1 else ""),
                            seconds / total, "wall clock (goodput)", f"{name}: {count(len(rows), 'run')}",
                            runs=len(rows), seconds=seconds, per="run"))
    return out


def platform_settings(page: Page) -> Found:
    """Per model whose faster platform wins (:func:`trainperf.report.platforms.winners`) with a best
    configuration that also differs in settings from the runner-up's: try those settings on the runner-up.
    No gain can be given: the margin is the hardware's too."""
    found = platforms.winners(page.runs, policy=page.policy)
    if found.empty:
        return Found(lacking="no model was measured on two or more platforms")
    out = Found()
    for w in found[(found["verdict"] == platforms.WINNER) & (found["also"] != platforms.SAME_SETTINGS)].itertuples():
        out.rows.append(row(
            f"Try on {w.runner_up} the settings {w.fastest}'s best configuration used: "
            + "; ".join(entry.split(" vs ")[0] for entry in w.also.split("; ")),
            f"{w.fastest} is {fmt_pct(w.margin)} faster per device ({fmt_int(w.fastest_rate)} against "
            f"{fmt_int(w.runner_up_rate)} tokens/s per device; {w.evidence}); their best configurations also "
            f"differ in {w.also}", math.nan, "tokens/s per device", f"{w.model} on {w.runner_up}", bound=True))
    if not out.rows:
        out.lacking = "every winner's best configuration has the runner-up's recorded settings"
    return out


def verdict(page: Page) -> Found:
    """A comparison's verdict (:class:`trainperf.compare.Comparison`): keep the candidate when it is faster,
    the baseline when it is slower (the gain of reverting: ``1 / (1 + d) − 1``), or the repeats a side
    that would tell when it is inconclusive; no row for no detectable difference."""
    result = page.comparison
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


RULES: tuple[tuple[str, Rule, tuple[str, ...]], ...] = (
    ("a rank's work outside the synchronised steps", outside_steps, ("throughput",)),
    ("more busy processes than cores", oversubscription, ("throughput",)),
    ("the first step across a node boundary", node_boundary, ("throughput",)),
    ("waits for another rank's work outside the steps", waits_for_outside_work, ("throughput",)),
    ("exposed communication", exposed_communication, ("throughput", "batch_size")),
    ("data loading", data_loading, ("throughput", "batch_size")),
    ("time outside the training loop (goodput)", outside_loop, ("throughput", "batch_size")),
    ("micro-batches below the top of a sweep", small_micro_batches, ("batch_size",)),
    ("the settings of a faster platform", platform_settings, ("platforms",)),
    ("the comparison's verdict", verdict, ("compare",)),
)
"""Every rule: what it looks at, its function and the pages it runs on."""


def candidates(page: Page) -> tuple[pd.DataFrame, list[str]]:
    """Every candidate change the :data:`RULES` of ``page.kind`` found
    (:func:`trainperf.report.what_to_change.candidates`)."""
    kinds = dict.fromkeys(kind for *_, kinds in RULES for kind in kinds)
    if page.kind not in kinds:
        raise ValueError(f"no page {page.kind!r} here: one of {', '.join(kinds)} (the scaling page's rules are "
                         "trainperf.report.scaling.analysis)")
    return found_by([(what, rule) for what, rule, kinds in RULES if page.kind in kinds], page)


def changes(kind: str, runs: pd.DataFrame | None = None, steps: Summaries | None = None, *,
            comparison: Comparison | None = None, min_gain: float = 0.10, train_tokens: float | None = None,
            policy: str = "same") -> pd.DataFrame:
    """The changes a page's data supports (:func:`trainperf.report.what_to_change.listed`). ``kind``: the page
    (:data:`PAGES` but scaling); ``runs`` and ``steps`` what it shows, ``comparison`` the compare page's result;
    ``min_gain``, ``train_tokens`` and ``policy`` as the page's parameters."""
    return listed(candidates(Page(kind, pd.DataFrame() if runs is None else runs, steps, comparison, min_gain,
                                  train_tokens, policy))[0])


def section(kind: str, runs: pd.DataFrame | None = None, steps: Summaries | None = None, *,
            comparison: Comparison | None = None, min_gain: float = 0.10, train_tokens: float | None = None,
            policy: str = "same") -> Html:
    """The "What to change" section of a page (arguments as :func:`changes`;
    :func:`trainperf.report.what_to_change.section`)."""
    return shown(*candidates(Page(kind, pd.DataFrame() if runs is None else runs, steps, comparison, min_gain,
                                  train_tokens, policy)))
