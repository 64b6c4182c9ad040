"""The analysis behind the reports, on its frames and sentences: numbers
against independent figures (the seed reports in ../shared/seeds, the
reference tables in data/reference, hand calculations written next to
them), and the look shared by every chart and table (theme).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainperf.report import html, page, platforms, theme
from trainperf.report.page import NotApplicable
from trainperf.report.page import InputError, open_runs, open_steps
from test_batch_size_page import MINGPT, measured_window

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "data" / "reference"
RUNS = ROOT / "data" / "runs"
MEASURED = ROOT / "tests" / "data" / "measured_runs"  # an earlier sweep, kept as measured (see its README)
TINY = Path(__file__).resolve().parent / "data" / "report_tiny"
XSS = "<script>alert(1)</script>"


def _table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def _write(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


# --- theme ------------------------------------------------------------------------------

def test_every_phase_has_its_own_colour_everywhere():
    from trainperf.report.phases import IMBALANCE, OTHER, PHASE_LABELS

    phases = [*PHASE_LABELS.values(), OTHER, IMBALANCE]
    assert set(theme.PHASE_COLORS) == set(phases)
    colours = [theme.PHASE_COLORS[p].lower() for p in phases]
    assert len(set(colours)) == len(colours), "two phases share a colour"
    # the colour is looked up by the phase's own name, not by position or first word
    assert theme.PHASE_COLORS["optimizer"] != theme.PHASE_COLORS["communication (exposed)"]
    assert theme.PHASE_COLORS["communication"] != theme.PHASE_COLORS["communication (exposed)"]
    frame = pd.DataFrame({"phase": ["waiting for the slowest rank", "backward", "forward", "backward"]})
    assert theme.phase_order(frame) == ["forward", "backward", "waiting for the slowest rank"]


def test_narrow_ranges_get_distinct_tick_labels():
    from matplotlib.figure import Figure

    def drawn(axis):
        ax.figure.draw_without_rendering()
        low, high = sorted(axis.get_view_interval())
        return [t.get_text() for t in axis.get_ticklabels() if low <= t.get_position()[axis is ax.yaxis] <= high]

    ax = Figure().subplots()
    ax.plot([0, 1], [1.3401, 1.3449])
    theme.tick_labels(ax)
    labels = drawn(ax.yaxis)
    assert len(labels) > 2 and len(set(labels)) == len(labels), labels
    theme.tick_labels(ax, "x", kind="percent")
    assert {"0 %", "20 %", "100 %"} <= set(drawn(ax.xaxis))
    ax.set_yscale("log")
    ax.set_ylim(1, 1000)
    theme.tick_labels(ax)
    assert drawn(ax.yaxis) == ["1", "10", "100", "1,000"]
    assert len(ax.yaxis.get_minorticklocs()) == 0  # invisible in the theme, and costly to lay out
    ax.set_ylim(1, 8)  # a scaling multiplier up to 8 devices: within a decade, 1, 2 and 5 are labelled
    theme.tick_labels(ax)
    assert drawn(ax.yaxis) == ["1", "2", "5"]



def test_each_panel_of_categories_is_fitted_to_its_own():
    import seaborn as sns

    theme.apply()
    wide = ["16 × 64", "32 × 32", "64 × 16", "128 × 8", "256 × 4", "512 × 2", "1,024 × 1"]
    frame = pd.DataFrame({"experiment": ["seven"] * 7 + ["five"] * 5, "configuration": wide + wide[:5],
                          "seconds": 1.0, "phase": "forward"})
    grid = sns.displot(frame, x="configuration", weights="seconds", hue="phase", col="experiment", col_wrap=2,
                       discrete=True, multiple="stack", height=3.8, aspect=1.3, facet_kws={"sharex": False})
    for ax in grid.axes.flat:
        theme.fit_categories(ax)
    seven, five = grid.axes_dict["seven"], grid.axes_dict["five"]
    # seaborn gives both panels the limits of seven categories; each now spans its own, half a category around
    assert seven.get_xlim() == pytest.approx((-0.5, 6.5)) and five.get_xlim() == pytest.approx((-0.5, 4.5))
    # seven labels of up to 9 characters do not fit side by side in a 3.8 in x 1.3 panel at the theme's
    # tick size (seaborn's notebook context, 11 pt x font_scale 0.9): they are made smaller, and then fit
    # without tilting; five do fit and keep their size
    import matplotlib as mpl

    assert {t.get_fontsize() for t in seven.get_xticklabels()} == {theme.SMALL_LABELS}
    assert {t.get_fontsize() for t in five.get_xticklabels()} == {mpl.rcParams["xtick.labelsize"]} == {11 * 0.9}
    assert {t.get_rotation() for ax in (seven, five) for t in ax.get_xticklabels()} == {0.0}
    extents = [t.get_window_extent() for t in seven.get_xticklabels()]
    assert all(a.x1 < b.x0 for a, b in zip(extents, extents[1:])), "neighbouring labels overlap"
    import matplotlib.pyplot as plt

    plt.close(grid.figure)

def test_legend_outside_covers_no_bar():
    import seaborn as sns
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    sns.barplot(pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0], "h": ["p", "q"]}), x="x", y="y", hue="h", ax=ax)
    theme.legend_outside(ax)
    ax.figure.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1



def test_legend_outside_keeps_what_the_cell_drew_after_seaborn():
    import seaborn as sns
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    frame = pd.DataFrame({"ideal": [1, 2, 1, 2], "multiplier": [1.0, 1.8, 1.0, 1.5], "low": [np.nan, 1.6, np.nan, 1.2],
                          "high": [np.nan, 2.0, np.nan, 1.9], "experiment": ["a", "a", "b", "b"]})
    sns.lineplot(frame, x="ideal", y="multiplier", hue="experiment", marker="o", ax=ax)
    ax.plot([1, 2], [1, 2], ":", label="ideal")
    theme.error_bars(ax, frame, "ideal", "multiplier", "low", "high")
    theme.legend_outside(ax)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", "ideal", "95 % interval"]
    assert legend.get_title().get_text() == "experiment"


def test_around_values_keeps_the_points_in_view():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    ax.errorbar([1, 2], [0.9, 0.5], yerr=[[0.1, 0.3], [0.1, 2.3]])  # an interval up to 280 %
    theme.around_values(ax, [1.0, 0.9, 0.5], include=(0, 1))
    assert ax.get_ylim() == pytest.approx((0.0, 1.15))  # 0 to 1, 15 % of that above, none below 0
    theme.around_values(ax, [-0.1, 0.5])
    assert ax.get_ylim() == pytest.approx((-0.19, 0.59))  # a negative serial fraction: the margin on both sides

def test_legend_outside_moves_a_grids_legend_beside_its_facets():
    import seaborn as sns

    frame = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1.0, 2.0, 3.0, 4.0], "h": ["p", "q", "p", "q"],
                          "c": ["one", "one", "two", "two"]})
    grid = sns.relplot(frame, x="x", y="y", hue="h", col="c", facet_kws={"legend_out": False})
    theme.legend_outside(grid)
    grid.figure.canvas.draw()
    legend = grid.legend.get_window_extent()
    assert grid.legend in grid.figure.legends and [t.get_text() for t in grid.legend.get_texts()] == ["p", "q"]
    assert grid.legend.get_title().get_text() == "h"
    assert all(legend.x0 >= ax.get_window_extent().x1 for ax in grid.axes.flat)


def test_panels_are_labelled_as_a_seaborn_grid_with_one_legend_beside_them():
    import matplotlib.pyplot as plt
    import seaborn as sns

    theme.apply()
    frame = pd.DataFrame({"run": ["a", "a", "b", "c"], "x": [1, 2, 1, 1], "y": [1.0, 2.0, 3.0, 4.0],
                          "h": ["p", "p", "q", "p"]})
    axes = theme.panels(frame["run"].unique(), col_wrap=2, height=2.0, aspect=1.5)
    for name, ax in axes.items():
        sns.scatterplot(frame[frame["run"] == name], x="x", y="y", hue="h", palette={"p": "red", "q": "blue"}, ax=ax)
    theme.finish_panels(axes, "steps", "seconds", legend="kind")
    a, b, c = axes.values()
    figure = a.figure
    assert tuple(figure.get_size_inches()) == pytest.approx((2 * 3.0, 2 * 2.0))  # 2 columns, 2 rows
    assert [ax.get_title(loc="left") for ax in (a, b, c)] == ["a", "b", "c"]
    # as seaborn labels a wrapped grid: x under the lowest panel of each column (none is under b), y on the left
    assert [ax.get_xlabel() for ax in (a, b, c)] == ["", "steps", "steps"]
    assert [ax.get_ylabel() for ax in (a, b, c)] == ["seconds", "", "seconds"]
    legend, = figure.legends  # the panels' own legends, each with what it drew, become one
    assert [t.get_text() for t in legend.get_texts()] == ["p", "q"] and legend.get_title().get_text() == "kind"
    assert all(ax.get_legend() is None for ax in (a, b, c))
    figure.canvas.draw()
    assert all(legend.get_window_extent().x0 >= ax.get_window_extent().x1 for ax in (a, b, c))
    plt.close(figure)


def test_inline_charts_are_drawn_once_for_their_image_only():
    """The inline backend draws a chart for its PNG; pyplot's own after-cell redraw is switched off."""
    script = """
import traceback
from IPython.core.interactiveshell import InteractiveShell
from matplotlib.figure import Figure
shell = InteractiveShell.instance()
shell.display_formatter.active_types.append("image/png")
draws, original = [], Figure.draw
def draw(self, renderer):
    draws.append(any(frame.name == "print_figure" for frame in traceback.extract_stack()))
    return original(self, renderer)
Figure.draw = draw
shell.run_cell("from trainperf.report import theme; theme.apply()")
shell.run_cell("import seaborn as sns; sns.lineplot(x=[1, 2], y=[3, 4])")
print(draws)
"""
    env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    draws = eval(out.strip().splitlines()[-1])
    assert draws and all(draws), draws


