"""The batch-size report: a micro-batch × gradient-accumulation sweep — where the time goes, throughput, time to
train, where larger batches stop paying and the memory each configuration needs (docs/reports.md)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd

from trainperf.aggregate import MEMORY, Summaries
from trainperf.estimates import (Resolution, distinguish, has_interval, job_frames, resolution, run_intervals,
                                 ties_with_fastest)
from trainperf.report.html import Html, and_list, around, count, fmt_int, fmt_pct, fmt_seconds, headline as banner
from trainperf.report.page import InputError, keep_experiments, require
from trainperf.report.phases import overlap_notes, per_experiment, without_phases
from trainperf.report.run_labels import (Unit, batch, by_experiment, configuration_doubts, configuration_means,
                                         evaluation_notes, evaluation_rates, unit_of)
from trainperf.report.throughput import outside_loop
from trainperf.report.time_to_train import LOOP, PARTS, TIMES, run_times, to_train, total_parts
from trainperf.report.what_to_change import (Found, Measured, data_loading, exposed_communication, row, rule,
                                             section_of)
from trainperf.stats import MIN_EFFECT, POWER, RUN_CV, TIED, Verdict

Sweeps = dict[str, tuple[pd.DataFrame, pd.DataFrame]]
"""Per sweep (experiment) name, its :func:`sweep`: its configurations and their intervals."""


def sweeps(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of micro-batch sweeps (two or more micro-batch sizes on one device count, one sweep per count:
    ``my-sweep (2 devices)``); others in ``attrs['skipped']``, those out of memory in ``attrs['did_not_fit']``."""
    unit = unit_of(runs)
    too_big = runs["fits"].eq(False).fillna(False).to_numpy(bool) if "fits" in runs else np.zeros(len(runs), bool)
    have = require(require(runs[~too_big], "micro_batch_size", "a micro-batch size",
                           "give the column, or record it with StepProfiler (samples per micro-step)"),
                   unit.rate, f"a throughput ({unit.label})", "give tokens or samples and elapsed_s, or a rate")
    experiment = have["experiment"].astype(str)
    several = set(experiment[have.groupby(experiment)["gpus"].transform("nunique") > 1])
    have = _by_device_count(have, several)
    batches = have.groupby("experiment")["micro_batch_size"].nunique()
    out = keep_experiments(have, batches >= 2, ["micro_batch_size", "grad_accum_steps"],
                           "not a micro-batch sweep (one micro-batch size on each device count)",
                           "no experiment is a micro-batch sweep (two or more micro_batch_size values on one "
                           f"device count): {', '.join(map(str, batches.index))}")
    did_not_fit = _by_device_count(runs[too_big], several)
    out.attrs["did_not_fit"] = did_not_fit[did_not_fit["experiment"].isin(out["experiment"])].to_dict("records")
    return out


def _by_device_count(runs: pd.DataFrame, several: set[str]) -> pd.DataFrame:
    """``runs`` with each experiment of ``several`` named after the run's device count."""
    experiment = runs["experiment"].astype(str)
    on = pd.Series([f" ({count(g, 'device')})" if pd.notna(g) else " (device count unknown)" for g in runs["gpus"]],
                   index=runs.index, dtype=object)
    return runs.assign(experiment=experiment.where(~experiment.isin(several), experiment + on))


def fmt_change(found: Verdict) -> str:
    """A verdict's difference: ``+3.1 % (95 % interval +1.0 % to +5.2 %)``, or the point figure marked untested."""
    d = found.difference
    return fmt_pct(d.estimate, signed=True) + (f" (95 % interval {fmt_pct(d.low, signed=True)} to "
                                               f"{fmt_pct(d.high, signed=True)})" if found.tested
                                               else " (no interval: the noise is not tested)")


