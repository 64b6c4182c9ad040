"""The look shared by every report: seaborn's style, one colour per phase of
training wherever it is drawn, and tables as pandas ``Styler`` with headers,
number formats and escaping.

A notebook calls :func:`apply` once; its cells then draw with seaborn
(``sns.barplot(..., palette=theme.PHASE_COLORS)``) and show tables with
:func:`table`. Strings from data are escaped in tables (``escape="html"``)
in tables; chart text is drawn by matplotlib into the image, never as HTML.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.ticker import Formatter, LogLocator, NullFormatter, NullLocator
from pandas.io.formats.style import Styler

from trainperf.report.html import (Html, esc, fmt_big, fmt_int, fmt_num, fmt_pct, fmt_seconds, fmt_sig, fmt_times,
                                   fmt_usd, paragraph)
from trainperf.report.phases import IMBALANCE, OTHER, PHASE_LABELS
from trainperf.schema import OUTSIDE_PREFIX, unit

PHASE_COLORS: dict[str, str] = {
    PHASE_LABELS["data_s"]: "#b8a02c", PHASE_LABELS["h2d_s"]: "#f2c85b", PHASE_LABELS["forward_s"]: "#2456a6",
    PHASE_LABELS["loss_s"]: "#7aa0d8", PHASE_LABELS["backward_s"]: "#2a9d8f",
    PHASE_LABELS["optimizer_s"]: "#8172b3", PHASE_LABELS["compute_s"]: "#5b9e48",
    PHASE_LABELS["comm_s"]: "#c44e52", PHASE_LABELS["comm_exposed_s"]: "#e07b39",
    PHASE_LABELS["wait_outside_s"]: "#a0522d",
    OTHER: "#cfd5de", IMBALANCE: "#d17fb5", PHASE_LABELS["validation_s"]: "#6b6b6b",
}
"""Colour of each phase (by its label in the ``phase`` column of a breakdown), the same in every chart, in the
order of a breakdown's columns: the training loop's phases, then validation, outside them."""

SERIES = ("#2456a6", "#e07b39", "#2a9d8f", "#c44e52", "#8172b3", "#937860", "#d17fb5", "#7f7f7f",
          "#b8a02c", "#3fa7d6")
"""Colours of other series (experiments, platforms, laws), in order."""


def series_colors(names: Sequence[object]) -> dict[str, str]:
    """One colour of :data:`SERIES` per distinct name, in the order the names first appear (again from the
    first after ten): the palette every chart of a page colours its experiments by."""
    return {name: SERIES[i % len(SERIES)] for i, name in enumerate(dict.fromkeys(map(str, names)))}


def color_titles(axes: Mapping[str, Axes], colors: Mapping[str, str]) -> None:
    """Write the title of each panel of a grid (``grid.axes_dict``: name → axes) in its name's colour
    (panels named after no key of ``colors`` keep theirs)."""
    where = plt.rcParams["axes.titlelocation"]  # the theme's titles sit on the left
    for name, ax in axes.items():
        if str(name) in colors:
            ax.set_title(ax.get_title(loc=where), loc=where, color=colors[str(name)])


def color_tick_labels(ax: Axes, colors: Mapping[str, str], axis: str = "y") -> None:
    """Write each tick label of ``ax``'s ``axis`` in the colour ``colors`` gives its text (others as they are)."""
    for label in (ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()):
        if label.get_text() in colors:
            label.set_color(colors[label.get_text()])

RC = {"figure.figsize": (8.0, 4.0), "figure.dpi": 110, "axes.titleweight": "bold", "axes.titlelocation": "left",
      "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False, "svg.fonttype": "none",
      "axes.titley": 1.0, "axes.formatter.useoffset": False, "axes.formatter.limits": (-9, 12)}
"""Matplotlib settings on top of seaborn's ``whitegrid`` theme. Titles sit just above their axes
(``axes.titley``), where nothing can cover them: tick labels are never written with an offset or a
power of ten over the axis (``axes.formatter.*``) and never on top. (Left to find its place itself,
a title measures every y tick label of its axes at each layout.)"""