def test_tables_escape_strings_from_data():
    frame = pd.DataFrame({"platform": [XSS], "tokens_per_s": [122_599.14], "mfu": [0.4544]})
    out = theme.table(frame, caption=XSS).to_html()
    assert "<script" not in out and out.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 2
    assert ">122,599<" in out and ">45.4 %<" in out and ">Tokens/s<" in out
    assert theme.table(frame.iloc[0:0], empty="Nothing.").html == "<p>Nothing.</p>"
    banner = html.headline(f"{XSS} wins", [("1", XSS)])
    assert "<script" not in banner.html and banner.facts == {"headline": f"{XSS} wins"}


def test_number_formats():
    assert html.fmt_int(700_969.77) == "700,970"
    assert html.fmt_pct(0.4544) == "45.4 %"
    assert (html.fmt_pct(0.053, signed=True), html.fmt_pct(-0.091, signed=True)) == ("+5.3 %", "-9.1 %")
    assert html.fmt_pct(-0.00004, signed=True) == html.fmt_pct(-0.00004) == "0.0 %"  # never -0.0 %
    assert html.fmt_times(1384.64 / 806.75) == "1.72×"
    assert html.fmt_seconds(2_592_000) == "2,592,000 s (720.0 h)"
    assert html.fmt_big(7.6e9) == "7.60 billion"
    assert html.fmt_short(1.76e12) == "1.76 T"
    assert html.fmt_short(5e5) == "500 k" and html.fmt_short(999) == "999" and html.fmt_big(123_456) == "123,456"
    assert [html.fmt_int(x) for x in (float("nan"), np.float32("nan"), pd.NA, pd.NaT, None)] == ["–"] * 5
    assert [html.count(n, noun) for n, noun in ((1, "report"), (2, "report"), (1024, "process"))] == [
        "1 report", "2 reports", "1,024 processes"]
    assert (html.first_of(list("abcd"), 3), html.first_of(list("abcd"), 3, total=True), html.first_of(["a"], 3)) == (
        "a, b, c, …", "a, b, c, … (4 in all)", "a")


def test_table_cells_without_a_value_show_a_dash():
    frame = pd.DataFrame({"platform": ["H100", None], "model": pd.array(["a", pd.NA], dtype="string"),
                          "tokens_per_s": [1.0, np.nan], "extra_ratio": [0.5, np.nan]})
    cells = re.findall(r"<td[^>]*>(.*?)</td>", theme.table(frame).to_html())
    assert cells == ["H100", "a", "1", "0.500", "–", "–", "–", "–"]


