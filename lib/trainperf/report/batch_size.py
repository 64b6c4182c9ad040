"""The batch-size report: a micro-batch × gradient-accumulation sweep — where
the time goes in each configuration, its throughput and time to train, the
best configuration with its margin, and where larger batches stop paying.
Frames for the notebook's tables and charts, sentences for its text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.report.applicability import NotApplicable
from trainperf.report.configs import experiment_runs, experiments, ordered, rank, unit_of
from trainperf.report.html import Html, fmt_int, fmt_pct, headline as banner
from trainperf.report.page import InputError, require
from trainperf.report.phases import has_phases, long_form


def sweeps(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of micro-batch sweeps — experiments measured at two or more
    micro-batch sizes on one device count — ordered by experiment, micro-batch
    and accumulation. Other experiments are listed in ``attrs['skipped']``.
    :class:`NotApplicable` when no sweep is left."""
    unit = unit_of(runs)
    have = require(require(runs, "micro_batch_size", "a micro-batch size",
                           "give the column, or record it with StepProfiler (samples per micro-step)"),
                   unit.rate, f"a throughput ({unit.label})", "give tokens or samples and elapsed_s, or a rate")
    shape = have.groupby("experiment").agg(batches=("micro_batch_size", "nunique"), devices=("gpus", "nunique"))
    is_sweep = (shape["batches"] >= 2) & (shape["devices"] == 1)
    if not is_sweep.any():
        raise NotApplicable("no experiment is a micro-batch sweep (two or more micro_batch_size values on one "
                            f"device count): {', '.join(map(str, shape.index))}")
    out = ordered(have[have["experiment"].isin(shape.index[is_sweep]).to_numpy(bool)], ["micro_batch_size",
                                                                                        "grad_accum_steps"])
    out.attrs = {**have.attrs, "skipped": list(have.attrs.get("skipped", [])) + [
        (f"experiment {name}", "not a micro-batch sweep (one micro-batch size, or several device counts)")
        for name in shape.index[~is_sweep]]}
    return out


def config_label(run: pd.Series, compact: bool = False) -> str:
    """``micro-batch 16 × 64 accumulation`` (compact: ``16 × 64``)."""
    accum = run.get("grad_accum_steps")
    accum_text = fmt_int(accum) if pd.notna(accum) else "?"
    if compact:
        return f"{fmt_int(run['micro_batch_size'])} × {accum_text}"
    return f"micro-batch {fmt_int(run['micro_batch_size'])} × {accum_text} accumulation"


@dataclass(frozen=True)
class Plateau:
    """Where larger micro-batches stop paying: the first configuration after
    which no single step along the sweep gains ``min_gain`` or more.
    Throughput may still rise a little after it (or fall)."""

    index: int | None
    """Position in the sweep of that configuration; ``None``: still improving at the end."""
    gains: np.ndarray
    """Gain of each configuration over the previous one (NaN for the first)."""


def plateau(rates: np.ndarray, min_gain: float) -> Plateau:
    """Find where the sweep's throughput ``rates`` (in sweep order) stops gaining ``min_gain`` per step."""
    rates = np.asarray(rates, dtype=float)
    gains = np.full(len(rates), np.nan)
    gains[1:] = rates[1:] / rates[:-1] - 1
    for i in range(1, len(rates)):
        if np.all(gains[i:] < min_gain):
            return Plateau(i - 1, gains)
    return Plateau(None, gains)