def apply() -> None:
    """Set the reports' seaborn theme and palette for every chart that follows."""
    sns.set_theme(style="whitegrid", context="notebook", palette=list(SERIES), font_scale=0.9, rc=RC)
    backend = plt.get_backend()
    if backend.endswith("backend_inline"):
        # The inline backend draws each figure for its image after the cell; pyplot's own hook would first
        # draw it once more, for a screen there is none of (a whole layout and render of every chart).
        plt.switch_backend(backend)  # load it now: pyplot installs its hook when it loads the backend
        plt.uninstall_repl_displayhook()
        # Charts as SVG with their text as text: smaller than PNG, sharp at any zoom, and quicker to make
        # (the browser draws the letters instead of matplotlib rasterizing every glyph). Imported here, in
        # the kernel: loaded before the kernel's shell exists, the backend would not hook into it.
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg")


COLUMNS: dict[str, tuple[str, Callable[[object], str] | None]] = {
    "experiment": ("Experiment", None), "run_id": ("Run", None), "configuration": ("Configuration", None),
    "platform": ("Platform", None), "platform_key": ("Platform", None), "model": ("Model", None),
    "precision": ("Precision", None), "gpus": ("Devices", fmt_int), "ranks": ("Ranks", fmt_int),
    "tokens": ("Total tokens", fmt_int), "samples": ("Total samples", fmt_int), "elapsed_s": ("Elapsed", fmt_seconds),
    "tokens_per_s": ("Tokens/s", fmt_int), "samples_per_s": ("Samples/s", fmt_int),
    "tokens_per_s_per_gpu": ("Tokens/s per device", fmt_int), "samples_per_s_per_gpu": ("Samples/s per device", fmt_int),
    "step_time_s": ("Time per step, mean", lambda x: fmt_num(x, 4)), "ideal": ("Ideal", fmt_times),
    "step_time_p50_s": ("Step time, median", lambda x: fmt_num(x, 4)),
    "step_time_p95_s": ("Step time, 95th percentile", lambda x: fmt_num(x, 4)),
    "step_time_basis": ("Step times from", None),
    "scaling_type": ("Scaling", None), "experiment_scaling": ("Experiment", None), "remark": ("Remark", None),
    "scaling_multiplier": ("Multiplier", fmt_times), "scaling_efficiency": ("Efficiency", fmt_pct),
    "serial_fraction": ("Serial fraction (Karp–Flatt)", fmt_sig), "scaling_basis": ("Basis", None),
    "micro_batch_size": ("Micro-batch", fmt_int), "grad_accum_steps": ("Accumulation", fmt_int),
    "per_device_batch": ("Samples per device per step", fmt_int), "gain": ("Gain over previous", fmt_pct),
    "time_to_train_s": ("Time to train: training loop", fmt_seconds),
    "total_time_s": ("Time to train: in all, start-up included", fmt_seconds),
    "total_s": ("Total, start-up included", fmt_seconds),
    "global_batch_size": ("Samples per optimizer step", fmt_int), "compute_s": ("Compute", fmt_num),
    "comm_s": ("Communication", fmt_num), "comm_exposed_s": ("Exposed comm.", fmt_num),
    "data_s": ("Data", fmt_num), "slowest_wait_s": ("Waiting for the slowest rank", fmt_num),
    "comm_overhead": ("Comm. overhead", fmt_pct),
    "compute_comm_ratio": ("Compute / comm.", fmt_times), "slowest_rank": ("Slowest rank", fmt_int),
    "slowest_s": ("Slowest", fmt_num), "mean_s": ("Mean over ranks", fmt_num),
    "fastest_s": ("Fastest", fmt_num), "imbalance": ("Imbalance (slowest / fastest)", fmt_times),
    "mean_understates": ("Mean over ranks understates elapsed by", fmt_pct),
    "peak_memory_gb": ("Peak allocated", fmt_num), "reserved_memory_gb": ("Peak reserved", fmt_num),
    "host_memory_gb": ("Host resident", fmt_num), "device_memory_gb": ("Device memory", fmt_num),
    "memory_headroom_gb": ("Headroom", fmt_num), "fits": ("Fits", None),
    "price_per_gpu_hour": ("Price ($/device-h)", fmt_usd), "gpu_hours": ("Device-hours", fmt_num),
    "cost_usd": ("Cost", fmt_usd), "cost_efficiency": ("Cost efficiency", fmt_pct),
    "usd_per_million_tokens": ("$ per million tokens", fmt_usd),
    "usd_per_million_samples": ("$ per million samples", fmt_usd), "configs": ("Configs", fmt_int),
    "seq_len": ("Sequence length", fmt_int), "tokens_per_day": ("Tokens per day", fmt_big),
    "samples_per_day": ("Samples per day", fmt_big), "tflops_total": ("TFLOP/s total", fmt_sig),
    "tflops_per_gpu": ("TFLOP/s per device", lambda x: fmt_sig(x, 4)),
    "peak_tflops_per_gpu": ("Dense peak (TFLOP/s per device)", lambda x: fmt_sig(x, 4)),
    "mfu": ("MFU (dense peak)", fmt_pct), "hfu": ("HFU", fmt_pct), "flops_convention_used": ("FLOPs formula", None),
    "fastest": ("Fastest per device", None), "fastest_rate": ("Tokens/s per device", fmt_int),
    "runner_up": ("Runner-up", None), "verdict": ("Verdict", None), "evidence": ("Tested by", None),
    "runner_up_rate": ("Runner-up tokens/s per device", fmt_int), "margin": ("Margin", fmt_pct),
    "fastest_mfu": ("Fastest's MFU", fmt_pct), "runner_up_mfu": ("Runner-up MFU", fmt_pct),
    "also": ("Their best configurations also differ in", None),
    "devices": ("Devices", fmt_int), "amdahl": ("Amdahl: multiplier", fmt_times),
    "amdahl_band": ("Amdahl: 95 % band", None), "usl": ("USL: multiplier", fmt_times),
    "usl_band": ("USL: 95 % band", None), "nodes": ("Nodes", fmt_int), "basis": ("Basis", None),
    "measured": ("Devices measured", None), "relative": ("Relative to the fastest", fmt_pct),
    "tokens_per_s_low": ("Tokens/s, 95 % interval low", fmt_int),
    "tokens_per_s_high": ("Tokens/s, 95 % interval high", fmt_int),
    "samples_per_s_low": ("Samples/s, 95 % interval low", fmt_int),
    "samples_per_s_high": ("Samples/s, 95 % interval high", fmt_int), "interval": ("95 % interval", None),
    "efficiency_interval": ("Efficiency, 95 % interval", None),
    "multiplier_interval": ("Multiplier, 95 % interval", None),
    "vs_previous": ("Versus previous", None), "efficiency_low": ("Efficiency, 95 % interval low", fmt_pct),
    "efficiency_high": ("Efficiency, 95 % interval high", fmt_pct), "rank": ("Rank", fmt_int),
    "wall_s": ("Wall clock", fmt_seconds), "goodput": ("Goodput", fmt_pct),
    "productive_s": ("Productive steps", fmt_seconds), "warmup_excess_s": ("Warm-up beyond steady steps", fmt_seconds),
    "startup_s": ("Start-up", fmt_seconds), "unaccounted_s": ("In no step", fmt_seconds),
    "after_steps_s": ("After the last step", fmt_seconds), "warmup_rule": ("Warm-up rule", None),
    "warmup_steps": ("Warm-up steps", fmt_int),
    "node": ("Node", None), "steps": ("Steps", fmt_int), "step_s": ("Step, median", fmt_sig),
    "comm_wait_s": ("Communication wait per step", fmt_sig), "busy_s": ("Busy per step", fmt_sig),
    "wait_gap_s": ("Waits less than the other ranks by", fmt_sig), "straggler": ("Straggler", None),
    "multiplier": ("Multiplier", fmt_times), "low": ("95 % band, low", fmt_times),
    "high": ("95 % band, high", fmt_times), "naive": ("Straight line", fmt_times), "law": ("Law", None),
    "reported": ("Source printed", fmt_sig), "trainperf": ("trainperf", fmt_sig),
    "claim": ("Claim", None), "printed": ("Printed", None), "trainperf_figure": ("trainperf", None),
    "why": ("Why", None), "source": ("Source", None),
    "difference": ("Source − trainperf (relative to trainperf)", fmt_pct), "figure": ("Figure", None),
    "note": ("Why a value is empty or doubtful", None), "runs": ("Runs", fmt_int), "examples": ("For example", None),
    "where": ("Input", None), "reason": ("Reason", None), "peak_source": ("Source", None),
    "side": ("Side", None), "phase": ("Phase", None), "marks": ("Marks", None),
    "beyond_fastest_s": ("Longer than the fastest rank", fmt_num), "unit": ("Unit", None),
    "window_rate": ("Rate with evaluation (per s)", fmt_int), "training_rate": ("Training only (per s)", fmt_int),
    "evaluation_s": ("Evaluation", fmt_num), "evaluation_share": ("Evaluation, share of the time", fmt_pct), "baseline_s": ("Baseline", fmt_sig),
    "candidate_s": ("Candidate", fmt_sig), "delta_s": ("Change", fmt_sig),
    "low_s": ("95 % interval, low", fmt_sig), "high_s": ("95 % interval, high", fmt_sig),
    "delta_pct": ("Change, of a baseline step", lambda x: fmt_pct(x, signed=True)),
    "relative_change": ("Change, of its own baseline", lambda x: fmt_pct(x, signed=True)),
    "tokens_per_step": ("Tokens per step", fmt_int), "samples_per_step": ("Samples per step", fmt_int),
    "load_average_1min": ("Load average at start (1 min)", fmt_num), "cpu_cores": ("Cores", fmt_int),
    "oversubscribed": ("Oversubscribed", None), "loaded": ("Loaded", None), "metric": ("Metric", None),
    "baseline": ("Baseline", fmt_sig), "candidate": ("Candidate", fmt_sig),
    "change": ("Change", lambda x: fmt_pct(x, signed=True)),
    "change_low": ("Change, 95 % interval low", lambda x: fmt_pct(x, signed=True)),
    "change_high": ("Change, 95 % interval high", lambda x: fmt_pct(x, signed=True)),
    "min_effect": ("Minimum effect", lambda x: fmt_pct(x, 0)),
    "repeats_needed": ("Runs a side that would tell", fmt_int),
    "moved": ("Moved", None), "baseline_slowest": ("Slowest rank of a step (baseline)", lambda x: fmt_pct(x, 0)),
    "candidate_slowest": ("Slowest rank of a step (candidate)", lambda x: fmt_pct(x, 0)),
    "what_to_change": ("Change", None), "based_on": ("Evidence", None), "expected_gain": ("Expected gain", fmt_pct),
    "gain_of": ("Gain of", None), "seconds_saved": ("Time saved", fmt_seconds), "saved_per": ("Per", None),
    "confidence": ("Confidence", None), "applies_to": ("Applies to", None),
}
"""Header and cell format of each column a report table may show; a column
not listed keeps its name and shows numbers to 3 significant figures. A header
gets the unit its column's name declares (:func:`trainperf.schema.unit`: ``(s)``,
``(GiB)``) unless its format writes it (:func:`~trainperf.report.html.fmt_seconds`)."""