def resolution_text(found: list[Resolution]) -> str:
    """A clause for configurations called indistinguishable: the smallest difference their data could detect
    (a range over several pairs) and the runs of each that would detect the effect."""
    effect = fmt_pct(found[0].effect, 0)
    repeats = max((r.repeats for r in found if r.repeats is not None), default=None)
    tested = [r.detectable for r in found if not r.assumed]
    if not tested:
        return ("without an interval (a configuration has one run without steps) these data detect no difference; at the "
                f"assumed run-to-run variation of {fmt_pct(RUN_CV, 0)}, {repeats} runs of each would detect {effect}")
    low, high = min(tested), max(tested)
    smallest = fmt_pct(low) if fmt_pct(low) == fmt_pct(high) else f"{fmt_pct(low)} to {fmt_pct(high)}"
    text = (f"the smallest difference these data could detect is {smallest} (with {fmt_pct(POWER, 0)} power at "
            "95 % confidence)")
    if len(tested) < len(found):
        text += ", and none where a configuration has no interval"
    return text + (f"; {repeats} runs of each would detect {effect}" if repeats is not None else "")


class Plateau(NamedTuple):
    """``index``: the configuration after which no step gains ``min_gain`` (None: still improving at the end);
    ``gains``: each configuration's gain over the previous one (NaN for the first)."""

    index: int | None
    gains: np.ndarray


def plateau(rates: np.ndarray, min_gain: float) -> Plateau:
    """The :class:`Plateau` of a sweep's throughput ``rates``; ``InputError`` unless ``min_gain`` is above 0."""
    if not min_gain > 0:
        raise InputError(f"min_gain must be a fraction above 0 (0.10: a step must gain 10 %), not {min_gain!r}")
    rates = np.asarray(rates, dtype=float)
    gains = np.r_[np.nan, rates[1:] / rates[:-1] - 1]
    paying = np.flatnonzero(~(gains[1:] < min_gain))  # steps that gain min_gain or more (or cannot tell)
    at = int(paying[-1]) + 1 if len(paying) else 0
    return Plateau(at if at < len(rates) - 1 else None, gains)


