"""The look shared by every report: seaborn's style (:func:`apply`, once per notebook), one colour per phase of
training wherever it is drawn, and tables as pandas ``Styler`` with headers, number formats and escaping (chart
text is drawn by matplotlib into the image, never as HTML)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial

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
    """One colour of :data:`SERIES` per distinct name, in the order they first appear (again from the first
    after ten)."""
    return {name: SERIES[i % len(SERIES)] for i, name in enumerate(dict.fromkeys(map(str, names)))}


def color_titles(axes: Mapping[str, Axes], colors: Mapping[str, str]) -> None:
    """Write the title of each panel of a grid (``grid.axes_dict``: name → axes) in its name's colour, if any."""
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
      "axes.titley": 1.0, "axes.formatter.useoffset": False, "axes.formatter.limits": (-9, 12),
      "svg.hashsalt": "trainperf"}
"""Matplotlib settings on top of seaborn's ``whitegrid`` theme. Titles sit just above their axes (``axes.titley``:
left to find its place, a title measures every y tick label at each layout); no tick label is written with an
offset or a power of ten over the axis, where it would cover them (``axes.formatter.*``). An SVG's ids are salted
alike in every build (``svg.hashsalt``), so that the same chart is the same text."""


def apply() -> None:
    """Set the reports' seaborn theme and palette for every chart that follows, and seed NumPy's global generator:
    the points a strip plot jitters (seaborn draws their offsets from it) land in the same places in every build."""
    np.random.seed(0)
    sns.set_theme(style="whitegrid", context="notebook", palette=list(SERIES), font_scale=0.9, rc=RC)
    backend = plt.get_backend()
    if backend.endswith("backend_inline"):
        # The inline backend draws each figure after the cell; pyplot's hook would draw it once more, for no screen.
        plt.switch_backend(backend)  # load it now: pyplot installs its hook when it loads the backend
        plt.uninstall_repl_displayhook()
        # SVG with text as text: smaller than PNG, sharp at any zoom, quicker to make (no glyph rasterized).
        # Imported here: loaded before the kernel's shell exists, the backend would not hook into it.
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg", metadata={"Date": None})  # no time written in: the same chart, the same SVG


Format = Callable[[object], str]
"""A cell format: a value (missing ones included) as text."""


def _formatted(fmt: Format | None, **labels: str) -> dict[str, tuple[str, Format | None]]:
    """:data:`COLUMNS` entries of the columns ``labels`` names, each with its header and the cell format ``fmt``."""
    return {column: (label, fmt) for column, label in labels.items()}