def phase_order(frame: pd.DataFrame) -> list[str]:
    """The phases present in ``frame['phase']``, in the order of :data:`PHASE_COLORS` (the order of a step)."""
    present = set(frame["phase"])
    return [p for p in PHASE_COLORS if p in present]


def table(frame: pd.DataFrame, caption: str = "", highlight: Sequence[bool] | None = None,
          empty: str = "") -> Styler | Html:
    """``frame`` as a report table: headers and formats from :data:`COLUMNS`,
    every string escaped, no index; rows where ``highlight`` is true in bold
    green. An empty frame shows the sentence ``empty`` instead (nothing when it is empty too)."""
    if frame.empty:
        return paragraph(empty) if empty else Html("", "")
    spec = {c: COLUMNS.get(c) or _outside(c) or (str(c), None) for c in frame.columns}
    headers = {c: _header(c, *spec[c]) for c in frame.columns}
    formats = {headers[c]: _cell(spec[c][1], frame[c]) for c in frame.columns}
    shown = frame.rename(columns=headers).reset_index(drop=True)
    styler = (shown.style.format(formats, escape="html", na_rep="–").format_index(escape="html", axis=1)
              .hide(axis="index").set_table_attributes('class="tp-table tp-table-wrap"'))
    numeric = [headers[c] for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    styler = styler.set_properties(subset=numeric, **{"text-align": "right", "white-space": "nowrap"})
    if highlight is not None:
        marks = list(highlight)
        styler = styler.apply(lambda row: ["background-color: #eaf6ef; font-weight: 600" if marks[row.name] else ""]
                              * len(row), axis=1)
    return styler.set_caption(esc(caption)) if caption else styler


def _header(column: object, label: str, fmt: Callable[[object], str] | None) -> str:
    """A :data:`COLUMNS` column's header: its label, with the unit its name declares where its format does not
    write it (``Compute (s)``); another column's label as it is."""
    shown = unit(str(column)) if column in COLUMNS and fmt is not fmt_seconds else ""
    return f"{label} ({shown})" if shown else label


def _outside(column: object) -> tuple[str, Callable[[object], str]] | None:
    """The header and format of a phase outside the steps, ``outside_<name>_s`` (seconds); None for another column."""
    name = str(column)
    if name.startswith(OUTSIDE_PREFIX) and name.endswith("_s"):
        return f"{name[len(OUTSIDE_PREFIX):-2]} (outside the steps)", fmt_seconds
    return None


def _cell(fmt: Callable[[object], str] | None, column: pd.Series) -> Callable[[object], str]:
    """The column's format (missing cells are Styler's ``na_rep``): its own, else ``yes``/``no``
    for true/false, 3 significant figures for numbers, else the text."""
    if fmt is not None:
        return fmt
    if pd.api.types.is_bool_dtype(column):
        return lambda x: "yes" if x else "no"
    return fmt_sig if pd.api.types.is_numeric_dtype(column) else str


class TickLabels(Formatter):
    """Tick labels with thousands separators (``kind="number"``), as percent
    of a fraction (``"percent"``) or as a ratio (``"times"``), with just enough
    decimals that no two ticks read the same: on a linear axis the decimals of
    the step between ticks (read once per draw, in :meth:`set_locs`), on a log
    axis those of the value itself."""

    def __init__(self, kind: str = "number") -> None:
        self.kind, self.log, self.step = kind, False, 1.0

    def set_locs(self, locs: Sequence[float]) -> None:
        super().set_locs(locs)
        self.log = self.axis is not None and self.axis.get_scale() == "log"
        finite = [t for t in locs if np.isfinite(t)]
        self.step = min((abs(b - a) for a, b in zip(finite, finite[1:]) if b != a), default=1.0)

    def __call__(self, value: float, pos: int | None = None) -> str:
        scale = 100 if self.kind == "percent" else 1
        step = (abs(value) if self.log else self.step) * scale
        decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
        if self.kind == "percent":
            return f"{value * 100:,.{decimals}f} %"
        return f"{value:,.{decimals}f}" + ("×" if self.kind == "times" else "")


def tick_labels(ax: Axes, axis: str = "y", kind: str = "number") -> None:
    """Label the ticks of ``ax``'s ``axis`` with :class:`TickLabels` of ``kind``
    (``number``, ``percent``, ``times``). A log axis is labelled at the decades
    only, or at 1, 2 and 5 of each where its limits (as drawn so far) span less than
    two decades and its ticks are not set (a multiplier from 1 to 8 would show one label): no 10^x mathtext,
    and no minor ticks (the theme draws neither their marks nor their grid; a log
    axis has eight a decade to lay out)."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(TickLabels(kind))
    target.set_minor_formatter(NullFormatter())
    if target.get_scale() == "log":
        target.set_minor_locator(NullLocator())
        low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
        if isinstance(target.get_major_locator(), LogLocator) and 0 < low and high < 100 * low:  # not set ticks
            target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))


def fit_categories(ax: Axes) -> None:
    """Fit the x axis of a panel of categories to them: its limits half a
    category around its own (a seaborn grid gives every panel the limits of
    the one with the most), its labels smaller where they would run into each
    other side by side (their widths measured as drawn, against the room each
    has), and one-line labels that still would tilted."""
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    if not labels:
        return
    ticks = ax.get_xticks()
    ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
    room = 0.9 * ax.get_window_extent().width / len(labels)  # pixels, with a gap between neighbours
    widest = max(t.get_window_extent().width for t in labels)
    if widest > room:
        size = labels[0].get_fontsize()
        ax.tick_params(axis="x", labelsize=SMALL_LABELS)
        if widest * SMALL_LABELS / size > room and not any("\n" in t.get_text() for t in labels):
            for text in ax.get_xticklabels():
                text.set(rotation=30, ha="right", rotation_mode="anchor")


SMALL_LABELS = 7.5  # points: the size of crowded x tick labels


def legend_outside(plot: Axes | sns.FacetGrid, title: str | None = None) -> None:
    """Move the legend of an axes, or of a seaborn grid made with
    ``facet_kws={"legend_out": False}``, to the right of the plot, where it
    covers no bar or value label; ``title`` replaces its title. An axes'
    legend also gets what the cell drew with a label after seaborn made it (an
    ideal line, the 95 % interval bars). (A grid's own ``legend_out`` draws the
    whole figure twice to measure the legend; the saved image is cropped to
    what is drawn instead.)"""
    if isinstance(plot, sns.FacetGrid):
        if plot.legend is not None:
            sns.move_legend(plot, "upper left", bbox_to_anchor=(1.0, 0.97), frameon=False,
                            **({} if title is None else {"title": title}))
        return
    legend = plot.get_legend()
    if legend is None:
        return
    entries = dict(zip((t.get_text() for t in legend.get_texts()), legend.legend_handles))
    for handle, label in zip(*plot.get_legend_handles_labels()):
        entries.setdefault(label, handle)
    plot.legend(entries.values(), entries.keys(), title=legend.get_title().get_text() if title is None else title,
                loc="upper left", bbox_to_anchor=(1.01, 1))


def panels(names: Sequence[object], col_wrap: int, height: float, aspect: float,
           sharey: bool = False) -> dict[str, Axes]:
    """One empty panel (axes) per name, in rows of ``col_wrap``, each ``height`` inches high and ``aspect`` times
    as wide, as seaborn's figure-level grids (``col=…, col_wrap=…``) place them: draw into each with an
    axes-level seaborn function (``sns.lineplot(…, ax=axes[name])``), then call :func:`finish_panels`. Every
    panel keeps its own axes (one y axis for all with ``sharey``). A figure-level grid lays out every panel when
    it is made (empty) and again when finished; these are laid out once, finished."""
    columns = min(col_wrap, len(names))
    rows = -(-len(names) // columns)
    width = height * aspect
    figure, grid = plt.subplots(rows, columns, figsize=(columns * width, rows * height), squeeze=False, sharey=sharey)
    # about where the layout will put them (panels fitting their categories measure the room they have)
    figure.subplots_adjust(left=0.8 / (columns * width), right=1 - 0.1 / (columns * width),
                           bottom=0.7 / (rows * height), top=1 - 0.3 / (rows * height),
                           wspace=0.8 / max(width - 0.8, 0.5), hspace=1.0 / max(height - 1.0, 0.5))
    for ax in grid.flat[len(names):]:
        ax.remove()
    return dict(zip(map(str, names), grid.flat))


def finish_panels(axes: Mapping[str, Axes], xlabel: str | None, ylabel: str | None, legend: str | None = None,
                  title_size: float | None = None) -> None:
    """Finish :func:`panels`: each panel titled with its name (``title_size``: points, else the theme's), the x
    axis labelled ``xlabel`` on the lowest panel of each column and the y axis ``ylabel`` on the left column (as
    a seaborn grid labels them; None: each panel keeps its own), one legend beside the panels with every entry
    of theirs, titled ``legend`` (their own title when None), and the figure laid out once."""
    shown = list(axes.values())
    columns = shown[0].get_gridspec().ncols
    entries: dict[str, Artist] = {}
    title = legend
    for i, (name, ax) in enumerate(axes.items()):
        ax.set_title(name, **({} if title_size is None else {"size": title_size}))
        if xlabel is not None:
            ax.set_xlabel(xlabel if i + columns >= len(shown) else "")
        if ylabel is not None:
            ax.set_ylabel(ylabel if i % columns == 0 else "")
        own = ax.get_legend()
        if own is not None:
            title = own.get_title().get_text() if title is None else title
            for text, handle in zip(own.get_texts(), own.legend_handles):
                entries.setdefault(text.get_text(), handle)
            own.remove()
    shown[0].figure.tight_layout()
    if entries:
        shown[0].figure.legend(entries.values(), entries.keys(), title=title, loc="upper left",
                               bbox_to_anchor=(1.0, 0.97), frameon=False)


def around_values(ax: Axes, values: Sequence[float], include: Sequence[float] = ()) -> None:
    """Limit ``ax``'s y axis to ``values`` and ``include`` (e.g. 0, or 1 for an efficiency) with a
    15 % margin (none below 0 for values that are not negative), so that a 95 % interval much wider
    than the points is cut at the edge instead of squeezing them flat (the tables give every interval
    in full)."""
    finite = [float(v) for v in [*values, *include] if np.isfinite(v)]
    if not finite:
        return
    low, high = min(finite), max(finite)
    margin = 0.15 * (high - low or abs(high) or 1.0)
    ax.set_ylim(low - margin if low < 0 else max(0.0, low - margin), high + margin)


def error_bars(ax: Axes, frame: pd.DataFrame, at: str | None, value: str, low: str, high: str, *,
               horizontal: bool = False, label: str | None = "95 % interval",
               color: str | Sequence[str] = "black") -> None:
    """Draw each row's 95 % interval, columns ``low`` to ``high`` (in the units
    of ``value``), as a bar around ``value`` in ``color``: one colour, or one per
    row (its series' colour, e.g. ``frame["experiment"].map(palette)``); at the
    positions in column ``at``, or at the row's position 0, 1, … (where seaborn
    puts categories) when ``at`` is None; across the plot when ``horizontal``.
    Rows without an interval get none. The legend's entry (``label``) is grey
    when the bars have several colours."""
    known = frame[[low, high]].notna().all(axis=1).to_numpy()
    where = (np.arange(len(frame)) if at is None else frame[at].to_numpy(float))[known]
    centre = frame[value].to_numpy(float)[known]
    spread = np.array([centre - frame[low].to_numpy(float)[known], frame[high].to_numpy(float)[known] - centre])
    colors = np.full(len(frame), color, dtype=object) if isinstance(color, str) else np.asarray(list(color), object)
    colors = colors[known]
    for i, shade in enumerate(dict.fromkeys(colors)):
        rows = colors == shade
        points = (centre[rows], where[rows]) if horizontal else (where[rows], centre[rows])
        bars = {"xerr" if horizontal else "yerr": spread[:, rows]}
        ax.errorbar(*points, **bars, fmt="none", ecolor=shade, capsize=3)
    if label is not None and known.any():
        ax.errorbar([], [], yerr=[], fmt="none", ecolor=colors[0] if len(set(colors)) == 1 else "grey",
                    capsize=3, label=label)
