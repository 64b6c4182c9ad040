"""The batch-size report: a micro-batch × gradient-accumulation sweep — where
the time goes in each configuration, its throughput and time to train, the
best configuration with its margin, and where larger batches stop paying."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.report import plots
from trainperf.report.configs import experiment_runs, experiments, ordered, rank, unit_of
from trainperf.report.html import (Col, Fragment, Section, callout, fmt_int, fmt_pct, heading,
                                   headline as banner, join, key_figures, paragraph, table)
from trainperf.report.page import InputError, require
from trainperf.report.phases import breakdown, has_phases


def sweeps(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of micro-batch sweeps — experiments measured at two or more
    micro-batch sizes on one device count — ordered by experiment, micro-batch
    and accumulation. Other experiments are listed in ``attrs['skipped']``.
    Raises ``InputError`` when no sweep is left."""
    unit = unit_of(runs)
    have = require(require(runs, "micro_batch_size", "a micro-batch size"), unit.rate, f"a throughput ({unit.label})")
    shape = have.groupby("experiment").agg(batches=("micro_batch_size", "nunique"), devices=("gpus", "nunique"))
    is_sweep = (shape["batches"] >= 2) & (shape["devices"] == 1)
    if not is_sweep.any():
        raise InputError("no experiment is a micro-batch sweep (two or more micro-batch sizes on one device "
                         f"count): {', '.join(map(str, shape.index))}")
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


def _time_to_train(group: pd.DataFrame, train_tokens: float | None) -> tuple[pd.Series, str]:
    unit = unit_of(group)
    if train_tokens:
        if unit.name != "tokens":
            raise InputError("train_tokens needs token rates; these runs report samples only")
        return train_tokens / group["tokens_per_s"], f"Time to train {train_tokens:,.0f} tokens"
    return group["elapsed_s"], "Time to train (measured window)"


def headline(runs: pd.DataFrame, min_gain: float = 0.10) -> Fragment:
    """The best configuration of the (first) sweep, its margin, and where throughput plateaus."""
    unit = unit_of(runs)
    group = experiment_runs(runs, experiments(runs)[0]).reset_index(drop=True)
    ranking = rank(group, unit.rate)
    text = "Best: {best} at {rate} " + unit.label
    values = {"best": config_label(ranking.best), "rate": fmt_int(ranking.best[unit.rate])}
    if ranking.runner_up is not None:
        text += ", {margin} ahead of {second}"
        values |= {"margin": fmt_pct(ranking.margin), "second": config_label(ranking.runner_up)}
    found = plateau(group[unit.rate].to_numpy(), min_gain)
    figures = [(fmt_int(ranking.best[unit.rate]), f"{unit.label} at the best configuration"),
               (fmt_pct(ranking.margin) if ranking.runner_up is not None else "–", "margin over the runner-up")]
    if found.index is not None:
        text += "; beyond {knee}, each step adds less than {gain}"
        values |= {"knee": config_label(group.iloc[found.index]), "gain": fmt_pct(min_gain, 0)}
        figures.append((config_label(group.iloc[found.index], compact=True),
                        f"after it, no step of the sweep gains {fmt_pct(min_gain, 0)} or more"))
    return join([banner(text + ".", **values), key_figures(figures)])


def sweep_table(runs: pd.DataFrame, train_tokens: float | None = None, min_gain: float = 0.10) -> Section:
    """Per sweep: each configuration's batch, throughput, gain over the previous one, and time to train."""
    unit = unit_of(runs)
    out = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        found = plateau(group[unit.rate].to_numpy(), min_gain)
        ttt, ttt_header = _time_to_train(group, train_tokens)
        view = group.assign(configuration=[config_label(r) for _, r in group.iterrows()],
                            per_device_batch=group["micro_batch_size"] * group["grad_accum_steps"],
                            gain=found.gains, time_to_train=ttt)
        columns = [Col("micro_batch_size", "Micro-batch", "int"),
                   Col("grad_accum_steps", "Accumulation", "int"),
                   Col("per_device_batch", "Samples per device per step", "int"),
                   Col("gpus", "Devices", "int"), Col(unit.rate, f"Throughput ({unit.label})", "int"),
                   Col(unit.per_device, f"Per device ({unit.label})", "int"),
                   Col("gain", "Gain over previous", "pct"), Col("time_to_train", ttt_header, "s")]
        best = rank(view, unit.rate).best.name
        out.append(table(view, columns, caption=name if len(experiments(runs)) > 1 else "",
                         highlight=[i == best for i in view.index],
                         note="Highlighted: the highest throughput. Every configuration processes the same data, "
                              "so the time to train orders them the same way as throughput."
                              if not train_tokens else "Highlighted: the highest throughput."))
    return Section(out)