COLUMNS: dict[str, tuple[str, Format | None]] = {
    **_formatted(None, experiment="Experiment", run_id="Run", configuration="Configuration", platform="Platform",
        platform_key="Platform", model="Model", precision="Precision", step_time_basis="Step times from",
        scaling_type="Scaling", experiment_scaling="Experiment", remark="Remark", scaling_basis="Basis", fits="Fits",
        flops_convention_used="FLOPs formula", fastest="Fastest per device", runner_up="Runner-up", verdict="Verdict",
        evidence="Tested by", also="Their best configurations also differ in", amdahl_band="Amdahl: 95 % band",
        usl_band="USL: 95 % band", basis="Basis", measured="Devices measured", interval="95 % interval",
        efficiency_interval="Efficiency, 95 % interval", multiplier_interval="Multiplier, 95 % interval",
        vs_previous="Versus previous", warmup_rule="Warm-up rule", node="Node", straggler="Straggler", law="Law",
        claim="Claim", printed="Printed", trainperf_figure="trainperf", why="Why", source="Source", figure="Figure",
        note="Why a value is empty or doubtful", examples="For example", where="Input", reason="Reason",
        peak_source="Source", side="Side", phase="Phase", marks="Marks", unit="Unit", oversubscribed="Oversubscribed",
        loaded="Loaded", metric="Metric", moved="Moved", what_to_change="Change", based_on="Evidence",
        gain_of="Gain of", saved_per="Per", confidence="Confidence", applies_to="Applies to"),
    **_formatted(fmt_int, gpus="Devices", ranks="Ranks", tokens="Total tokens", samples="Total samples",
        tokens_per_s="Tokens/s", samples_per_s="Samples/s", tokens_per_s_per_gpu="Tokens/s per device",
        samples_per_s_per_gpu="Samples/s per device", micro_batch_size="Micro-batch", grad_accum_steps="Accumulation",
        per_device_batch="Samples per device per step", global_batch_size="Samples per optimizer step",
        slowest_rank="Slowest rank", configs="Configs", seq_len="Sequence length", fastest_rate="Tokens/s per device",
        runner_up_rate="Runner-up tokens/s per device", devices="Devices", nodes="Nodes",
        tokens_per_s_low="Tokens/s, 95 % interval low", tokens_per_s_high="Tokens/s, 95 % interval high",
        samples_per_s_low="Samples/s, 95 % interval low", samples_per_s_high="Samples/s, 95 % interval high",
        rank="Rank", warmup_steps="Warm-up steps", steps="Steps", runs="Runs",
        window_rate="Rate with evaluation (per s)", training_rate="Training only (per s)",
        tokens_per_step="Tokens per step", samples_per_step="Samples per step", cpu_cores="Cores",
        repeats_needed="Runs a side that would tell"),
    **_formatted(fmt_seconds, elapsed_s="Elapsed", time_to_train_s="Time to train: training loop",
        total_time_s="Time to train: in all, start-up included", total_s="Total, start-up included",
        wall_s="Wall clock", productive_s="Productive steps", warmup_excess_s="Warm-up beyond steady steps",
        startup_s="Start-up", wait_outside_s="Waiting for another rank", unaccounted_s="In no step",
        after_steps_s="After the last step",
        seconds_saved="Time saved"),
    **_formatted(partial(fmt_num, digits=4), step_time_s="Time per step, mean", step_time_p50_s="Step time, median",
        step_time_p95_s="Step time, 95th percentile"),
    **_formatted(fmt_times, ideal="Ideal", scaling_multiplier="Multiplier", compute_comm_ratio="Compute / comm.",
        imbalance="Imbalance (slowest / fastest)", amdahl="Amdahl: multiplier", usl="USL: multiplier",
        multiplier="Multiplier", low="95 % band, low", high="95 % band, high", naive="Straight line"),
    **_formatted(fmt_pct, scaling_efficiency="Efficiency", gain="Gain over previous", comm_overhead="Comm. overhead",
        mean_understates="Mean over ranks understates elapsed by", cost_efficiency="Cost efficiency",
        mfu="MFU (dense peak)", hfu="HFU", margin="Margin", fastest_mfu="Fastest's MFU", runner_up_mfu="Runner-up MFU",
        relative="Relative to the fastest", efficiency_low="Efficiency, 95 % interval low",
        efficiency_high="Efficiency, 95 % interval high", goodput="Goodput",
        difference="Source − trainperf (relative to trainperf)", evaluation_share="Evaluation, share of the time",
        expected_gain="Expected gain"),
    **_formatted(fmt_sig, serial_fraction="Serial fraction (Karp–Flatt)", tflops_total="TFLOP/s total",
        step_s="Step, median", comm_wait_s="Communication wait per step", busy_s="Busy per step",
        wait_gap_s="Waits less than the other ranks by", reported="Source printed", trainperf="trainperf",
        baseline_s="Baseline", candidate_s="Candidate", delta_s="Change", low_s="95 % interval, low",
        high_s="95 % interval, high", baseline="Baseline", candidate="Candidate"),
    **_formatted(fmt_num, compute_s="Compute", comm_s="Communication", comm_exposed_s="Exposed comm.", data_s="Data",
        slowest_wait_s="Waiting for the slowest rank", slowest_s="Slowest", mean_s="Mean over ranks",
        fastest_s="Fastest", peak_memory_gb="Peak allocated", reserved_memory_gb="Peak reserved",
        host_memory_gb="Host resident", device_memory_gb="Device memory", memory_headroom_gb="Headroom",
        gpu_hours="Device-hours", beyond_fastest_s="Longer than the fastest rank", evaluation_s="Evaluation",
        load_average_1min="Load average at start (1 min)"),
    **_formatted(fmt_usd, price_per_gpu_hour="Price ($/device-h)", cost_usd="Cost",
        usd_per_million_tokens="$ per million tokens", usd_per_million_samples="$ per million samples"),
    **_formatted(fmt_big, tokens_per_day="Tokens per day", samples_per_day="Samples per day"),
    **_formatted(partial(fmt_sig, digits=4), tflops_per_gpu="TFLOP/s per device",
        peak_tflops_per_gpu="Dense peak (TFLOP/s per device)"),
    **_formatted(partial(fmt_pct, signed=True), delta_pct="Change, of a baseline step",
        relative_change="Change, of its own baseline", change="Change", change_low="Change, 95 % interval low",
        change_high="Change, 95 % interval high"),
    **_formatted(partial(fmt_pct, digits=0), min_effect="Minimum effect",
        baseline_slowest="Slowest rank of a step (baseline)", candidate_slowest="Slowest rank of a step (candidate)"),
}
"""Header and cell format of each column a report table may show (one not listed keeps its name and shows
numbers to 3 significant figures); a header gets the unit its column's name declares (:func:`trainperf.schema.unit`:
``(s)``, ``(GiB)``) unless its format writes it (:func:`~trainperf.report.html.fmt_seconds`)."""


