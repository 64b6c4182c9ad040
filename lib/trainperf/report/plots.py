"""Figures of the reports, drawn with matplotlib's object API (no pyplot state).

Every function returns a :class:`Chart`, which Jupyter displays as a PNG
(rendered at high resolution, shown at its natural width) and which nbconvert
embeds in the page. Labels that come from data are shown literally: a ``$``
does not switch matplotlib to math mode.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ParamSpec

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

PALETTE = ("#2456a6", "#e07b39", "#2a9d8f", "#c44e52", "#8172b3", "#937860", "#d17fb5", "#7f7f7f",
           "#b8a02c", "#3fa7d6")
PHASE_COLORS = {
    "data": "#b8a02c", "h2d": "#d9c26a", "forward": "#2456a6", "loss": "#7aa0d8", "backward": "#2a9d8f",
    "optimizer": "#8172b3", "compute": "#2456a6", "comm": "#c44e52", "validation": "#7f7f7f",
    "other": "#cfd5de",
}
MAX_BAR_LABELS = 24
"""Grouped bars carry value labels only up to this many bars."""
DPI = 140
"""Rendering resolution; pages show figures at 100 pixels per inch."""

RC = {
    "font.size": 10, "axes.titlesize": 11, "axes.titleweight": "bold", "axes.labelsize": 10,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e3e7ee",
    "grid.linewidth": 0.8, "axes.axisbelow": True, "legend.frameon": False, "legend.fontsize": 9,
    "axes.edgecolor": "#8a94a6", "xtick.color": "#3c4556", "ytick.color": "#3c4556",
    "axes.labelcolor": "#1d2430", "text.color": "#1d2430", "xtick.labelsize": 9, "ytick.labelsize": 9,
}
P = ParamSpec("P")


@dataclass
class Chart:
    """A figure for display: Jupyter shows it as PNG at ``width`` CSS pixels."""

    figure: Figure

    def png(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=DPI, facecolor="white")
        return buffer.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None):  # noqa: ANN001 (IPython protocol)
        import base64

        width, height = self.figure.get_size_inches() * 100
        title = self.figure.axes[0].get_title(loc="left") or "figure"
        data = {"image/png": base64.b64encode(self.png()).decode("ascii"), "text/plain": f"<{title}>"}
        return data, {"image/png": {"width": int(width), "height": int(height), "alt": title.replace("\\$", "$")}}


def literal(text: object) -> str:
    """``text`` for a matplotlib label: ``$`` escaped so it is not read as math."""
    return str(text).replace("$", r"\$")


def styled(draw: Callable[P, Chart]) -> Callable[P, Chart]:
    """Run a chart function with the report style (:data:`RC`)."""
    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Chart:
        with rc_context(RC):
            return draw(*args, **kwargs)
    return wrapper


def new_figure(width: float = 9.0, height: float = 4.2, ncols: int = 1, nrows: int = 1,
               **kwargs: object) -> tuple[Figure, np.ndarray]:
    """A figure and its axes (always a flat array); call inside a :func:`styled` function."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kwargs).ravel()


def thousands(ax: Axes, axis: str = "y") -> None:
    """Tick labels with thousands separators (``k``/``M`` for large values)."""
    def label(value: float, _pos: int) -> str:
        if abs(value) >= 1e6:
            return f"{value / 1e6:,.1f}M".replace(".0M", "M")
        if abs(value) >= 1e4:
            return f"{value / 1e3:,.0f}k"
        return f"{value:,.0f}" if value == int(value) else f"{value:.3g}"
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(FuncFormatter(label))