def phase_breakdown(runs: pd.DataFrame) -> Section:
    """Per sweep: phase times of each configuration, absolute (stacked bars)
    and per step — or as shares of the window where the step count is unknown."""
    out: list = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        if len(experiments(runs)) > 1:
            out.append(heading(f"Phases — {name}"))
        if not has_phases(group):
            out.append(paragraph("The data of {name} holds no phase times: no breakdown.", name=name))
            continue
        ticks = [config_label(r, compact=True) for _, r in group.iterrows()]
        absolute = breakdown(group, per_step=False)
        out.append(plots.stacked_bars(ticks, {k: v.to_numpy() for k, v in absolute.seconds.items()},
                                      title=f"Phase time per configuration (micro-batch × accumulation) — {name}",
                                      ylabel=absolute.unit))
        per_step = breakdown(group, per_step=True)
        if per_step.per_step:
            out.append(plots.stacked_bars(ticks, {k: v.to_numpy() for k, v in per_step.seconds.items()},
                                          title=f"Phase time per optimizer step — {name}", ylabel=per_step.unit))
            per_step_table = per_step.seconds
        else:
            shares = absolute.seconds.div(absolute.seconds.sum(axis=1), axis=0)
            out.append(plots.stacked_bars(ticks, {k: v.to_numpy() for k, v in shares.items()},
                                          title=f"Share of each phase — {name}", ylabel="share of the window",
                                          total_labels=False, percent=True))
            out.append(paragraph("The step count of these runs is unknown (no steps, or samples and global batch "
                                 "size), so time per step cannot be computed; the shares above compare the "
                                 "configurations instead."))
            per_step_table = None
        view = absolute.seconds.assign(configuration=ticks)
        columns = [Col("configuration", "Micro-batch × accumulation")] + [
            Col(c, f"{c} (s)", "num") for c in absolute.seconds.columns]
        out.append(table(view, columns, caption="Seconds in the measured window"))
        if per_step_table is not None:
            view = per_step_table.assign(configuration=ticks)
            out.append(table(view, [Col("configuration", "Micro-batch × accumulation")] + [
                Col(c, f"{c} (s per step)", "num4") for c in per_step_table.columns], caption="Seconds per optimizer step"))
    return Section(out)


def throughput_chart(runs: pd.DataFrame, min_gain: float = 0.10) -> Section:
    """Throughput along each sweep, with the plateau marked."""
    unit = unit_of(runs)
    out: list = []
    for name in experiments(runs):
        group = experiment_runs(runs, name)
        found = plateau(group[unit.rate].to_numpy(), min_gain)
        ticks = [config_label(r, compact=True) for _, r in group.iterrows()]
        out.append(plots.bars_with_line(
            ticks, group[unit.rate].tolist(), [100 * g if np.isfinite(g) else np.nan for g in found.gains],
            bar_label=f"{unit.label}", line_label="gain over the previous configuration (%)",
            title=f"Throughput per configuration (micro-batch × accumulation) — {name}",
            bar_unit=f"{unit.label}, all devices", line_unit="gain over previous (%)"))
        if found.index is not None:
            rates = group[unit.rate].to_numpy(float)
            after = rates[found.index:]
            beyond = ("none of the later configurations is faster." if after.argmax() == 0 else
                      "the fastest later configuration, {best}, is {total} faster in all.")
            out.append(callout("After <strong>{knee}</strong> no step of the sweep adds {gain} or more (gains: "
                               "{gains}); " + beyond, "info",
                               knee=config_label(group.iloc[found.index]), gain=fmt_pct(min_gain, 0),
                               gains=", ".join(fmt_pct(g) for g in found.gains[found.index + 1:]),
                               best=config_label(group.iloc[found.index + int(after.argmax())]),
                               total=fmt_pct(after.max() / after[0] - 1)))
        else:
            out.append(callout("Throughput is still improving at the end of the sweep: the last step adds "
                               "{gain}. Larger micro-batches may pay further.", "good",
                               gain=fmt_pct(found.gains[-1])))
    return Section(out)