def phase_order(frame: pd.DataFrame) -> list[str]:
    """The phases present in ``frame['phase']``, in the order of :data:`PHASE_COLORS` (the order of a step)."""
    present = set(frame["phase"])
    return [p for p in PHASE_COLORS if p in present]


def table(frame: pd.DataFrame, caption: str = "", highlight: Sequence[bool] | None = None,
          empty: str = "") -> Styler | Html:
    """``frame`` as a report table: headers and formats from :data:`COLUMNS`, strings escaped, no index, rows
    where ``highlight`` is true in bold green; an empty frame as the sentence ``empty`` (nothing without one)."""
    if frame.empty:
        return paragraph(empty) if empty else Html("", "")
    headers, formats = {}, {}
    for column in frame.columns:
        name = str(column)
        outside = name.startswith(OUTSIDE_PREFIX) and name.endswith("_s")  # outside_<phase>_s: seconds
        label, fmt = COLUMNS.get(column) or ((f"{name[len(OUTSIDE_PREFIX):-2]} (outside the steps)", fmt_seconds)
                                             if outside else (name, None))
        shown = unit(name) if column in COLUMNS and fmt is not fmt_seconds else ""
        headers[column] = f"{label} ({shown})" if shown else label
        if fmt is None:  # true/false as yes/no, numbers to 3 significant figures (missing cells: na_rep)
            fmt = ((lambda x: "yes" if x else "no") if pd.api.types.is_bool_dtype(frame[column])
                   else fmt_sig if pd.api.types.is_numeric_dtype(frame[column]) else str)
        formats[headers[column]] = fmt
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


class TickLabels(Formatter):
    """Tick labels with thousands separators (``kind="number"``), as percent of a fraction (``"percent"``) or as
    a ratio (``"times"``), with the decimals of the step between ticks (of the value itself on a log axis)."""

    def __init__(self, kind: str = "number") -> None:
        self.kind, self.log, self.step = kind, False, 1.0

    def set_locs(self, locs: Sequence[float]) -> None:
        super().set_locs(locs)
        self.log = self.axis is not None and self.axis.get_scale() == "log"
        finite = [t for t in locs if np.isfinite(t)]
        self.step = min((abs(b - a) for a, b in zip(finite, finite[1:]) if b != a), default=1.0)

    def __call__(self, value: float, pos: int | None = None) -> str:
        scale, suffix = {"percent": (100, " %"), "times": (1, "×")}.get(self.kind, (1, ""))
        step = (abs(value) if self.log else self.step) * scale
        decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
        return f"{value * scale:,.{decimals}f}{suffix}"