def table(runs: pd.DataFrame, train_tokens: float | None = None, min_gain: float = 0.10) -> pd.DataFrame:
    """One row per configuration of each sweep: experiment, configuration
    (``micro-batch × accumulation``), micro-batch, accumulation, samples per
    device per step, devices, throughput total and per device, gain over the
    previous configuration, time to train ``train_tokens`` (the measured
    window when not given), and ``best`` (the sweep's highest throughput)."""
    unit = unit_of(runs)
    if train_tokens and unit.name != "tokens":
        raise InputError("train_tokens needs token rates; these runs report samples only")
    parts = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        best = rank(group, unit.rate).best.name
        parts.append(group.assign(
            configuration=[config_label(r, compact=True) for _, r in group.iterrows()],
            per_device_batch=group["micro_batch_size"] * group["grad_accum_steps"],
            gain=plateau(group[unit.rate].to_numpy(), min_gain).gains,
            time_to_train_s=train_tokens / group["tokens_per_s"] if train_tokens else group["elapsed_s"],
            best=group.index == best))
    return pd.concat(parts)[["experiment", "configuration", "micro_batch_size", "grad_accum_steps",
                             "per_device_batch", "gpus", unit.rate, unit.per_device, "gain", "time_to_train_s",
                             "best"]].reset_index(drop=True)


def phases(runs: pd.DataFrame, *, per_step: bool) -> pd.DataFrame:
    """Phase times of each configuration, long form (see
    :func:`trainperf.report.phases.long_form`): per optimizer step when
    ``per_step`` and the step counts are known, else in the measured window."""
    parts = [long_form(g, [config_label(r, compact=True) for _, r in g.iterrows()], per_step=per_step)
             for name in experiments(runs) if has_phases(g := experiment_runs(runs, name))]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["experiment", "run_id", "configuration", "gpus", "phase", "seconds", "share", "unit"])


def headline(runs: pd.DataFrame, min_gain: float = 0.10) -> Html:
    """The best configuration of the first sweep, named with its experiment, its margin, and where
    throughput plateaus."""
    unit = unit_of(runs)
    name = experiments(runs)[0]
    group = experiment_runs(runs, name).reset_index(drop=True)
    ranking = rank(group, unit.rate)
    text = f"{name}: best {config_label(ranking.best)} at {fmt_int(ranking.best[unit.rate])} {unit.label}"
    figures = [(fmt_int(ranking.best[unit.rate]), f"{unit.label} at the best configuration of {name}"),
               (fmt_pct(ranking.margin) if ranking.runner_up is not None else "–", "margin over the runner-up")]
    if ranking.runner_up is not None:
        text += f", {fmt_pct(ranking.margin)} ahead of {config_label(ranking.runner_up)}"
    found = plateau(group[unit.rate].to_numpy(), min_gain)
    if found.index is not None:
        text += f"; beyond {config_label(group.iloc[found.index])}, each step adds less than {fmt_pct(min_gain, 0)}"
        figures.append((config_label(group.iloc[found.index], compact=True),
                        f"after it, no step of the sweep gains {fmt_pct(min_gain, 0)} or more"))
    if len(experiments(runs)) > 1:
        text += f" ({len(experiments(runs)) - 1} more sweep(s) below)"
    return banner(text + ".", figures)


def plateau_notes(runs: pd.DataFrame, min_gain: float = 0.10) -> list[str]:
    """Per sweep: where no step gains ``min_gain`` or more any longer, and how much faster it still gets
    in all — or that it is still improving at the end."""
    unit = unit_of(runs)
    out = []
    for name in experiments(runs):
        group = experiment_runs(runs, name).reset_index(drop=True)
        rates = group[unit.rate].to_numpy(float)
        found = plateau(rates, min_gain)
        if found.index is None:
            out.append(f"{name}: throughput is still improving at the end of the sweep: the last step adds "
                       f"{fmt_pct(found.gains[-1])}. Larger micro-batches may pay further.")
            continue
        after = rates[found.index:]
        beyond = ("none of the later configurations is faster." if after.argmax() == 0 else
                  f"the fastest later configuration, {config_label(group.iloc[found.index + int(after.argmax())])}, "
                  f"is {fmt_pct(after.max() / after[0] - 1)} faster in all.")
        out.append(f"{name}: after {config_label(group.iloc[found.index])} no step of the sweep adds "
                   f"{fmt_pct(min_gain, 0)} or more (gains: "
                   f"{', '.join(fmt_pct(g) for g in found.gains[found.index + 1:])}); {beyond}")
    return out