# --- inputs and data quality -------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"data": ["/no/such/file.csv"]}, "no such file or folder"),
    ({"experiments": ["nope"]}, "experiment 'nope' has no runs"),
    ({"platforms": ["NVIDIA X"]}, "platform 'NVIDIA X' has no runs"),
    ({"precision": "fp9"}, "unknown precision 'fp9'"),
    ({"baseline": "nope"}, "baseline run 'nope'"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    args = {"data": [str(TINY / "runs.csv")], **kwargs}
    with pytest.raises(InputError, match=message) as caught:
        open_runs(args.pop("data"), **args)
    assert caught.value._render_traceback_() == [f"InputError: {caught.value}"]


def test_unknown_experiment_error_names_a_few_experiments_only():
    with pytest.raises(InputError) as caught:
        open_runs([str(REFERENCE / "llmfoundry_mpt.csv")], experiments=["nope"])
    message = str(caught.value)
    assert re.search(r", … \(\d+ in all\) \(parameter experiments\)$", message), message
    assert message.count("mpt-") == 12


def test_header_names_every_platform_and_model_unknown_included():
    # the tiny fixture: 10 runs on three named platforms, 1 with an XSS name; seed 000 names none
    runs = open_runs([str(TINY / "runs.csv"), str(REFERENCE / "seed_000_throughput.csv")])
    text = page.header("T", runs).text
    assert "platforms: NVIDIA H100 SXM, NVIDIA A100 SXM 80GB, <script>alert(1)</script>, unknown" in text
    assert "models: tiny-125m, tiny-1b, unknown" in text


def test_one_batch_text_for_sweeps_and_configuration_labels():
    from trainperf.report.run_labels import batch, label

    run = pd.Series({"run_id": "r", "gpus": 4, "micro_batch_size": 16.0, "grad_accum_steps": 64.0})
    assert (batch(run), batch(run, compact=True)) == ("micro-batch 16 × 64 accumulation", "16 × 64")
    assert label(run) == "4 GPUs, micro-batch 16 × 64 accum."
    unknown = run.drop("grad_accum_steps")
    assert (batch(unknown), batch(unknown, compact=True), label(unknown)) == (
        "micro-batch 16", "16 × ?", "4 GPUs, micro-batch 16")



def test_chart_labels_share_a_configuration_across_its_repeats_only():
    from trainperf.report.run_labels import labels

    def run(run_id, gpus, micro_batch, seq_len=1024):
        return {"run_id": run_id, "experiment": "e", "gpus": gpus, "nodes": 1, "micro_batch_size": micro_batch,
                "grad_accum_steps": 1, "seq_len": seq_len}

    repeats = pd.DataFrame([run("a1", 1, 16), run("a2", 1, 16), run("b1", 2, 8), run("b2", 2, 8)])
    # the node count and the accumulation are the same in every run: left out; repeats share their label
    assert labels(repeats, compact=True) == ["1 GPU\nmicro-batch 16"] * 2 + ["2 GPUs\nmicro-batch 8"] * 2
    assert labels(repeats) == ["a1", "a2", "b1", "b2"]  # a table's rows stay apart
    # two configurations a label cannot tell apart (the sequence length is not in it) keep their run ids
    different = pd.DataFrame([run("a1", 1, 16), run("a2", 1, 16, seq_len=2048), run("b1", 2, 8)])
    assert labels(different, compact=True) == ["a1", "a2", "b1"]
    # a sweep on one device: the device count is the same in every run, the batch is what tells them apart
    sweep = pd.DataFrame([{**run(f"m{m}", 1, m), "grad_accum_steps": 16 // m} for m in (1, 16)])
    assert labels(sweep, compact=True) == ["micro-batch 1 × 16 accum.", "micro-batch 16 × 1 accum."]


def test_scaling_breakdown_averages_the_repeats_of_a_configuration():
    from trainperf.report import scaling

    runs = scaling.studies(open_runs([str(RUNS / "bench-cpu-small-fp32-strong-scaling")]))
    breakdown = scaling.analyse(runs).phases.set_index(["configuration", "phase"])
    assert list(dict.fromkeys(breakdown.index.get_level_values(0))) == [
        "1 process\nmicro-batch 16", "2 processes\nmicro-batch 8", "4 processes\nmicro-batch 4"]
    # per optimizer step: each repeat's backward seconds / its steps, then the mean of the two repeats
    two = runs[runs["gpus"] == 2]
    expected = (two["backward_s"] / two["steps"]).mean()
    assert breakdown.loc[("2 processes\nmicro-batch 8", "backward"), "seconds"] == pytest.approx(expected)

def test_source_figures_differ_only_beyond_their_printed_precision(tmp_path):
    # a source printing whole samples/s: 0 for trainperf's 0.56 is its rounding, not a difference
    path = _write(tmp_path, [
        {"run_id": "a", "experiment": "e", "gpus": 1, "samples": 56, "elapsed_s": 100.0, "reported_samples_per_s": 0},
        {"run_id": "b", "experiment": "e", "gpus": 1, "samples": 400, "elapsed_s": 100.0, "reported_samples_per_s": 2},
    ])
    differences = page.reported_differences(open_runs(path))
    # run b: source 2 against 400 / 100 s = 4 samples/s: (2 - 4) / 4 = -50 %, beyond one unit of the last digit
    assert differences[["run_id", "difference"]].to_dict("records") == [{"run_id": "b", "difference": -0.5}]


def test_sparse_peak_differences_have_one_sign():
    # seed 001 printed MFU 22.7 % for H100 + Qwen against the sparse 1979; trainperf: 449.6 / 989.5 = 45.4 %
    runs = open_runs([str(REFERENCE / "seed_001_platforms.csv")])
    differences = page.reported_differences(runs)
    mfu = differences[(differences["figure"] == "mfu") & (differences["run_id"] == "seed001-h100-qwen2.5-7b")]
    assert mfu["difference"].iloc[0] == pytest.approx((0.227 - 0.4544) / 0.4544, abs=2e-3)
    summary = page.difference_summary(differences).set_index("figure")
    assert summary.loc["mfu", "difference"] < 0 and summary.loc["peak_tflops_per_gpu", "difference"] > 0  # 1979 vs 989.5


def test_conventions_count_only_runs_whose_flops_were_computed(tmp_path):
    path = _write(tmp_path, [
        {"run_id": "a", "experiment": "e", "gpus": 1, "tokens": 1000, "elapsed_s": 1.0, "n_params": 1e6,
         "flops_convention": "6n"},
        {"run_id": "b", "experiment": "e", "gpus": 1, "tokens": 1000, "elapsed_s": 1.0, "flops_convention": "6n"},
    ])
    runs = open_runs(path)
    line = next(c for c in page.conventions(runs) if c.startswith("FLOPs per token, 6n"))
    assert line.endswith("(1 run; not computed for 1, see “Empty or doubtful values”)")
    assert "flops_per_token: 6n needs n_params" in set(page.note_counts(runs)["note"])


def test_step_time_anomalies_and_the_steps_set_aside_are_in_the_data_quality_section(tmp_path):
    """A NeMo log whose step 6 took -12.71 s after 13.75 s (two steps of about 0.5 s) and whose step 9 took
    -0.3 s after 0.2 s (no time at all for both: set aside): the page's "Empty or doubtful values" names both,
    and says the throughput leaves 1 step out."""
    times = [2.0, 0.5, 0.5, 0.5, 0.5, 13.75, -12.71, 0.5, 0.2, -0.3, 0.5]
    log = tmp_path / "nemo.log"
    log.write_text("".join(f"Training epoch 0, iteration {s}/100 | global_batch_size: 8 | global_step: {s} | "
                           f"train_step_timing in s: {t}\n" for s, t in enumerate(times)))
    notes = page.note_counts(open_runs([str(log)]))
    shown = dict(zip(notes["note"], notes["runs"]))
    assert shown["throughput: measured without 1 step(s) whose times could not be used (extra_steps_set_aside)"] == 1
    assert shown["step times: step 6: a step time of -12.71 s, joined with step 5 (13.75 s) into 1.04 s for both"] == 1
    assert shown["step times: step 9: a step time of -0.3 s that step 8 (0.2 s) does not make up for, set aside"] == 1


def test_reports_without_scaling_leave_out_scaling_notes(tmp_path):
    # b has no token count in an experiment compared by tokens/s: a scaling note
    path = _write(tmp_path, [{"run_id": "a", "experiment": "e", "gpus": 1, "tokens": 1000, "elapsed_s": 1.0},
                             {"run_id": "b", "experiment": "e", "gpus": 2, "elapsed_s": 1.0}])
    runs = open_runs(path)
    assert any(n.startswith("scaling:") for n in page.note_counts(runs)["note"])
    assert not any(n.startswith("scaling:") for n in page.note_counts(runs, scaling=False)["note"])


def test_run_folders_given_as_data_give_per_rank_steps():
    from trainperf.report.scaling import studies
    from trainperf.report.scaling.ranks import ranks

    folder = MEASURED / "bench-cpu-small-fp32-strong-scaling"
    runs = studies(open_runs([str(folder)]))
    per_rank = ranks(runs, open_steps([str(folder)], runs))
    # the 2- and 4-process runs of the study: one row per rank
    assert per_rank.groupby("run_id")["rank"].nunique().to_dict() == {
        "bench-cpu-small-fp32-strong-scaling-p2": 2, "bench-cpu-small-fp32-strong-scaling-p4": 4}


# --- throughput and batch size ---------------------------------------------------------------

def test_efficiency_only_for_experiments_at_several_device_counts():
    from trainperf.report.throughput import measured, table

    runs = measured(open_runs([str(REFERENCE / "seed_000_throughput.csv"), str(RUNS)],
                              experiments=["seed000-scaling", "bench-cpu-small-fp32-batch-size"]))
    frame = table(runs).set_index("configuration")
    assert frame.loc["4 GPUs across 1 node", "scaling_efficiency"] == pytest.approx(30_650 / 34_086, abs=1e-4)
    assert frame.loc[frame["experiment"] == "bench-cpu-small-fp32-batch-size", "scaling_efficiency"].isna().all()


def test_throughput_of_seed_000_per_configuration_and_its_first_step_across_nodes():
    """Seed 000's table: per GPU 34,086 (1 GPU), 30,650 (4 on 1 node), 25,739 (8 on 2 nodes), 23,411 (16 on 4),
    21,905 (32 on 8) tokens/s. Efficiency 89.9 %, 75.5 %, 68.7 %, 64.3 %: the drops are 10.1, 14.4, 6.8 and 4.4
    points, the largest at 4 → 8 GPUs, where the job first spans two nodes (4 GPUs each)."""
    from trainperf.report.throughput import NO_STEPS, measured, node_boundaries, node_notes, table

    frame = table(measured(open_runs([str(REFERENCE / "seed_000_throughput.csv")])))
    assert frame["gpus"].tolist() == [1, 4, 8, 16, 32] and frame["runs"].tolist() == [1] * 5
    # no per-step times: the mean step time is elapsed / steps (991.38 s / 1,500 steps), and the page says so
    assert frame["step_time_s"].iloc[0] == pytest.approx(991.38 / 1500) and frame["step_time_p50_s"].isna().all()
    assert set(frame["step_time_basis"]) == {NO_STEPS}
    (crossing,) = node_boundaries(frame).to_dict("records")
    assert [crossing[k] for k in ("from_gpus", "from_nodes", "to_gpus", "to_nodes", "per_node")] == [4, 1, 8, 2, 4]
    assert crossing["drop"] == pytest.approx(30_650 / 34_086 - 25_739 / 34_086, abs=1e-4) and crossing["most"]
    assert frame.set_index("gpus")["remark"].to_dict() == {
        1: "", 4: "", 8: "first step across nodes: −14.4 points of efficiency (the largest drop)", 16: "", 32: ""}
    assert node_notes(frame) == ["seed000-scaling: efficiency drops most at the first step across a node boundary, "
                                 "4 devices on 1 node → 8 on 2 nodes (4 per node): 89.9 % → 75.5 % efficiency, "
                                 "−14.4 points. Communication between nodes is the first place to look."]


def test_throughput_rows_average_repeats_with_compute_memory_and_step_percentiles(tmp_path):
    """Two repeats of 1 GPU (100,000 and 120,000 tokens in 10 s; 10 and 12 GiB), one run of 2 GPUs
    (180,000 tokens) and one of 4, 1e9 parameters at 6 FLOPs per parameter and token on an H100 (989.5 dense TFLOP/s at
    bf16). The 2-GPU run has per-step times: after a warm-up step, its slower rank takes 1.0, 1.1, …, 1.9 s."""
    from trainperf.report.throughput import NO_STEPS, measured, shown, RATES, table

    rows = [{"run_id": run_id, "experiment": "sweep", "platform": "NVIDIA H100 SXM", "model": "m", "n_params": 1e9,
             "flops_convention": "6n", "precision": "bf16", "gpus": gpus, "nodes": 1, "micro_batch_size": 4,
             "tokens": tokens, "elapsed_s": 10.0, "steps": 10, "peak_memory_gb": memory}
            for run_id, gpus, tokens, memory in (("a-r1", 1, 100_000, 10.0), ("a-r2", 1, 120_000, 12.0),
                                                 ("b", 2, 180_000, 9.0), ("c", 4, 400_000, 9.0))]
    steps = tmp_path / "steps.csv"
    logged = [{"run_id": "c", "rank": 0, "step": step, "n_steps": 2, "warmup": False, "tokens": 40_000,
               "step_s": 2.4 if step == 20 else 2.0} for step in range(2, 21, 2)]  # logged every 2 steps
    pd.DataFrame([{"run_id": "b", "rank": rank, "step": step, "warmup": step == 0, "tokens": 9_000,
                   "step_s": 5.0 if step == 0 else 0.9 + 0.1 * step - 0.05 * rank}
                  for rank in (0, 1) for step in range(11)] + logged).to_csv(steps, index=False)
    runs = measured(open_runs(_write(tmp_path, rows)))
    frame = table(runs, open_steps([str(steps)], runs)).set_index("gpus")
    one, two = frame.loc[1], frame.loc[2]
    assert one["runs"] == 2 and one["tokens_per_s"] == pytest.approx(11_000)  # (10,000 + 12,000) / 2
    assert one["tflops_per_gpu"] == pytest.approx(6e9 * 11_000 / 1e12)  # 66 TFLOP/s
    assert one["mfu"] == pytest.approx(66 / 989.5) and one["peak_memory_gb"] == pytest.approx(11)
    assert one["step_time_basis"] == NO_STEPS and np.isnan(one["step_time_p50_s"])
    assert two["tokens_per_s_per_gpu"] == pytest.approx(9_000) and two["step_time_basis"] == "10 steps"
    # median of 1.0 … 1.9 s: 1.45; 95th percentile at position 0.95 · 9 = 8.55: 1.8 + 0.55 · 0.1 = 1.855
    assert (two["step_time_p50_s"], two["step_time_p95_s"]) == pytest.approx((1.45, 1.855))
    # intervals of 2 steps are 2 steps each of half the interval: 18 steps of 1.0 s and 2 of 1.2 s
    four = frame.loc[4]
    assert four["step_time_basis"] == "20 steps"
    assert (four["step_time_p50_s"], four["step_time_p95_s"]) == pytest.approx((1.0, 1.2))
    assert list(shown(frame.reset_index(), RATES)) == ["configuration", "gpus", "runs", "tokens_per_s", "interval",
                                                       "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
                                                       "scaling_efficiency"]


def test_throughput_headline_never_comes_from_a_projected_oversubscribed_or_incomplete_run(tmp_path):
    from trainperf.report.throughput import analyse, measured, table

    # data/runs, the weak-scaling study: 4 processes on 2 cores (oversubscribed) average more tokens/s than 2
    runs = measured(open_runs([str(RUNS)], experiments=["bench-cpu-small-fp32-weak-scaling"]))
    rates = runs.groupby("gpus")["tokens_per_s"].mean()
    assert rates[4] > rates[2]
    assert analyse(runs).headline.text.startswith(f"Peak throughput {rates[2]:,.0f} tokens/s with 2 processes (mean of 2 "
                                          f"runs): {rates[2] / 2:,.0f} tokens/s per device.")
    frame = table(runs)
    assert set(frame["experiment_scaling"]) == {"bench-cpu-small-fp32-weak-scaling (weak scaling)"}
    assert frame.set_index("gpus").loc[4, "remark"] == "oversubscribed: not headlined"
    # a source's projection on 64 GPUs and a run whose rank stopped early outrun the measured 8 GPUs
    rows = [{"run_id": run_id, "experiment": "e", "gpus": gpus, "tokens": rate * 100, "elapsed_s": 100.0, **doubt}
            for run_id, gpus, rate, doubt in (("measured", 8, 10_000, {}), ("projected", 64, 70_000, {"measured": False}),
                                              ("cut", 16, 30_000, {"complete": False}))]
    runs = measured(open_runs(_write(tmp_path, rows)))
    assert analyse(runs).headline.text.startswith("Peak throughput 10,000 tokens/s with 8 GPUs: 1,250 tokens/s per device. "
                                          "Not counted: 2 configurations")
    assert table(runs).set_index("gpus")["remark"].to_dict() == {8: "", 16: "incomplete: not headlined",
                                                                 64: "projected: not headlined"}
    runs = measured(open_runs(_write(tmp_path, rows[1:])))
    assert analyse(runs).headline.text.startswith("No configuration measures throughput without doubt")


def test_plateau_of_seed_003():
    from trainperf.report.batch_size import plateau

    # tokens/s printed by seed 003, micro-batch 16 ... 1024; gains 93 %, 92 %, 46 %, 22 %, 9.7 %, 5.9 %
    found = plateau(np.array([2090, 4040, 7760, 11360, 13900, 15250, 16150]), 0.10)
    assert found.index == 4  # micro-batch 256: every later step gains < 10 %
    assert found.gains[-1] == pytest.approx(16150 / 15250 - 1)
    with pytest.raises(InputError, match="min_gain must be a fraction above 0"):
        plateau(np.array([2090, 4040]), -1)


def test_batch_sweep_headline_names_its_experiment_and_does_not_say_it_stops_improving():
    from trainperf.report.batch_size import analyse, sweeps

    runs = sweeps(open_runs([str(REFERENCE / "seed_003_batch_size.csv"), str(RUNS)]))
    text = analyse(runs).headline.text
    # seed 003 prints single figures: 16,150 vs 15,250 tokens/s, 5.9 % apart, with no interval to test it
    assert text.startswith("seed003-batch-size: fastest micro-batch 1,024 × 1 accumulation at 16,150 tokens/s, "
                           "5.9 % ahead of micro-batch 512 × 2 accumulation (no interval: one run without steps")
    assert "(1 more sweep below)" in text
    notes = " ".join(analyse(runs).plateau_notes)
    assert "stops improving" not in text + notes
    # after micro-batch 256 (13,900 tokens/s) the sweep still reaches 16,150 at 1,024: 16.2 % more
    assert "the fastest later configuration, micro-batch 1,024 × 1 accumulation, is 16.2 % faster in all" in notes


def _bench_sweep():
    from trainperf.report.batch_size import sweeps

    runs = sweeps(open_runs([str(MEASURED)]))
    return runs, page.data_steps([str(MEASURED)], runs)


def test_committed_sweep_ties_at_the_top_within_the_noise():
    """The earlier CPU sweep (tests/data/measured_runs/bench-cpu-small-fp32-batch-size, 8 measured steps per run,
    one run per configuration): 1 × 16, 2 × 8, 4 × 4, 8 × 2 and 16 × 1 are 2,784, 2,744, 3,183, 3,156 and 3,035
    tokens/s. One run per configuration cannot show how much a configuration's runs differ, so each interval
    allows for the assumed run-to-run variation (8 %, as ``trainperf compare``): the difference of two single
    runs then has a 95 % interval of about ±22 %, wider than any gap of this sweep (4 × 4 over 1 × 16: +14 %),
    and no configuration may be called the best."""
    from trainperf.report.batch_size import analyse

    runs, steps = _bench_sweep()
    name = "bench-cpu-small-fp32-batch-size"
    assert analyse(runs, steps).tops[name].startswith(f"{name}: micro-batch × accumulation 4 × 4, 8 × 2, 16 × 1, 1 × 16 and "
                                             "2 × 8 are indistinguishable at the top (3,183 tokens/s at the fastest")
    text = analyse(runs, steps, min_gain=0.10).headline.text
    assert "indistinguishable at the top" in text and "best" not in text and "ahead" not in text
    frame = analyse(runs, steps, None, 0.10).table
    assert frame["at_top"].all()
    # every interval holds its run's own figure; no step of the sweep is a change beyond the noise
    rate = frame["tokens_per_s"]
    assert ((frame["tokens_per_s_low"] < rate) & (rate < frame["tokens_per_s_high"])).all()
    assert frame["vs_previous"].tolist() == ["", *["indistinguishable"] * 4]
    # the plateau note does not state the later steps' small changes as gains or losses
    assert "(gains: -0.8 % (within the noise), -3.8 % (within the noise))" in " ".join(analyse(runs, steps, min_gain=0.10).plateau_notes)


def test_sweep_without_steps_says_it_has_no_interval_and_ties_below_the_minimum_effect(tmp_path):
    from trainperf.report.batch_size import analyse, sweeps

    rows = [{"run_id": f"mb{m}", "experiment": "sweep", "gpus": 1, "micro_batch_size": m, "grad_accum_steps": 8 // m,
             "tokens": t, "elapsed_s": 1.0} for m, t in ((1, 1000), (2, 1500), (4, 1510), (8, 1470))]
    runs = sweeps(open_runs(_write(tmp_path, rows)))
    # 1,500 and 1,470 vs 1,510: 0.7 % and 2.6 % below, single figures: under 2 % is a tie, 2.6 % is not
    assert analyse(runs).tops["sweep"].startswith("sweep: micro-batch × accumulation 4 × 2 and 2 × 4 are indistinguishable")
    frame = analyse(runs).table
    assert frame["interval"].tolist() == ["no interval (one run without steps)"] * 4
    assert frame["vs_previous"].tolist() == ["", "faster (no interval)", "indistinguishable (no interval)",
                                             "slower (no interval)"]  # 1,470 / 1,510 - 1 = -2.6 %


def test_scaling_report_without_several_device_counts_is_not_applicable():
    from trainperf.report.scaling import studies

    with pytest.raises(NotApplicable, match=r"no experiment has runs at two or more device counts \(column gpus\)"):
        studies(open_runs([str(TINY / "runs.csv")], experiments=["tiny-sweep"]))


def test_batch_size_report_without_micro_batch_is_not_applicable():
    from trainperf.report.batch_size import sweeps

    with pytest.raises(NotApplicable, match=r"has a micro-batch size \(micro_batch_size\): give the column, or "
                                            r"record it with StepProfiler"):
        sweeps(open_runs([str(TINY / "runs.csv")], experiments=["tiny-scaling"]))


# --- scaling -------------------------------------------------------------------------------

def _scaling_runs():
    from trainperf.report.scaling import studies

    return studies(open_runs([str(REFERENCE / n) for n in ("seed_000_throughput.csv", "seed_002_scaling.csv",
                                                           "seed_004_scaling.csv")]))


def test_confounded_experiment_is_warned_about_and_never_projected():
    from trainperf.report import scaling
    from trainperf.report.run_labels import doubt_notes

    runs = _scaling_runs()
    # seed 002's throughput table moves from DDP at micro-batch 32 to FSDP at 64 from 64 GPUs on
    warnings = scaling.analyse(runs).confounded
    assert len(warnings) == 1 and warnings[0].startswith("seed002-throughput (weak scaling) changes more than the "
                                                         "device count: strategy ddp (from 1 device) → fsdp (from "
                                                         "64 devices)")
    assert "seed002-throughput (weak scaling)" not in {p.experiment for p in scaling.analyse(runs).projections}
    # the headline: the largest measured scale among the clean studies. Seed 002's cost table reaches 64 GPUs
    # (45.0x) but every time in it is the source's projection (measured = false): not headlined, not fitted.
    # Seed 000: 700,970 / 34,086 tokens/s = 20.6x on 32 GPUs, 64 % efficiency; 22,528 tokens per GPU per step
    # at every GPU count (data/reference/README.md): weak scaling, the work grows with the devices
    assert scaling.analyse(runs).headline.text == ("seed000-scaling (weak scaling): 32 devices process 20.6× as much per "
                                           "second as 1, each doing the same work per step — 64 % scaling "
                                           "efficiency.")
    assert "seed002-cost (strong scaling)" not in {p.experiment for p in scaling.analyse(runs).projections}
    (warning,) = doubt_notes(runs)
    assert warning.startswith("5 runs projected (seed002-cost-g1, seed002-cost-g8, seed002-cost-g16, "
                              "seed002-cost-g32, …): projected or estimated by its source, not measured")
    # its USL fit through 5 device counts spans more than 4x at 8 x 32 devices: no projection is drawn
    (fitted,) = [p for p in scaling.analyse(runs).projections if p.experiment == "seed000-scaling (weak scaling)"]
    low, high = fitted.best.band(fitted.target, scaling.projection.BAND_LEVEL)
    assert high[0] > 4 * low[0]
    assert "the data cannot project to 256 devices" in scaling.analyse(runs).headline.html
    assert "projection at 256 devices" not in scaling.analyse(runs).headline.html


def test_oversubscribed_runs_are_shown_but_never_fitted_or_headlined():
    """The bench's CPU runs at 4 processes on 2 cores (data/runs, oversubscribed): marked in their studies'
    rows, neither fitted nor headlined, and each run's notes say what it measures; the headline comes from
    the runs at 1 and 2 processes of the strong-scaling study, the largest measured scale without doubt."""
    from trainperf.report import scaling

    runs = scaling.studies(open_runs([str(ROOT / "data" / "runs")]))
    frame = scaling.analyse(runs).table.set_index(["experiment", "gpus"])
    strong, weak = "bench-cpu-small-fp32-strong-scaling (strong scaling)", "bench-cpu-small-fp32-weak-scaling (weak scaling)"
    assert frame.loc[(strong, 4), "marks"] == frame.loc[(weak, 4), "marks"] == "oversubscribed"
    assert not frame.loc[(strong, 4), "concluded"] and frame.loc[(strong, 2), "concluded"]
    assert scaling.analyse(runs).projections == []
    assert scaling.analyse(runs).headline.text.startswith(f"{strong}: 1.8× faster on 2 devices than on 1")
    four = runs[runs["gpus"] == 4]
    assert four["oversubscribed"].all() and four["notes"].str.contains("contention for the CPU").all()
    assert all(n.endswith("Left out: 4 devices (oversubscribed).") for n in scaling.analyse(runs).efficiency_notes)


def test_cost_per_million_tokens_only_where_a_rate_is_known(tmp_path):
    from trainperf.report.scaling.analysis import cost

    rows = [{"run_id": f"g{n}", "experiment": "e", "gpus": n, "tokens": 100_000.0 * n * 100, "elapsed_s": 100.0,
             "price_per_gpu_hour": 2.0} for n in (1, 8)]
    frame = cost(open_runs(_write(tmp_path, rows)))
    # 8 devices x $2.00 per device-hour / 3600 s/h / 800,000 tokens/s x 1e6 = $0.00556 per million tokens
    assert frame["usd_per_million_tokens"].tolist() == pytest.approx([2.0 / 3600 / 1e5 * 1e6, 16.0 / 3600 / 8e5 * 1e6])
    elapsed_only = [{k: v for k, v in r.items() if k != "tokens"} for r in rows]
    assert not any(c.startswith("usd_per_million") for c in cost(open_runs(_write(tmp_path, elapsed_only))).columns)


def test_overhead_shows_the_wait_for_the_slowest_rank():
    from trainperf.report import scaling

    frame = scaling.analyse(_scaling_runs()).overhead.set_index(["experiment", "gpus"])
    # seed 004, batch 64 on 2 GPUs: the slowest rank's 1384.64 s against the ranks' mean 1095.70 s
    assert frame.loc[("seed004-batch64 (strong scaling)", 2), "slowest_wait_s"] == pytest.approx(1384.64 - 1095.70)
    # batch 128 on 4 GPUs: compute 463.90 + communication 21.22 + data 3.53 + the wait 216.79 = 705.44 of 706.41 s
    row = frame.loc[("seed004-batch128 (strong scaling)", 4)]
    assert row[["compute_s", "comm_s", "data_s", "slowest_wait_s"]].sum() == pytest.approx(705.44, abs=0.01)

def test_single_process_and_ddp_are_the_same_training(tmp_path):
    from trainperf.report.scaling import analyse, studies

    rows = [{"run_id": f"r{n}", "experiment": "torchrun", "gpus": n, "tokens": 1000 * n, "elapsed_s": 1.0,
             "strategy": "single" if n == 1 else "ddp", "micro_batch_size": 8, "grad_accum_steps": 1}
            for n in (1, 2, 4)]
    rows += [{**r, "experiment": "to-fsdp", "run_id": r["run_id"] + "f", "strategy": "fsdp" if r["gpus"] == 4
              else r["strategy"]} for r in rows]
    runs = studies(open_runs(_write(tmp_path, rows)))
    clean = analyse(runs).table.groupby("experiment", sort=False)["only_devices_change"].first()
    assert clean.to_dict() == {"torchrun (weak scaling)": True, "to-fsdp (weak scaling)": False}
    assert [w.split(":")[0] for w in analyse(runs).confounded] == ["to-fsdp (weak scaling) changes more than the device count"]
    assert "strategy single (from 1 device) → fsdp (from 4 devices)" in analyse(runs).confounded[0]


def test_time_the_mean_hides_of_seed_004():
    from trainperf.report.scaling.ranks import rank_spread, ranks, straggler
    from trainperf.aggregate import rank_totals

    runs = open_runs([str(REFERENCE / "seed_004_scaling.csv")])
    steps = open_steps([str(REFERENCE / "seed_004_ranks.csv")], runs)
    times = rank_totals(steps.per_rank)["elapsed_s"]
    assert times[("seed004-b64-g2", 0)] == pytest.approx(1384.64)
    assert times[("seed004-b64-g2", 1)] == pytest.approx(806.75)
    row = rank_spread(runs, ranks(runs, steps)).set_index("run_id").loc["seed004-b64-g2"]
    # mean of the two ranks: 1095.695 s; it understates the job's 1384.64 s by 1 - 1095.695 / 1384.64 = 20.9 %
    assert row["mean_understates"] == pytest.approx(1 - 1095.695 / 1384.64)
    assert row["imbalance"] == pytest.approx(1384.64 / 806.75)
    text = straggler(rank_spread(runs, ranks(runs, steps)))
    assert "understates this run's elapsed time by 20.9 %" in text and "26.4 % too high" in text  # 1384.64/1095.695


def test_scaling_efficiency_of_measured_runs_has_an_interval():
    """The earlier strong-scaling study (tests/data/measured_runs, 8 measured steps per run): efficiency at 2 processes
    92.8 % and at 4 processes 39.8 %; both get an interval from the steps of the run and its baseline, the
    published seed 000 figures none."""
    from trainperf.report import scaling

    runs = scaling.studies(open_runs([str(REFERENCE / "seed_000_throughput.csv"), str(MEASURED)]))
    steps = open_steps([str(MEASURED)], runs)
    frame = scaling.analyse(runs, steps).table.set_index("configuration")
    strong = frame[frame["experiment"] == "bench-cpu-small-fp32-strong-scaling (strong scaling)"]
    measured = strong[strong["gpus"] > 1]
    assert ((measured["efficiency_low"] < measured["scaling_efficiency"])
            & (measured["scaling_efficiency"] < measured["efficiency_high"])).all()
    assert measured["efficiency_interval"].str.endswith("(steps of one run, run-to-run CV 8% assumed)").all()
    assert strong.loc[strong["gpus"] == 1, "efficiency_interval"].tolist() == ["baseline"]
    seed = frame[(frame["experiment"] == "seed000-scaling (weak scaling)") & (frame["gpus"] > 1)]
    assert set(seed["efficiency_interval"]) == {"no interval (one run without steps)"}
    assert seed["efficiency_low"].isna().all()
    notes = scaling.analyse(runs, steps).efficiency_notes
    assert [n.split(":")[0] for n in notes] == ["bench-cpu-small-fp32-strong-scaling (strong scaling)",
                                                "bench-cpu-small-fp32-weak-scaling (weak scaling)"]  # seed 000: none
    # 4 processes on 2 cores are oversubscribed: no efficiency move is concluded from them, and they are named
    assert "4 devices" not in notes[0].split(" Left out:")[0] and notes[0].endswith("Left out: 4 devices (oversubscribed).")
    # the headline of the measured studies alone: at 4 processes 5,379 / 3,379 tokens/s = 1.59× (39.8 %), but
    # oversubscribed; the largest scale without doubt is 2 processes, at 92.8 % with its interval
    measured = runs[runs["experiment"].str.startswith("bench")]
    text = scaling.analyse(measured, steps).headline.text
    assert re.fullmatch(r"bench-cpu-small-fp32-strong-scaling \(strong scaling\): 1\.9× faster on 2 devices than on "
                        r"1 — 93 % scaling efficiency \(95 % interval \d\d\.\d %–1\d\d\.\d %\)\.", text)


def test_efficiency_change_within_the_noise_is_not_called_a_drop(tmp_path):
    """Two processes at 1.96× (98 % efficiency) and four at 3.88× (97 %): per-step throughput that varies by
    ±10 % step to step cannot tell 98 % from 97 %, so the note does not say efficiency falls."""
    from trainperf.report import scaling

    rng = np.random.default_rng(0)
    runs, steps = [], []
    for n, rate in ((1, 1000.0), (2, 1960.0), (4, 3880.0)):
        runs.append({"run_id": f"p{n}", "experiment": "ddp", "gpus": n, "tokens": rate * 10, "elapsed_s": 10.0,
                     "strategy": "ddp", "micro_batch_size": 8, "grad_accum_steps": 1})
        for step in range(12):
            seconds = float(rng.uniform(0.9, 1.1))
            steps += [{"run_id": f"p{n}", "rank": r, "step": step, "warmup": step < 2, "step_s": seconds,
                       "tokens": rate * seconds / n} for r in range(n)]
    table = _write(tmp_path, runs)
    steps_path = tmp_path / "steps.csv"
    pd.DataFrame(steps).to_csv(steps_path, index=False)
    opened = scaling.studies(open_runs(table))
    notes = " ".join(scaling.analyse(opened, open_steps([str(steps_path)], opened)).efficiency_notes)
    assert "does not change beyond the noise from 2 to 4 devices" in notes and "falls from 2" not in notes


def test_rank_section_names_the_slowed_rank_of_each_ddp_run():
    """A steps table of two DDP runs: in 'slow', rank 1 computes 0.25 s longer per step, so it waits
    0.02 s for the all-reduce and ranks 0, 2 and 3 wait 0.27 s for it; in 'even' every rank waits about
    0.10 s. The rank section names rank 1 of 'slow' and no straggler in 'even'."""
    from trainperf.aggregate import summarize
    from trainperf.report import scaling
    from trainperf.reading.tables import as_intervals

    runs = pd.DataFrame({"run_id": ["even", "slow"], "experiment": ["ddp", "ddp"]})
    rows = []
    for run_id, waits in (("even", [0.10, 0.11, 0.10, 0.09]), ("slow", [0.27, 0.02, 0.27, 0.28])):
        for step in range(6):
            rows += [{"run_id": run_id, "rank": r, "node": "host", "step": step, "warmup": step == 0, "step_s": 1.0,
                      "comm_exposed_s": w} for r, w in enumerate(waits)]
    waits, sentences = scaling.ranks.stragglers(runs, summarize(as_intervals(pd.DataFrame(rows))))
    assert waits.loc[waits["straggler"], ["run_id", "rank"]].values.tolist() == [["slow", 1]]
    assert waits.set_index(["run_id", "rank"]).loc[("slow", 1), "busy_s"] == pytest.approx(0.98)
    assert sentences[0].startswith("Run even: no straggler.")
    assert sentences[1].startswith("Run slow: rank 1 is the straggler. It waits 20.0 ms per step for communication")


def test_karp_flatt_trend_of_seed_000_moves_both_ways():
    from trainperf.report.scaling.projection import serial_trend

    # seed 000 tokens/s at 1, 4, 8, 16, 32 GPUs; e = (1/S - 1/p) / (1 - 1/p):
    # 0.0374, 0.0463, 0.0304, 0.0179 -- up, then down: no single trend
    rates, gpus = np.array([34_086, 122_599, 205_908, 374_571, 700_972]), np.array([1, 4, 8, 16, 32])
    speedup = rates[1:] / rates[0]
    e = (1 / speedup - 1 / gpus[1:]) / (1 - 1 / gpus[1:])
    assert e[1] > e[0] and e[3] < e[2]
    assert serial_trend(e) == "moves both ways"
    assert serial_trend(np.array([0.02, 0.03, 0.05])) == "grows"
    assert serial_trend(np.array([0.0111, 0.00889, 0.00645, 0.0067])) == "falls"  # seed 002, 8-64 GPUs
    assert serial_trend(np.array([0.142, 0.119])) == "stays about constant"  # within 1.2x


def test_fit_parameters_at_their_bound_print_as_zero():
    from trainperf.scaling import parameter_text

    assert parameter_text(5.583e-22, 0.00045) == "0 (at its bound)"
    assert parameter_text(0.01953, 0.0022) == "0.01953 ± 0.0022"
    assert parameter_text(0.1203, float("nan")) == "0.1203"


def test_projection_frames_of_seed_000():
    """Seed 000 is weak scaling (22,528 tokens per GPU per step): USL alone is fitted, through 5 device counts.
    Its 95 % band spans more than 4× from about 47 GPUs on (8.60×–23.3× at the measured 32, 7.14×–39.0× at
    64): the curve stops there and the table says the data cannot project to 64, 128 or 256 GPUs."""
    from trainperf.report import scaling

    runs = _scaling_runs()
    found = [p for p in scaling.analyse(runs).projections if p.experiment == "seed000-scaling (weak scaling)"]
    assert list(found[0].fits) == ["usl"]
    table = scaling.projection.projected(found)
    # straight line from 32 GPUs at 20.56x (700,972 / 34,086): 20.56 x 256 / 32 = 164.5x at 256 GPUs
    last = table.iloc[-1]
    assert last["devices"] == 256 and last["naive"] == pytest.approx(700_970 / 34_086 * 8, rel=1e-4)
    assert table["usl"].isna().all()
    assert table["usl_band"].str.fullmatch(r"the data cannot project this far: 95 % band [\d.,]+×–[\d.,]+×").all()
    curves = scaling.projection.curves(found)
    assert set(curves["curve"]) == {"USL fit", "ideal", "straight line (efficiency held at the last point)"}
    usl = curves[curves["curve"] == "USL fit"]
    assert 32 < usl["devices"].max() < 64 and (usl["high"] <= 4 * usl["low"]).where(usl["devices"] > 32, True).all()
    assert set(usl["band"]) == {"95 % band"}
    assert ((usl["low"] <= usl["multiplier"]) & (usl["multiplier"] <= usl["high"])).all()
    # the note names where the band outgrows 4×: past the largest measured scale (32), before the next (64)
    beyond = [re.search(r"beyond ([\d,]+) devices its 95 % band spans more than 4×: the data cannot project this far", n)
              for n in scaling.projection.fit_notes(found)]
    (where,) = [int(m.group(1).replace(",", "")) for m in beyond if m]
    assert 32 < where < 64


def test_usl_through_three_device_counts_says_it_has_no_band():
    """Seed 004 measured each batch at 2, 4 and 8 GPUs: the USL (sigma, kappa, gamma) has 3 parameters for
    3 points, no degrees of freedom, so no standard errors and no band; Amdahl (s, gamma) keeps its band,
    and the headline projects with the law whose error is known."""
    from trainperf.report import scaling

    runs = scaling.studies(open_runs([str(REFERENCE / "seed_004_scaling.csv")]))
    found = scaling.analyse(runs).projections
    assert {len(p.p) for p in found} == {3}
    table = scaling.projection.projected(found)
    assert set(table["usl_band"]) == {"the data cannot project this far: no band (3 device counts, 3 parameters: "
                                      "measure a 4th device count)"}
    assert table["usl"].isna().all() and table["amdahl_band"].str.fullmatch(r"[\d.,]+×–[\d.,]+×").all()
    assert "nan" not in " ".join(table[["usl_band", "amdahl_band"]].to_numpy().ravel()).lower()
    notes = " ".join(scaling.projection.fit_notes(found))
    assert "USL: sigma = " in notes and "no band (3 device counts, 3 parameters" in notes and "nan" not in notes.lower()
    assert {p.best.law for p in found} == {"amdahl"}
    facts = scaling.analyse(runs).headline.html
    assert "Amdahl projection at" in facts and "nan" not in facts.lower()
    curves = scaling.projection.curves(found).groupby("curve")  # USL drawn through the measured 1-4 GPUs only
    assert set(curves.get_group("USL fit")["band"]) == {"no band (3 device counts, 3 parameters: measure a 4th device count)"}
    assert curves.get_group("USL fit")["devices"].max() <= 4 < curves.get_group("Amdahl fit")["devices"].max()
    assert curves.get_group("USL fit")["low"].isna().all() and curves.get_group("Amdahl fit")["low"].notna().all()


# --- platforms ------------------------------------------------------------------------------

def test_sparse_peaks_and_winners_of_seed_001():
    from trainperf.report.platforms import analyse, comparable, sparse_peak_runs

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv")]))
    assert sorted(sparse_peak_runs(runs)["platform"]) == ["NVIDIA H100 SXM", "NVIDIA H100 SXM"]
    found = analyse(runs).winners.set_index("model")
    # both models on 8 GPUs of each platform at bf16, so per device = total: MI300X wins both
    assert found["fastest"].tolist() == ["AMD MI300X", "AMD MI300X"] and set(found["precision"]) == {"bf16"}
    assert found.loc["Qwen 2.5 7B", "margin"] == pytest.approx(87_933 / 78_877 - 1)  # 11.5 %
    assert found.loc["Llama 3.1 8B", "margin"] == pytest.approx(68_875 / 59_175 - 1)  # 16.4 %
    # the seed's rows differ in no recorded setting but the platform
    assert set(found["also"]) == {"same recorded settings"}
    # published single figures: 11.5 % is beyond the 2 % minimum effect, but its noise is untested
    qwen = found.loc["Qwen 2.5 7B"]
    assert qwen["verdict"] == "winner" and qwen["evidence"] == "no interval: single figures, the noise is not tested"


def _mpt():
    from trainperf.report.platforms import comparable

    return comparable(open_runs([str(REFERENCE / "llmfoundry_mpt.csv")]))


def test_each_platform_model_row_is_its_best_configuration_per_device_not_its_largest_job():
    """llm-foundry's MPT table: on H100 at bf16, MPT-70B's largest job is 515,636 tokens/s on 512 GPUs
    (1,007 per device, MFU printed 41.25 %), but its best per device is 135,490 on 128 (1,058, 43.36 %);
    MPT-1B's largest is 20,396,905 on 512 (39,837 each), its best per device 418,201 on 8 (52,275)."""
    from trainperf.report.platforms import analyse

    rows = analyse(_mpt()).peaks.set_index(["platform_key", "model"])
    h100_70b = rows.loc[("NVIDIA H100 SXM · bf16", "MPT-70B")]
    assert h100_70b[["tokens_per_s", "gpus"]].tolist() == [135_490, 128]
    assert h100_70b["tokens_per_s_per_gpu"] == pytest.approx(135_490 / 128)
    assert h100_70b["mfu"] == pytest.approx(0.4336, abs=0.001)  # the MFU of the same configuration
    assert h100_70b["configuration"] == "128 GPUs across 16 nodes, micro-batch 8 × 1 accum., fsdp"
    assert h100_70b["configs"] == 5 and h100_70b["relative"] == 1
    assert rows.loc[("NVIDIA H100 SXM · bf16", "MPT-1B"), ["tokens_per_s", "gpus"]].tolist() == [418_201, 8]
    # A100 80GB, MPT-70B: 26,274 tokens/s on 64 GPUs against H100's 1,058.5 per device
    assert rows.loc[("NVIDIA A100 SXM 80GB", "MPT-70B"), "relative"] == pytest.approx((26_274 / 64) / (135_490 / 128))


def test_capacity_of_a_pair_comes_from_its_best_configuration_only():
    """MPT-70B on H100: its best configuration per device (micro-batch 8, 128 to 512 GPUs) was not
    measured on 64 GPUs; another configuration (micro-batch 8 × 4 accumulation) was, at 66,523 tokens/s,
    and is not that row's figure."""
    from trainperf.report.platforms import analyse

    frame = analyse(_mpt(), project_nodes=[8, 16, 64], gpus_per_node=8).capacity
    h100 = frame[(frame["platform_key"] == "NVIDIA H100 SXM · bf16") & (frame["model"] == "MPT-70B")]
    h100 = h100.set_index("devices")
    assert h100.loc[64, "basis"] == "below the measured range" and np.isnan(h100.loc[64, "tokens_per_s"])
    assert h100.loc[128, ["tokens_per_s", "basis"]].tolist() == [135_490, "measured"]
    assert h100.loc[512, ["tokens_per_s", "basis"]].tolist() == [515_636, "measured"]
    assert set(h100["measured"]) == {"128–512"}
    assert set(h100["configuration"]) == {"128 GPUs across 16 nodes, micro-batch 8 × 1 accum., fsdp"}


def test_platforms_are_compared_at_the_same_precision_unless_asked_otherwise():
    """MPT-3B ran on H100 at fp8 and at bf16 and on both A100s at bf16 (published MPT table)."""
    from trainperf.report.platforms import analyse

    runs = _mpt()
    same = analyse(runs).winners.set_index("model").loc["MPT-3B"]
    # bf16 against bf16: H100 223,721 tokens/s and A100 80GB 97,019, both on 8 GPUs at micro-batch 40 × 6 and
    # sequence length 512: the same recorded settings
    assert same[["fastest", "runner_up", "precision"]].tolist() == ["NVIDIA H100 SXM · bf16",
                                                                    "NVIDIA A100 SXM 80GB", "bf16"]
    assert same["margin"] == pytest.approx(223_721 / 97_019 - 1) and same["also"] == "same recorded settings"
    assert analyse(runs).policy_notes[1] == ("Measured on one platform only, so no winner is named: MPT-3B at fp8 (NVIDIA "
                                     "H100 SXM) and MPT-1B at fp8 (NVIDIA H100 SXM). precision_policy = "
                                     "“fastest” compares each platform at its fastest precision.")
    # asked for each platform's fastest precision: H100 at fp8 (292,217 tokens/s), and the win says so
    fastest = analyse(runs, policy="fastest").winners.set_index("model").loc["MPT-3B"]
    assert fastest[["fastest", "runner_up"]].tolist() == ["NVIDIA H100 SXM · fp8", "NVIDIA A100 SXM 80GB"]
    assert fastest["margin"] == pytest.approx(292_217 / 97_019 - 1) and fastest["also"] == "precision fp8 vs bf16"
    with pytest.raises(InputError, match="precision_policy 'best': give one of same, fastest"):
        analyse(runs, policy="best")


def test_a_win_that_also_changes_the_configuration_says_so():
    """MPT-30B: H100's best per device is 73,860 tokens/s on 32 GPUs at sequence length 2,048, micro-batch
    14 × 3; A100 80GB's is 7,739 on 8 GPUs at 512, 12 × 21 (published MPT table)."""
    from trainperf.report.platforms import analyse

    runs = _mpt()
    mpt30b = analyse(runs).winners.set_index("model").loc["MPT-30B"]
    assert mpt30b["margin"] == pytest.approx((73_860 / 32) / (7_739 / 8) - 1)
    assert mpt30b["also"] == "devices 32 vs 8; sequence length 2,048 vs 512; micro-batch × accumulation 14 × 3 vs 12 × 21"
    # the headline's contest, MPT-70B: 128 GPUs at 8 × 1 against 64 at 8 × 4
    assert analyse(runs).headline.text.endswith("Their best configurations also differ: devices 128 vs 64; micro-batch × "
                                        "accumulation 8 × 1 vs 8 × 4.")


def _platform_runs(tmp_path, rates: dict[str, list[float]]) -> pd.DataFrame:
    from trainperf.report.platforms import comparable

    rows = [{"run_id": f"{platform}-{i}", "experiment": "contest", "platform": platform, "model": "m", "gpus": 8,
             "precision": "bf16", "tokens": rate * 100, "elapsed_s": 100.0}
            for platform, repeats in rates.items() for i, rate in enumerate(repeats)]
    return comparable(open_runs(_write(tmp_path, rows)))


def test_no_winner_within_the_noise_or_below_the_minimum_effect(tmp_path):
    from trainperf.report.platforms import analyse

    # single figures 1.5 % apart: below the 2 % minimum effect, a tie
    runs = _platform_runs(tmp_path, {"NVIDIA H100 SXM": [10_150], "AMD MI300X": [10_000]})
    row = analyse(runs).winners.iloc[0]
    assert row["verdict"] == "indistinguishable" and row["evidence"].endswith("below 2 %")
    assert analyse(runs).headline.text.startswith("m: NVIDIA H100 SXM and AMD MI300X are indistinguishable per device")
    # two repeats each, 5 % apart on average, but H100's repeats differ by 20 %: the interval of the margin
    # (t with 1-2 degrees of freedom) holds 0, so the 5 % is within the noise
    runs = _platform_runs(tmp_path, {"NVIDIA H100 SXM": [9_500, 11_500], "AMD MI300X": [9_950, 10_050]})
    row = analyse(runs).winners.iloc[0]
    assert row["margin"] == pytest.approx(10_500 / 10_000 - 1) and row["verdict"] == "indistinguishable"
    assert re.fullmatch(r"95 % interval of the margin -[\d.]+ % to [\d.]+ %", row["evidence"])
    assert "faster" not in analyse(runs).headline.text
    # repeats that agree: 10 % apart beyond the noise, a winner. By hand: se of each mean's log 10 / 11,000 and
    # 10 / 10,000, together 0.00135 with Welch's ~2 degrees of freedom, t = 4.30: 1.1 · exp(±0.0058) - 1
    runs = _platform_runs(tmp_path, {"NVIDIA H100 SXM": [10_990, 11_010], "AMD MI300X": [9_990, 10_010]})
    row = analyse(runs).winners.iloc[0]
    assert row["verdict"] == "winner" and row["evidence"] == "95 % interval of the margin 9.4 % to 10.6 %"


def test_synthetic_contests_rank_per_device_at_one_precision_from_one_configuration(tmp_path):
    """Platform A: 8 devices at 1,000 tokens/s each and, at another micro-batch, 64 at 600 each (38,400 in
    all, the largest job); at fp8 8 devices at 1,500 each. Platform B: 8 devices at bf16, 900 each."""
    from trainperf.report.platforms import analyse, comparable

    def run(run_id, platform, precision, gpus, per_device, micro_batch):
        return {"run_id": run_id, "experiment": f"{platform}-{micro_batch}-{precision}", "platform": platform,
                "model": "m", "gpus": gpus, "nodes": gpus // 8, "precision": precision,
                "micro_batch_size": micro_batch, "tokens": per_device * gpus * 100, "elapsed_s": 100.0}

    runs = comparable(open_runs(_write(tmp_path, [
        run("a8", "NVIDIA H100 SXM", "bf16", 8, 1_000, 4), run("a64", "NVIDIA H100 SXM", "bf16", 64, 600, 2),
        run("a16", "NVIDIA H100 SXM", "bf16", 16, 700, 2), run("a8fp8", "NVIDIA H100 SXM", "fp8", 8, 1_500, 4),
        run("b8", "AMD MI300X", "bf16", 8, 900, 4)])))
    row = analyse(runs).peaks.set_index("platform_key").loc["NVIDIA H100 SXM · bf16"]
    assert row[["run_id", "tokens_per_s", "gpus", "configs"]].tolist() == ["a8", 8_000, 8, 3]
    found = analyse(runs).winners.iloc[0]
    assert found[["fastest", "runner_up", "precision"]].tolist() == ["NVIDIA H100 SXM · bf16", "AMD MI300X", "bf16"]
    assert found["margin"] == pytest.approx(1_000 / 900 - 1) and found["also"] == "same recorded settings"
    assert "38,400" not in analyse(runs).headline.html  # the largest job's total ranks nothing
    fastest = analyse(runs, policy="fastest").winners.iloc[0]
    assert fastest["fastest"] == "NVIDIA H100 SXM · fp8" and fastest["also"] == "precision fp8 vs bf16"
    assert fastest["margin"] == pytest.approx(1_500 / 900 - 1)
    assert "also differ: precision fp8 vs bf16" in analyse(runs, policy="fastest").headline.text
    # capacity of A's bf16 row: micro-batch 4 was measured on 8 devices only, so 16 and 64 are its upper
    # bound (1,000 per device), not micro-batch 2's measured 11,200 and 38,400
    a = analyse(runs, project_nodes=[1, 2, 8], gpus_per_node=8).capacity.set_index(["platform_key", "devices"]).loc["NVIDIA H100 SXM · bf16"]
    assert a["tokens_per_s"].tolist() == [8_000, 16_000, 64_000]
    assert a["basis"].tolist() == ["measured", "upper bound", "upper bound"]


def test_a_projected_configuration_never_ranks_a_platform(tmp_path):
    from trainperf.report.platforms import analyse, comparable

    rows = [{"run_id": run_id, "experiment": "e", "platform": platform, "model": "m", "gpus": 8,
             "precision": "bf16", "micro_batch_size": mb, "tokens": rate * 8 * 100, "elapsed_s": 100.0,
             "measured": measured}
            for run_id, platform, mb, rate, measured in (("a-projected", "NVIDIA H100 SXM", 8, 1_200, False),
                                                         ("a", "NVIDIA H100 SXM", 4, 1_000, True),
                                                         ("b", "AMD MI300X", 4, 900, True))]
    runs = comparable(open_runs(_write(tmp_path, rows)))
    assert analyse(runs).peaks.set_index("platform_key").loc["NVIDIA H100 SXM", "run_id"] == "a"
    assert analyse(runs).winners.iloc[0]["margin"] == pytest.approx(1_000 / 900 - 1)


def test_a_winners_rate_and_mfu_come_from_one_configuration():
    from trainperf.report.platforms import analyse, comparable

    runs = comparable(open_runs([str(REFERENCE / "llmfoundry_mpt.csv")]))
    mpt70b = analyse(runs).winners.set_index("model").loc["MPT-70B"]
    # llm-foundry's MPT-70B on H100: 135,490 tokens/s on 128 GPUs is its best per device (1,058), at an MFU the
    # source printed as 43.36 %; the 512-GPU run has more tokens/s in all but 1,007 per device and 41.25 %
    assert mpt70b["fastest_rate"] == pytest.approx(135_490 / 128)
    assert mpt70b["fastest_mfu"] == pytest.approx(0.4336, abs=0.001)
    # A100 80GB: 26,274 tokens/s on 64 GPUs, 410.5 per device, MFU printed 53.33 %
    assert mpt70b["runner_up_rate"] == pytest.approx(26_274 / 64)
    assert mpt70b["runner_up_mfu"] == pytest.approx(0.5333, abs=0.001)

def test_highest_mfu_figure_compares_datasheet_peaks_only():
    """A CPU run's MFU against its own measured peak (data/runs, ~70-80 %) is
    not 'the highest MFU' next to GPU MFUs against datasheet peaks."""
    from trainperf.report.platforms import analyse, comparable, own_peak_platforms

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv"), str(RUNS)],
                                experiments=["seed001-peak", "bench-cpu-small-fp32-batch-size"]))
    assert own_peak_platforms(runs) == ["cpu"]
    figures = re.findall(r"<b>([^<]+)</b><span>highest MFU ([^<]+)</span>", analyse(runs).headline.html)
    # seed 001, H100 + Qwen: 78,877 tokens/s x 6 x 7.6e9 FLOPs / 8 GPUs = 449.6 TFLOP/s; / 989.5 dense = 45.4 %
    assert figures == [("45.4 %", "(datasheet dense peak): NVIDIA H100 SXM, Qwen 2.5 7B")]



def test_an_impossible_mfu_is_never_the_highest(tmp_path):
    from trainperf.report.platforms import analyse, comparable

    # a given CPU peak of 0.06 TFLOP/s; 6 x 1e6 params x tokens/s: 10,500 tokens/s is 1.05 of it (more than the
    # device can do: wrong inputs), 2 x 7,000 tokens/s on 2 processes is 0.70 per device
    rows = [{"run_id": f"p{n}", "experiment": "mlp", "platform": "cpu", "model": "mlp", "precision": "fp32",
             "gpus": n, "tokens": rate * 10, "elapsed_s": 10.0, "n_params": 1e6, "peak_tflops_per_gpu": 0.06}
            for n, rate in ((1, 10_500.0), (2, 14_000.0))]
    figures = re.findall(r"<b>([^<]+)</b><span>highest MFU", analyse(comparable(open_runs(_write(tmp_path, rows)))).headline.html)
    assert figures == ["70.0 %"]

def test_capacity_keeps_cpu_runs_out_of_accelerator_projections():
    from trainperf.report.platforms import analyse, comparable

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv"), str(RUNS)]))
    result = analyse(runs, project_nodes=[1, 8], gpus_per_node=8)
    frame = result.capacity
    assert "cpu" not in set(frame["platform_key"])
    assert "cpu: CPU runs are not projected to nodes of accelerators." in result.capacity_notes
    # seed 001, MI300X + Qwen at 8 GPUs: 87,933 tokens/s measured; 8 nodes: at most 8 x 87,933
    mi300x = frame[(frame["platform_key"] == "AMD MI300X") & (frame["model"] == "Qwen 2.5 7B")].set_index("nodes")
    assert mi300x.loc[1, ["tokens_per_s", "basis"]].tolist() == [87_933, "measured"]
    assert mi300x.loc[8, ["tokens_per_s", "basis"]].tolist() == [8 * 87_933, "upper bound"]



@pytest.mark.parametrize("nodes, per_node", [([1, 2], 0), ([0, 8], 8), ([1, 2], -8)])
def test_capacity_refuses_nodes_without_devices(nodes, per_node):
    from trainperf.report.platforms import analyse, comparable

    runs = comparable(open_runs([str(REFERENCE / "seed_001_platforms.csv")]))
    with pytest.raises(InputError, match="must be whole numbers of 1 or more"):
        analyse(runs, project_nodes=nodes, gpus_per_node=per_node)

def test_platforms_without_token_rates_are_not_applicable(tmp_path):
    from trainperf.report.platforms import comparable

    path = _write(tmp_path, [{"run_id": "a", "experiment": "e", "platform": "cpu", "model": "m", "gpus": 1,
                              "samples": 10, "elapsed_s": 1.0}])
    with pytest.raises(NotApplicable, match=r"a throughput in tokens/s \(tokens_per_s\): give tokens"):
        comparable(open_runs(path))


def test_a_run_of_many_ranks_names_those_that_wait_least_and_most_and_its_straggler():
    """Run 'big' has 12 ranks waiting 1, 2, ... 12 ms (rank 11 is flagged the straggler by hand, though it waits
    most); run 'small' has 3: the small run names every rank, the big one the 4 that wait least (ranks 0-3),
    the 4 that wait most (8-11) and its straggler."""
    from trainperf.report.scaling.ranks import named_ranks

    waits = pd.DataFrame({"run_id": ["big"] * 12 + ["small"] * 3, "rank": [*range(12), 0, 1, 2],
                          "comm_wait_s": [*(np.arange(12) + 1) / 1e3, 0.01, 0.02, 0.03],
                          "straggler": [False] * 5 + [True] + [False] * 9})
    named, sentence = named_ranks(waits, limit=8)
    assert named.groupby("run_id", sort=False)["rank"].agg(list).to_dict() == {
        "big": [0, 1, 2, 3, 5, 8, 9, 10, 11], "small": [0, 1, 2]}
    assert sentence == ("Runs of more than 8 ranks name the 4 ranks that wait least, the 4 that wait most and the "
                        "straggler: big (9 of 12); their charts show every rank.")
    assert named_ranks(waits[waits["run_id"] == "small"], limit=8)[1] == ""


def test_batch_sweep_memory_shows_where_memory_runs_out(tmp_path):
    """Micro-batch 1 and 2 fit an H100 80GB (peaks of 30 and 61.5 GiB allocated), micro-batch 4 ran out of
    memory: its row has no throughput and stays out of the throughput table, but the memory table and its note
    show it; the headroom is the capacity the platform's name gives less the peak (80 - 61.5 = 18.5 GiB)."""
    from trainperf.report.batch_size import analyse, memory, memory_notes, sweeps

    common = {"experiment": "sweep", "gpus": 1, "platform": "NVIDIA H100 80GB HBM3", "grad_accum_steps": 1}
    rows = [{**common, "run_id": "mb1", "micro_batch_size": 1, "elapsed_s": 10.0, "tokens": 1e6,
             "peak_memory_gb": 30.0, "reserved_memory_gb": 32.0, "host_memory_gb": 3.0, "fits": True},
            {**common, "run_id": "mb2", "micro_batch_size": 2, "elapsed_s": 10.0, "tokens": 1.8e6,
             "peak_memory_gb": 61.5, "reserved_memory_gb": 70.0, "host_memory_gb": 3.1, "fits": True},
            {**common, "run_id": "mb4", "micro_batch_size": 4, "fits": False, "extra_out_of_memory": "rank 0 step 0"}]
    runs = sweeps(open_runs([_write(tmp_path, rows)]))
    assert runs["run_id"].tolist() == ["mb1", "mb2"] and analyse(runs).table["configuration"].tolist() == ["1 × 1", "2 × 1"]
    found = memory(runs)
    assert found["configuration"].tolist() == ["1 × 1", "2 × 1", "4 × 1"]
    assert found["fits"].tolist() == ["yes", "yes", "no: out of memory"]
    assert found["memory_headroom_gb"].tolist()[:2] == [50.0, 18.5] and np.isnan(found["memory_headroom_gb"].iloc[2])
    assert found["reserved_memory_gb"].tolist()[:2] == [32.0, 70.0]
    assert memory_notes(found) == ["sweep: micro-batch × accumulation 4 × 1 ran out of memory; the largest that fit, "
                                   "2 × 1, peaked at 61.5 GiB of 80 GiB (18.5 GiB left)."]


def test_a_platform_measured_only_by_oversubscribed_runs_is_not_headlined():
    """The minGPT DDP example of pytorch/examples on a loaded CPU (tests/data/clients/mingpt_ddp, every run
    oversubscribed): the platforms page gives its highest figure per device, 127,232 tokens (README, by hand) /
    6.907577 s (its steps files) / 2 devices = 9,210 tokens/s, as no measurement of the hardware."""
    data = [str(MINGPT)]
    runs = platforms.comparable(open_runs(data))
    text = platforms.analyse(runs, page.data_steps(data, runs)).headline.text
    assert text.startswith("cpu, mingpt-2x128: no configuration measures throughput without doubt")
    assert f"the highest figure, {127_232 / measured_window(MINGPT / 'batch-32') / 2:,.0f} tokens/s per device" in text