def tick_labels(ax: Axes, axis: str = "y", kind: str = "number") -> None:
    """Label the ticks of ``ax``'s ``axis`` with :class:`TickLabels` of ``kind``. A log axis gets no minor ticks
    (the theme draws neither their marks nor their grid) and labels at the decades, or at 1, 2 and 5 of each where
    its limits span less than two decades and its ticks are not set (1 to 8 would show one label)."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(TickLabels(kind))
    target.set_minor_formatter(NullFormatter())
    if target.get_scale() == "log":
        target.set_minor_locator(NullLocator())
        low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
        if isinstance(target.get_major_locator(), LogLocator) and 0 < low and high < 100 * low:  # not set ticks
            target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))


def fit_categories(ax: Axes) -> None:
    """Fit the x axis of a panel of categories to them: limits half a category around its own (a seaborn grid
    gives every panel those of the one with the most), labels smaller where wider than their room, tilted where
    one-line labels still are."""
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
    """Move the legend of an axes, or of a seaborn grid made with ``facet_kws={"legend_out": False}`` (a
    grid's own ``legend_out`` draws the whole figure twice to measure it), to the right of the plot, where it covers
    nothing; ``title`` replaces its title. An axes' legend also gets what was drawn with a label after seaborn made
    it (an ideal line, the 95 % interval bars)."""
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
    """One empty panel (axes) per name, in rows of ``col_wrap``, each ``height`` inches high and ``aspect``
    times as wide, placed as seaborn's figure-level grids place them (one y axis for all with ``sharey``), for
    axes-level seaborn functions (``ax=axes[name]``) and then :func:`finish_panels`; laid out once, finished."""
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
    """Finish :func:`panels`: each titled with its name (``title_size``: points), ``xlabel`` on the lowest panel
    of each column and ``ylabel`` on the left column, as a seaborn grid labels them (None: each keeps its own), one
    legend beside them with all their entries, titled ``legend`` (None: their own title), and one layout."""
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
        if (own := ax.get_legend()) is not None:
            title = own.get_title().get_text() if title is None else title
            for text, handle in zip(own.get_texts(), own.legend_handles):
                entries.setdefault(text.get_text(), handle)
            own.remove()
    shown[0].figure.tight_layout()
    if entries:
        shown[0].figure.legend(entries.values(), entries.keys(), title=title, loc="upper left",
                               bbox_to_anchor=(1.0, 0.97), frameon=False)


def around_values(ax: Axes, values: Sequence[float], include: Sequence[float] = ()) -> None:
    """Limit ``ax``'s y axis to ``values`` and ``include`` (e.g. 0) with a 15 % margin (none below 0 for values
    that are not): an interval much wider than the points is cut at the edge instead of squeezing them flat."""
    finite = [float(v) for v in [*values, *include] if np.isfinite(v)]
    if not finite:
        return
    low, high = min(finite), max(finite)
    margin = 0.15 * (high - low or abs(high) or 1.0)
    ax.set_ylim(low - margin if low < 0 else max(0.0, low - margin), high + margin)


def error_bars(ax: Axes, frame: pd.DataFrame, at: str | None, value: str, low: str, high: str, *,
               horizontal: bool = False, label: str | None = "95 % interval",
               color: str | Sequence[str] = "black") -> None:
    """Draw each row's 95 % interval, columns ``low`` to ``high``, as a bar around ``value`` at the positions in
    column ``at`` (None: 0, 1, …, where seaborn puts categories), across the plot when ``horizontal``, in ``color``
    (one, or one per row); the legend's entry (``label``) is grey when the bars have several colours."""
    known = frame[[low, high]].notna().all(axis=1).to_numpy()
    where = (np.arange(len(frame)) if at is None else frame[at].to_numpy(float))[known]
    centre = frame[value].to_numpy(float)[known]
    spread = np.array([centre - frame[low].to_numpy(float)[known], frame[high].to_numpy(float)[known] - centre])
    colors = (np.full(len(frame), color, dtype=object) if isinstance(color, str)
              else np.asarray(list(color), object))[known]
    for shade in dict.fromkeys(colors):
        rows = colors == shade
        points = (centre[rows], where[rows]) if horizontal else (where[rows], centre[rows])
        bars = {"xerr" if horizontal else "yerr": spread[:, rows]}
        ax.errorbar(*points, **bars, fmt="none", ecolor=shade, capsize=3)
    if label is not None and known.any():
        ax.errorbar([], [], yerr=[], fmt="none", ecolor=colors[0] if len(set(colors)) == 1 else "grey",
                    capsize=3, label=label)