def sweep(group: pd.DataFrame, unit: Unit, frames: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The configurations of one sweep's runs ``group``, one row each from 0: rates, MFU, run times and the
    parts of the total as the mean over its repeats (``runs``), and ``doubt``; and their run intervals around
    the rates shown, with ``label`` and ``runs``."""
    group = group.reset_index(drop=True)
    parts = total_parts(group)
    group = pd.concat([group, run_times(group, unit), parts], axis=1)
    found = run_intervals(group, frames=frames).assign(label=[batch(r) for r in group.to_dict("records")])
    doubt = configuration_doubts(group, found)
    group, found = configuration_means(group, found, (unit.rate, unit.per_device, "elapsed_s", "tokens_per_s", "mfu",
                                                      *TIMES, *parts))
    low, high, _ = around(found, group[unit.rate])
    return group.assign(doubt=doubt), found.assign(throughput=group[unit.rate], low=low, high=high, runs=group["runs"])


def table(found_sweeps: Sweeps, unit: Unit, train_tokens: float | None = None, min_gain: float = 0.10
          ) -> pd.DataFrame:
    """One row per configuration of each sweep (repeats: their mean): experiment, configuration, micro-batch,
    accumulation, ``per_device_batch`` (samples per device per step), ``global_batch_size``, gpus, the rate (95 %
    interval ``<rate>_low``–``_high``; ``interval`` as text) and per device, ``mfu`` (fraction), ``gain`` over the
    previous configuration and its verdict ``vs_previous``, the time to train the same work (s) over the loop
    (``time_to_train_s``) and in all (``total_time_s``, NaN without a total), and ``at_top``."""
    if train_tokens is not None and unit.name != "tokens":
        raise InputError("train_tokens needs token rates; these runs report samples only")
    parts = []
    for group, found in found_sweeps.values():
        rate = group[unit.rate].to_numpy(float)
        low, high, text = around(found, rate)
        calls = [distinguish(found, a, b) for a, b in zip(found["configuration"], found["configuration"].iloc[1:])]
        previous = [""] + [c.verdict + ("" if c.tested else " (no interval)") for c in calls]
        loop, total, _ = to_train(group, train_tokens, unit)
        parts.append(group.assign(
            configuration=configurations(group),
            per_device_batch=group["micro_batch_size"] * group["grad_accum_steps"],
            **{f"{unit.rate}_low": low, f"{unit.rate}_high": high},
            interval=[basis if t is None else f"{t} ({basis})" for t, basis in zip(text, found["basis"])],
            gain=plateau(rate, min_gain).gains, vs_previous=previous, time_to_train_s=loop,
            total_time_s=total, at_top=at_top(group, found)))
    return pd.concat(parts)[["experiment", "configuration", "micro_batch_size", "grad_accum_steps",
                             "per_device_batch", "global_batch_size", "gpus", unit.rate, f"{unit.rate}_low",
                             f"{unit.rate}_high", "interval", unit.per_device, "mfu", "gain", "vs_previous",
                             "time_to_train_s", "total_time_s", "at_top"]].reset_index(drop=True)


def configurations(rows: pd.DataFrame) -> list[str]:
    """Each row's configuration, its micro-batch × accumulation (``16 × 64``)."""
    return [batch(r, compact=True) for r in rows.to_dict("records")]


def caption(rows: pd.DataFrame) -> str:
    """The caption of one sweep's rows of :func:`table`: its name and devices (where known)."""
    devices = rows["gpus"].iloc[0]
    on = f", {count(devices, 'device')}" if pd.notna(devices) else ""
    return f"{rows['experiment'].iloc[0]} (micro-batch × accumulation{on})"


def gain_labels(rows: pd.DataFrame) -> list[str]:
    """Bar labels for one sweep's rows of :func:`table`: each gain (``+16 %``), ``≈`` within the noise."""
    return ["" if pd.isna(g) else "≈" if v == TIED else f"{g:+.0%}" for g, v in zip(rows["gain"], rows["vs_previous"])]


def at_top(group: pd.DataFrame, found: pd.DataFrame) -> np.ndarray:
    """Per configuration of a :func:`sweep`: whether it is the fastest without a doubt or indistinguishable."""
    clean = (group["doubt"] == "").to_numpy(bool)
    out = np.zeros(len(group), dtype=bool)
    out[clean] = ties_with_fastest(found[clean].reset_index(drop=True)) if clean.any() else []
    return out


def top(name: str, group: pd.DataFrame, found: pd.DataFrame, unit: Unit) -> tuple[str, list[tuple[str, str]]]:
    """The fastest configuration without a doubt of the :func:`sweep` ``name`` and those indistinguishable from
    it, or its margin over the next: a sentence, and the figures a headline shows of it."""
    clean = (group["doubt"] == "").to_numpy(bool)
    if not clean.any():
        best = int(np.argmax(group[unit.rate].to_numpy(float)))
        figure, doubt = fmt_int(group.loc[best, unit.rate]), group.loc[best, "doubt"]
        return (f"{name}: no configuration measures throughput without doubt (every run is projected, "
                f"oversubscribed or incomplete); the highest figure, {figure} {unit.label} with "
                f"{found.loc[best, 'label']} ({doubt}), is not a measurement of the hardware",
                [(figure, f"{unit.label}, the highest figure of {name}, not headlined ({doubt})")])
    left_out = int((~clean).sum())
    group, found = group[clean].reset_index(drop=True), found[clean].reset_index(drop=True)
    tied = ties_with_fastest(found)
    order = np.argsort(-group[unit.rate].to_numpy(float), kind="stable")
    best = order[0]
    figure = fmt_int(group.loc[best, unit.rate])
    rate, figures = f"{figure} {unit.label}", [(figure, f"{unit.label} at the fastest configuration of {name}")]
    if tied.sum() > 1:
        names = [batch(group.iloc[i], compact=True) for i in order if tied[i]]
        pairs = [resolution(found.iloc[best], found.iloc[i]) for i in order[1:] if tied[i]]
        figures.append((fmt_int(tied.sum()), "configurations indistinguishable at the top"))
        text = (f"{name}: micro-batch × accumulation {and_list(names)} are indistinguishable at the top ({rate} "
                f"at the fastest figure; their differences are within the noise or below {fmt_pct(MIN_EFFECT, 0)}: "
                f"{resolution_text(pairs)})")
    else:
        text = f"{name}: fastest {found.loc[best, 'label']} at {rate}"
    if tied.sum() <= 1 and len(order) > 1:
        second = order[1]
        margin = distinguish(found, found.loc[second, "configuration"], found.loc[best, "configuration"])
        d = margin.difference
        text += (f", {fmt_pct(d.estimate)} ahead of {found.loc[second, 'label']} "
                 + (f"(95 % interval {fmt_pct(d.low)} to {fmt_pct(d.high)})" if margin.tested
                    else "(no interval: one run without steps, so the noise is not tested)"))
        figures.append((fmt_pct(d.estimate),
                        "margin over the runner-up" + ("" if has_interval(found.loc[best]) else " (no interval)")))
    if left_out:
        text += f"; not counted: {count(left_out, 'configuration')} projected, oversubscribed or incomplete"
    return text, figures


def headline(found_sweeps: Sweeps, unit: Unit, min_gain: float = 0.10, train_tokens: float | None = None) -> Html:
    """The :func:`top` of the first sweep, where it plateaus, and what finishes the same work first in all."""
    name, (group, found) = next(iter(found_sweeps.items()))
    text, figures = top(name, group, found, unit)
    if (at := plateau(group[unit.rate].to_numpy(), min_gain).index) is not None:
        text += f"; beyond {batch(group.iloc[at])}, each step adds less than {fmt_pct(min_gain, 0)}"
        figures.append((batch(group.iloc[at], compact=True),
                        f"after it, no step of the sweep gains {fmt_pct(min_gain, 0)} or more"))
    loop, total, _ = to_train(group, train_tokens, unit)
    if total.notna().any() and (first := int(total.idxmin())) != int(loop.idxmin()):
        text += (f". In all, start-up included, {batch(group.iloc[first])} finishes the same work first "
                 f"({fmt_seconds(total[first])} against {fmt_seconds(total[loop.idxmin()])}): its time outside "
                 "the training loop is shorter")
        figures.append((batch(group.iloc[first], compact=True), "first to finish in all, start-up included"))
    if len(found_sweeps) > 1:
        text += f" ({count(len(found_sweeps) - 1, 'more sweep')} below)"
    return banner(text + ".", figures)


def plateau_notes(found_sweeps: Sweeps, unit: Unit, min_gain: float = 0.10) -> list[str]:
    """Per sweep: where no step gains ``min_gain`` any longer, which later gains are within the noise, and
    whether it still gets faster in all — or that it is still improving at the end."""
    out = []
    for name, (group, found) in found_sweeps.items():
        configs = found["configuration"]
        rates = group[unit.rate].to_numpy(float)
        plateau_at = plateau(rates, min_gain)
        steps_ = [distinguish(found, configs[i - 1], configs[i]) for i in range(1, len(group))]
        if plateau_at.index is None:
            last = steps_[-1]
            out.append(f"{name}: throughput is still improving at the end of the sweep: the last step adds "
                       f"{fmt_pct(plateau_at.gains[-1])}" + (
                           ". Larger micro-batches may pay further." if last.verdict != TIED else
                           f", but within the noise ({fmt_change(last)}; "
                           f"{resolution_text([resolution(found.iloc[-2], found.iloc[-1])])}): more repeats would "
                           "tell whether larger micro-batches pay further."))
            continue
        first = plateau_at.index
        gains = ", ".join(fmt_pct(g) + (" (within the noise)" if c.verdict == TIED and c.tested else "")
                          for g, c in zip(plateau_at.gains[first + 1:], steps_[first:]))
        later = first + int(rates[first:].argmax())
        if later == first:
            beyond = "none of the later configurations is faster."
        elif (gain := distinguish(found, configs[first], configs[later])).verdict == TIED:
            beyond = (f"the fastest later configuration, {found.loc[later, 'label']}, is indistinguishable from "
                      f"it ({fmt_change(gain)}; {resolution_text([resolution(found.iloc[first], found.iloc[later])])}).")
        else:
            beyond = (f"the fastest later configuration, {found.loc[later, 'label']}, is "
                      f"{fmt_pct(rates[later] / rates[first] - 1)} faster in all"
                      + ("." if gain.tested else " (no interval: the noise is not tested)."))
        out.append(f"{name}: after {batch(group.iloc[first])} no step of the sweep adds "
                   f"{fmt_pct(min_gain, 0)} or more (gains: {gains}); {beyond}")
    return out


def work_notes(runs: pd.DataFrame) -> list[str]:
    """Per sweep: whether its configurations take the same samples per optimizer step (``global_batch_size``)."""
    out = []
    for name, group in by_experiment(runs):
        sizes = group["global_batch_size"] if "global_batch_size" in group else pd.Series(np.nan, index=group.index)
        if sizes.isna().any():
            out.append(f"{name}: the samples per optimizer step are not known for every configuration (give "
                       "global_batch_size, or micro_batch_size, grad_accum_steps and gpus): whether they take the "
                       "same data per optimizer step cannot be told.")
        elif sizes.nunique() == 1:
            out.append(f"{name}: every configuration takes the same {fmt_int(sizes.iloc[0])} samples per optimizer "
                       "step, split differently into micro-batches and accumulation steps: the same data per "
                       "optimizer step, so the sweep changes how fast a step runs, not what it computes.")
        else:
            out.append(f"{name}: the configurations take different numbers of samples per optimizer step "
                       f"({fmt_int(sizes.min())} to {fmt_int(sizes.max())}): a larger step is a different training "
                       "(fewer optimizer steps for the same data; its learning rate may need to change), not only "
                       "a faster one. The times to train below compare the same work, not the same steps.")
    return out


def total_time(found_sweeps: Sweeps) -> pd.DataFrame:
    """One row per configuration whose runs recorded their total time with start-up (repeats: their mean):
    experiment, configuration, the seconds of each part of the total (named after the parts) and ``total_s``."""
    rows = []
    for group, _ in found_sweeps.values():
        have = group[group["total_s"].notna()]
        rows.append(have.assign(configuration=configurations(have))[
            ["experiment", "configuration", *(c for c in PARTS if c in have), "total_s"]])
    out = pd.concat(rows, ignore_index=True)
    return out[[c for c in out if c in ("experiment", "configuration", "total_s") or out[c].notna().any()]]


def time_notes(found_sweeps: Sweeps, unit: Unit, train_tokens: float | None = None) -> list[str]:
    """Per sweep: the configuration that trains the same work fastest over the training loop and the one that
    does in all; where they differ, the time outside the loop and the part of it that differs most."""
    out = []
    for name, (group, _) in found_sweeps.items():
        loop, total, how = to_train(group, train_tokens, unit)
        fast = int(loop.idxmin())
        text = (f"{name}: to train {how}, the training loop is shortest with {batch(group.iloc[fast])} "
                f"({fmt_seconds(loop[fast])})")
        if total.isna().all():
            out.append(text + ". No run recorded its total time with start-up (the profiler's wall clock, wall_s, "
                              "or a script's total): the configurations are compared on the training loop only.")
            continue
        first = int(total.idxmin())
        some = "" if total.notna().all() else (
            f" among the {count(total.notna().sum(), 'configuration')} that recorded their total")
        if first == fast:
            out.append(text + f", and so is the total with start-up{some} ({fmt_seconds(total[first])}).")
            continue
        text += (f"; in all, start-up included, {batch(group.iloc[first])} finishes first{some} "
                 f"({fmt_seconds(total[first])}")
        if pd.isna(total[fast]):
            out.append(text + f"; {batch(group.iloc[fast])} recorded no total).")
            continue
        text += (f" against {fmt_seconds(total[fast])}): {batch(group.iloc[fast], compact=True)} spends "
                 f"{fmt_seconds(group.loc[fast, 'outside_loop_s'])} outside its training loop against "
                 f"{fmt_seconds(group.loc[first, 'outside_loop_s'])}, more than its faster loop saves")
        parts = [c for c in PARTS if c in group and c != LOOP]
        gaps = (group.loc[fast, parts] - group.loc[first, parts]).astype(float)
        if gaps.notna().any() and gaps.max() > 0:
            part = gaps.idxmax()
            text += (f"; the part that differs most: {part}, {fmt_seconds(group.loc[fast, part])} against "
                     f"{fmt_seconds(group.loc[first, part])}")
        out.append(text + ".")
    return out


MEMORY_COLUMNS = (*MEMORY, "device_memory_gb", "memory_headroom_gb")
"""Memory of a configuration (GiB): its runs' largest peaks and the device's capacity."""
DID_NOT_FIT = "no: out of memory"


def memory(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of each sweep, those that did not fit included: experiment, configuration, its
    runs' largest peaks, the device's memory, the least headroom (GiB) and ``fits`` (yes, no: out of memory, not
    recorded)."""
    too_big = pd.DataFrame(runs.attrs.get("did_not_fit", []))
    found = pd.concat([runs, too_big], ignore_index=True) if len(too_big) else runs
    found = found.reindex(columns=[*found, *(c for c in (*MEMORY_COLUMNS, "fits") if c not in found)])
    found = found.assign(configuration=configurations(found), order=pd.factorize(found["experiment"].astype(str))[0])
    keys = ["order", "experiment", "micro_batch_size", "grad_accum_steps", "configuration"]
    out = found.groupby(keys, sort=True, dropna=False).agg(
        **{c: (c, "max") for c in MEMORY_COLUMNS if c != "memory_headroom_gb"},
        memory_headroom_gb=("memory_headroom_gb", "min"),
        fits=("fits", lambda fits: DID_NOT_FIT if fits.eq(False).any() else "yes" if fits.eq(True).any()
              else "not recorded")).reset_index()
    return out[["experiment", "configuration", *MEMORY_COLUMNS, "fits"]]


def memory_notes(table: pd.DataFrame) -> list[str]:
    """Per sweep of :func:`memory`: the configurations that ran out of memory and the largest that fit."""
    out = []
    for name, rows in table.groupby("experiment", sort=False):
        did_not_fit = rows["fits"].eq(DID_NOT_FIT)
        too_big = rows.loc[did_not_fit, "configuration"].tolist()
        fitted = rows[~did_not_fit & rows["peak_memory_gb"].notna()]
        if fitted.empty and not too_big:
            out.append(f"{name}: no run recorded its memory.")
            continue
        text = f"{name}: " + (f"micro-batch × accumulation {and_list(too_big)} ran out of memory" if too_big
                              else "every configuration fit" if rows["fits"].eq("yes").all()
                              else "no run recorded running out of memory")
        if not fitted.empty:
            last = fitted.iloc[-1]
            text += (f"; {'the largest that fit' if too_big else 'the largest'}, {last['configuration']}, peaked at "
                     f"{last['peak_memory_gb']:.3g} GiB")
            if pd.notna(last["memory_headroom_gb"]):
                text += f" of {last['device_memory_gb']:.3g} GiB ({last['memory_headroom_gb']:.3g} GiB left)"
        out.append(text + ".")
    return out


@dataclass(frozen=True)
class BatchSizePage(Measured):
    """Every frame and sentence of the batch-size page, in its order; ``sweeps``: each :func:`sweep`."""

    sweeps: Sweeps
    headline: Html
    work_notes: list[str]
    table: pd.DataFrame
    tops: dict[str, str]
    plateau_notes: list[str]
    time_notes: list[str]
    total_time: pd.DataFrame
    memory: pd.DataFrame
    memory_notes: list[str]
    phases: pd.DataFrame
    phases_per_step: pd.DataFrame
    without_phases: list[str]
    overlap_notes: list[str]
    evaluation_notes: list[str]
    evaluation_rates: pd.DataFrame


def analyse(runs: pd.DataFrame, steps: Summaries | None = None, train_tokens: float | None = None,
            min_gain: float = 0.10) -> BatchSizePage:
    """The batch-size page of ``runs`` (:func:`sweeps`): configurations timed on ``train_tokens`` (None: the most
    any of the sweep measured), a step gaining less than ``min_gain`` not paying."""
    unit, frames = unit_of(runs), job_frames(steps)
    found = {name: sweep(group, unit, frames) for name, group in by_experiment(runs)}
    frame, used = table(found, unit, train_tokens, min_gain), memory(runs)
    return BatchSizePage(
        runs=runs, steps=steps, sweeps=found, headline=headline(found, unit, min_gain, train_tokens),
        work_notes=work_notes(runs), table=frame,
        tops={name: top(name, *pair, unit)[0] for name, pair in found.items()},
        plateau_notes=plateau_notes(found, unit, min_gain), time_notes=time_notes(found, unit, train_tokens),
        total_time=total_time(found), memory=used, memory_notes=memory_notes(used),
        phases=per_experiment(runs, configurations, per_step=False),
        phases_per_step=per_experiment(runs, configurations),
        without_phases=without_phases(runs), overlap_notes=overlap_notes(runs),
        evaluation_notes=evaluation_notes(runs, steps), evaluation_rates=evaluation_rates(runs, steps))


@rule("micro-batches below the top of a sweep")
def small_micro_batches(page: BatchSizePage) -> Found:
    """Per sweep, the micro-batches below the smallest at its top: what the best of them loses against the
    fastest, ``fastest / best below − 1`` of throughput, and in time on the same work."""
    unit = unit_of(page.runs)
    out = Found()
    for name, rows in page.table.groupby("experiment", sort=False):
        rows = rows.reset_index(drop=True)
        smallest = rows.loc[rows["at_top"], "micro_batch_size"].min()
        below = rows[rows["micro_batch_size"] < smallest]
        if below.empty:
            continue
        group, found = page.sweeps[name]
        fast, slow = int(rows[unit.rate].idxmax()), int(below[unit.rate].idxmax())
        gain = distinguish(found, found.loc[slow, "configuration"], found.loc[fast, "configuration"])
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
            evidence, gain.difference.estimate, f"{unit.label} of the training loop",
            f"{name}: micro-batches below {fmt_int(smallest)}",
            interval=(gain.difference.low, gain.difference.high) if gain.tested else None,
            runs=int(min(group.loc[slow, "runs"], group.loc[fast, "runs"])),
            seconds=rows.loc[slow, "time_to_train_s"] - rows.loc[fast, "time_to_train_s"],
            per="training loop on the same work"))
    if not out.rows:
        out.lacking = "every micro-batch of each sweep is at its top or indistinguishable from it"
    return out


RULES = (exposed_communication, data_loading, outside_loop, small_micro_batches)
"""The batch-size page's rules (each reads the :class:`BatchSizePage`)."""


what_to_change = partial(section_of, RULES)