def log2_devices(ax: Axes, ticks: Sequence[float]) -> None:
    """A base-2 log x axis labelled with the device counts ``ticks``."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.set_xticks(sorted(set(ticks)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


@styled
def bars_with_line(labels: Sequence[str], bars: Sequence[float], line: Sequence[float], *,
                   bar_label: str, line_label: str, title: str, bar_unit: str, line_unit: str) -> Chart:
    """Bars (left axis) with a line over them (right axis): e.g. total and per-device throughput."""
    fig, (ax,) = new_figure()
    x = np.arange(len(labels))
    bar_art = ax.bar(x, bars, color=PALETTE[0], width=0.62, label=bar_label)
    ax.bar_label(bar_art, labels=[f"{v:,.0f}" for v in bars], fontsize=8, padding=2, color="#3c4556")
    tilt = _crowded(labels, 8)
    ax.set_xticks(x, [literal(s) for s in labels], rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylabel(bar_unit)
    thousands(ax)
    ax.margins(y=0.12)
    twin = ax.twinx()
    twin.plot(x, line, color=PALETTE[1], marker="o", linewidth=2.2, label=line_label)
    twin.set_ylabel(line_unit, color=PALETTE[1])
    twin.tick_params(axis="y", colors=PALETTE[1], labelsize=9)
    finite = np.asarray(line, dtype=float)[np.isfinite(np.asarray(line, dtype=float))]
    if finite.size:
        twin.set_ylim(min(0.0, finite.min() * 1.25), max(finite.max() * 1.25, 1e-9))
    twin.spines["top"].set_visible(False)
    twin.grid(False)
    thousands(twin)
    ax.set_title(literal(title), loc="left")
    handles = [bar_art, twin.get_lines()[0]]
    ax.legend(handles, [bar_label, line_label], loc="upper left")
    return Chart(fig)


@styled
def lines(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *, title: str, xlabel: str,
          ylabel: str, log_x: bool = False, ideal: tuple[Sequence[float], Sequence[float]] | None = None,
          ideal_label: str = "ideal (linear)", percent: bool = False, from_zero: bool = True,
          log_y: bool = False) -> Chart:
    """One line with markers per series ``name -> (x, y)``; optional dashed
    ideal line; the y axis starts at 0 unless ``from_zero`` is false or it is logarithmic."""
    fig, (ax,) = new_figure()
    xs_all: list[float] = []
    if ideal is not None:
        ax.plot(ideal[0], ideal[1], color="#8a94a6", linestyle="--", linewidth=1.4, label=ideal_label)
    for i, (name, (x, y)) in enumerate(series.items()):
        ax.plot(x, y, marker="o", linewidth=2, color=PALETTE[i % len(PALETTE)], label=literal(name))
        xs_all.extend(float(v) for v in x)
    if log_x and xs_all:
        log2_devices(ax, xs_all)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    elif percent:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{100 * v:.0f} %"))
    else:
        thousands(ax)
    if from_zero and not log_y:
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)
    ax.set_title(literal(title), loc="left")
    ax.legend(loc="best")
    return Chart(fig)


@styled
def stacked_bars(labels: Sequence[str], parts: Mapping[str, Sequence[float]], *, title: str, ylabel: str,
                 total_labels: bool = True, percent: bool = False) -> Chart:
    """Stacked bars: one bar per label, one segment per part (phase name -> values);
    ``percent``: the values are fractions, labelled as percent."""
    fig, (ax,) = new_figure()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for i, (name, values) in enumerate(parts.items()):
        values = np.nan_to_num(np.asarray(values, dtype=float))
        ax.bar(x, values, bottom=bottom, width=0.62, label=literal(name),
               color=PHASE_COLORS.get(name.split()[0].lower(), PALETTE[i % len(PALETTE)]),
               edgecolor="white", linewidth=0.6)
        bottom += values
    if total_labels:
        for xi, total in zip(x, bottom):
            ax.annotate(_compact(total), (xi, total), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8, color="#3c4556")
    tilt = _crowded(labels, 7)
    ax.set_xticks(x, [literal(s) for s in labels], rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{100 * v:.0f} %"))
    # explicit: a zero-height top segment is a "sticky edge" that margins() cannot pass,
    # which put the total labels of the tallest bar under the title
    ax.set_ylim(0, (bottom.max() if bottom.size and bottom.max() > 0 else 1.0) * 1.1)
    ax.set_title(literal(title), loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Chart(fig)


@styled
def projection(measured: tuple[Sequence[float], Sequence[float]], curves: Sequence[Curve], *,
               title: str, xlabel: str, ylabel: str, measured_label: str = "measured") -> Chart:
    """Measured points with fitted curves (and their error bands) and reference lines, log-log base 2."""
    fig, (ax,) = new_figure(height=4.8)
    ticks = [float(v) for v in measured[0]] + [float(max(c.x[-1] for c in curves))] if curves else []
    for i, curve in enumerate(curves):
        color = curve.color or PALETTE[(i + 1) % len(PALETTE)]
        if curve.band is not None:
            ax.fill_between(curve.x, curve.band[0], curve.band[1], color=color, alpha=0.16, linewidth=0)
        ax.plot(curve.x, curve.y, color=color, linestyle=curve.style, linewidth=1.8, label=literal(curve.label))
    ax.plot(measured[0], measured[1], "o", color=PALETTE[0], markersize=7, label=literal(measured_label), zorder=5)
    ax.set_yscale("log", base=2)
    ax.set_ylim(bottom=min(float(min(measured[1])), 1.0) / 1.5)
    log2_devices(ax, [t for t in ticks if t > 0])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(literal(title), loc="left")
    ax.legend(loc="upper left")
    return Chart(fig)


@dataclass
class Curve:
    """A line for :func:`projection`: x, y, optional (low, high) band, legend label, style."""

    x: np.ndarray
    y: np.ndarray
    label: str
    band: tuple[np.ndarray, np.ndarray] | None = None
    style: str = "-"
    color: str | None = None


@styled
def distribution(groups: Mapping[str, Sequence[float]], *, title: str, ylabel: str) -> Chart:
    """Box plot with every value shown as a point over it (strip), one box per
    group; horizontal when there are more groups than fit side by side."""
    names = list(groups)
    horizontal = len(names) > 5
    fig, (ax,) = new_figure(height=max(3.0, 0.42 * len(names) + 1.2) if horizontal else 4.4)
    data = [np.asarray(groups[n], dtype=float) for n in names]
    positions = np.arange(len(names))[::-1] if horizontal else np.arange(len(names))
    ax.boxplot(data, positions=positions, widths=0.5, showfliers=False, orientation="horizontal" if horizontal
               else "vertical", medianprops={"color": PALETTE[1], "linewidth": 2}, boxprops={"color": "#5b6575"},
               whiskerprops={"color": "#5b6575"}, capprops={"color": "#5b6575"})
    rng = np.random.default_rng(0)
    for position, values in zip(positions, data):
        jitter = position + rng.uniform(-0.12, 0.12, size=len(values))
        xy = (values, jitter) if horizontal else (jitter, values)
        ax.plot(*xy, "o", color=PALETTE[0], alpha=0.7, markersize=5)
    ticks = [literal(n).replace("\n", " · ") if horizontal else literal(n) for n in names]
    if horizontal:
        ax.set_yticks(positions, ticks)
        ax.set_xlabel(ylabel)
        thousands(ax, "x")
    else:
        ax.set_xticks(positions, ticks, rotation=0 if len(names) <= 4 else 25, ha="center" if len(names) <= 4 else "right")
        ax.set_ylabel(ylabel)
        thousands(ax)
    ax.set_title(literal(title), loc="left")
    return Chart(fig)


@styled
def grouped_bars(categories: Sequence[str], groups: Mapping[str, Sequence[float]], *, title: str, ylabel: str,
                 value_format: str = "{:,.0f}", percent: bool = False,
                 reference: float | None = None, reference_label: str = "") -> Chart:
    """Bars grouped by category, one colour per group (e.g. platforms per model)."""
    fig, (ax,) = new_figure()
    x = np.arange(len(categories))
    width = 0.8 / max(1, len(groups))
    for i, (name, values) in enumerate(groups.items()):
        values = np.asarray(values, dtype=float)
        art = ax.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(values), width=width * 0.92,
                     color=PALETTE[i % len(PALETTE)], label=literal(name))
        if len(categories) * len(groups) <= MAX_BAR_LABELS:
            ax.bar_label(art, labels=["" if math.isnan(v) else (f"{100 * v:.0f} %" if percent else value_format.format(v))
                                      for v in values], fontsize=7, padding=2, color="#3c4556")
    if reference is not None:
        ax.axhline(reference, color="#8a94a6", linestyle="--", linewidth=1.2, label=literal(reference_label))
    crowded = len(categories) > 6
    ax.set_xticks(x, [literal(c) for c in categories], rotation=30 if crowded else 0,
                  ha="right" if crowded else "center")
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{100 * v:.0f} %"))
    else:
        thousands(ax)
    ax.margins(y=0.12)
    ax.set_title(literal(title), loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Chart(fig)


@styled
def rank_spread(runs: Sequence[str], ranks: Sequence[Sequence[float]], slowest: Sequence[int], *,
                title: str, ylabel: str) -> Chart:
    """Each rank's elapsed time per run (points), the slowest rank marked, the mean as a tick."""
    fig, (ax,) = new_figure(height=3.4)
    for i, (values, worst) in enumerate(zip(ranks, slowest)):
        values = np.asarray(values, dtype=float)
        others = np.delete(values, worst)
        ax.plot(np.full(len(others), i), others, "o", color=PALETTE[0], alpha=0.75, markersize=7,
                label="rank" if i == 0 else None)
        ax.plot([i], [values[worst]], "D", color=PALETTE[3], markersize=8,
                label="slowest rank (= the job's elapsed time)" if i == 0 else None)
        ax.plot([i - 0.22, i + 0.22], [values.mean()] * 2, color="#5b6575", linewidth=2,
                label="mean over ranks" if i == 0 else None)
        ax.annotate(f"rank {worst}", (i, values[worst]), xytext=(8, 0), textcoords="offset points",
                    va="center", fontsize=8, color=PALETTE[3])
    ax.set_xticks(np.arange(len(runs)), [literal(r) for r in runs], rotation=0 if len(runs) <= 5 else 25,
                  ha="center" if len(runs) <= 5 else "right")
    ax.set_ylabel(ylabel)
    thousands(ax)
    ax.set_title(literal(title), loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Chart(fig)


TICK_CHARS = 80
"""Characters of the widest line of tick labels that fit side by side across a chart, upright."""


def _crowded(labels: Sequence[str], most: int) -> bool:
    """Whether category labels need tilting: more than ``most`` of them, or
    their longest lines together wider than :data:`TICK_CHARS`."""
    widest = max((len(line) for text in labels for line in str(text).split("\n")), default=0)
    return len(labels) > most or widest * len(labels) > TICK_CHARS


def _compact(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"
