"""The scaling page's rules on seed data (data/reference, its README's figures) and on synthetic runs
written here: each study named with its kind, rows that were projected, oversubscribed or incomplete
marked and never concluded from, known errors beside their rows, projections only as far as the data
reaches, one colour per experiment, and ranks whose extra time lies outside the synchronised steps."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from trainperf.report import page, run_labels, scaling, theme, throughput
from trainperf.report.page import open_runs, open_steps
from trainperf.runfolder import rankfile

matplotlib.use("Agg")
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference"


def _write(tmp_path: Path, rows: list[dict], name: str = "runs.csv") -> str:
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _seeds() -> pd.DataFrame:
    return scaling.studies(open_runs([str(REFERENCE / n) for n in ("seed_000_throughput.csv", "seed_002_scaling.csv",
                                                                   "seed_004_scaling.csv")]))


# --- strong or weak, beside every name ------------------------------------------------------

def test_each_study_is_named_with_its_kind_wherever_the_page_names_it():
    runs = _seeds()
    # seed 000: 22,528 tokens per GPU per step (weak); seed 002's throughput table: 32 images per GPU (weak);
    # its cost table and seed 004: the same work at every GPU count (strong)
    assert list(dict.fromkeys(runs["experiment"])) == [
        "seed000-scaling (weak scaling)", "seed002-throughput (weak scaling)", "seed002-cost (strong scaling)",
        "seed004-batch64 (strong scaling)", "seed004-batch128 (strong scaling)"]
    assert scaling.analyse(runs).headline.text.startswith("seed000-scaling (weak scaling): ")
    assert scaling.analyse(runs).laws[0].startswith("seed000-scaling (weak scaling): the same work per device")
    assert set(scaling.analyse(runs).table["experiment"]) == set(runs["experiment"])
    # weak scaling is never given a Karp-Flatt fraction or an Amdahl fit
    frame = scaling.analyse(runs).table
    assert frame.loc[frame["experiment"] == "seed000-scaling (weak scaling)", "serial_fraction"].isna().all()
    assert [list(p.fits) for p in scaling.analyse(runs).projections if "weak" in p.experiment] == [["usl"]]


def test_an_experiment_holding_both_is_shown_as_a_strong_and_a_weak_study_sharing_its_one_device_run(tmp_path):
    # 1 x 8, 2 x 4, 4 x 2 hold the global batch at 8; 1 x 8, 2 x 8, 4 x 8 hold 8 per device. Each study is named
    # for what its runs hold, the 1-device run in both; no page or label pairs 8 x 1 with "micro-batch 4"
    rows = [{"run_id": r, "experiment": "e", "gpus": g, "micro_batch_size": b, "grad_accum_steps": 1,
             "samples_per_s": x} for r, g, b, x in (("s1", 1, 8, 1000.0), ("s2", 2, 4, 1800.0), ("s4", 4, 2, 3000.0),
                                                     ("w2", 2, 8, 1900.0), ("w4", 4, 8, 3600.0))]
    runs = scaling.studies(open_runs(_write(tmp_path, rows)))
    members = runs.groupby("experiment", sort=False)["run_id"].agg(list).to_dict()
    assert members == {"e (global batch 8; strong scaling)": ["s1", "s2", "s4"],
                       "e (8 per device; weak scaling)": ["s1", "w2", "w4"]}
    frame = scaling.analyse(runs).table.set_index(["experiment", "gpus"])
    # by hand: strong 1.8x and 3.0x (90 %, 75 %) with Karp-Flatt 1/9; weak 1.9x and 3.6x (95 %, 90 %), no Karp-Flatt
    strong, weak = frame.loc["e (global batch 8; strong scaling)"], frame.loc["e (8 per device; weak scaling)"]
    assert strong["scaling_multiplier"].tolist() == pytest.approx([1.0, 1.8, 3.0])
    assert strong["scaling_efficiency"].tolist() == pytest.approx([1.0, 0.9, 0.75])
    assert strong["serial_fraction"].iloc[1:].tolist() == pytest.approx([1 / 9, 1 / 9])
    assert weak["scaling_multiplier"].tolist() == pytest.approx([1.0, 1.9, 3.6])
    assert weak["scaling_efficiency"].tolist() == pytest.approx([1.0, 0.95, 0.9]) and weak["serial_fraction"].isna().all()
    assert not scaling.analyse(runs).confounded
    assert page.header("t", runs).text.startswith("t\n5 runs · experiments: ")  # s1 counted once
    # the throughput page groups by configuration: each of the 5 configurations once
    assert len(throughput.table(open_runs(_write(tmp_path, rows)))) == 5


# --- projected, oversubscribed and incomplete rows; known errors -------------------------------

def test_projected_rows_and_known_errors_of_seed_002_are_marked_beside_their_rows_and_never_concluded_from():
    frame = scaling.analyse(_seeds()).table.set_index(["experiment", "gpus"])
    cost = frame.loc["seed002-cost (strong scaling)"]
    # every time of the cost table is the source's projection (measured = false); its 64-GPU row's 16 h does
    # not follow from the throughput (data/reference/README.md: 14.7 h)
    assert cost["marks"].str.startswith("projected").all() and not cost["concluded"].any()
    assert cost.loc[64, "marks"] == "projected; known error"
    assert run_labels.known_errors(cost.loc[[64]]) == [
        "64 GPUs: 16 h does not follow from the throughput: the epoch size of the 1–32 GPU rows gives 14.7 h "
        "($2,823, cost efficiency 0.77)."]
    # the FSDP rows of the throughput table: a batch of 64 printed, a throughput that matches 32
    throughput = frame.loc["seed002-throughput (weak scaling)"]
    assert throughput.loc[64, "marks"] == "known error" and throughput.loc[32, "marks"] == ""
    assert run_labels.known_errors(throughput)[0].startswith("64 GPUs, micro-batch 64, fsdp: printed batch 64, but "
                                                          "64 × 64 / 0.0362 s = 113,149 img/s")
    assert "marks" in scaling.multipliers.shown_columns(cost.reset_index())
    # the cost table's falling serial fraction (0.0111 -> 0.0067) is not read as a trend
    notes = {n.split(":")[0]: n for n in scaling.analyse(_seeds()).serial_notes}
    assert notes["seed002-cost (strong scaling)"].startswith("seed002-cost (strong scaling): no trend of e is read")
    assert "64 devices (projected; known error)" in notes["seed002-cost (strong scaling)"]
    (cost_note,) = scaling.analyse(_seeds()).cost_notes
    assert cost_note.endswith("by figures that are not all measurements (see their marks), so no conclusion.")
    priced = scaling.analyse(_seeds()).cost
    assert priced["marks"].str.startswith("projected").all() and len(run_labels.known_errors(priced)) == 1


def test_a_projected_row_is_shown_but_neither_fitted_nor_headlined(tmp_path):
    # strong scaling, 1 000 tokens per step, measured at 1-8 devices; the source projected 16
    rates = {1: 1000.0, 2: 1900.0, 4: 3500.0, 8: 6000.0, 16: 9000.0}
    rows = [{"run_id": f"g{n}", "experiment": "e", "gpus": n, "global_batch_size": 8, "tokens": r * 10,
             "elapsed_s": 10.0, "measured": n < 16} for n, r in rates.items()]
    runs = scaling.studies(open_runs(_write(tmp_path, rows)))
    frame = scaling.analyse(runs).table
    assert frame["marks"].tolist() == ["", "", "", "", "projected"]
    assert frame["concluded"].tolist() == [True] * 4 + [False]
    # 6,000 / 1,000 = 6.0x on 8 devices, 75 %: not the projected 9.0x on 16
    assert scaling.analyse(runs).headline.text == "e (strong scaling): 6.0× faster on 8 devices than on 1 — 75 % scaling efficiency."
    (projection,) = scaling.analyse(runs).projections
    assert projection.p.tolist() == [1, 2, 4, 8] and projection.target == 64
    (note,) = scaling.analyse(runs).serial_notes
    assert "at 2, 4, 8× the baseline devices" in note and note.endswith("Left out: 16 devices (projected).")


def _run_folder(folder: Path, world: int, ranks: list[int], tokens: int, step_s: float) -> None:
    """A profiler run folder of ``world`` ranks, of which those in ``ranks`` wrote their steps file:
    6 steps (the first warm-up) of ``step_s`` seconds and ``tokens`` tokens per rank."""
    folder.mkdir(parents=True)
    config = {"experiment": "grow", "global_batch_size": 8, "micro_batch_size": 8 // world}
    (folder / "manifest.json").write_text(json.dumps({
        "config": config, "warmup_steps": 1,
        "environment": {"world_size": world, "device": "cpu", "strategy": "ddp",
                        "ranks": [{"rank": r, "host": "h", "node": "h"} for r in range(world)]}}))
    for rank in ranks:
        lines = [rankfile.header_line(rank, "h", None, "h")]
        for step in range(6):
            values = dict.fromkeys(rankfile.LINE_COLUMNS)
            values.update(step=step, warmup=step == 0, start_s=step * step_s, step_s=step_s, tokens=tokens,
                          samples=8 // world, micro_steps=1, out_of_memory=False)
            lines.append(rankfile.step_line([values[c] for c in rankfile.LINE_COLUMNS]))
        lines.append(rankfile.end_line(6, {}))
        (folder / f"steps-rank{rank}.jsonl").write_bytes(b"".join(lines))


def test_a_run_with_a_missing_rank_file_is_marked_incomplete_and_never_headlines(tmp_path):
    """Strong scaling, 8 samples (4,096 tokens) a step: 1 rank at 1 s a step, 2 at 0.55 s, 4 at 0.4 s — but
    rank 3 of the 4-rank run left no steps file, so its tokens/s counts 3 of 4 ranks' work."""
    _run_folder(tmp_path / "data" / "p1", 1, [0], 4096, 1.0)
    _run_folder(tmp_path / "data" / "p2", 2, [0, 1], 2048, 0.55)
    _run_folder(tmp_path / "data" / "p4", 4, [0, 1, 2], 1024, 0.4)
    runs = scaling.studies(open_runs(str(tmp_path / "data")))
    assert runs.set_index("run_id")["complete"].to_dict() == {"p1": True, "p2": True, "p4": False}
    frame = scaling.analyse(runs).table.set_index("gpus")
    assert frame.loc[4, "marks"] == "incomplete" and not frame.loc[4, "concluded"]
    # 4,096 tokens per 0.55 s against 4,096 per 1 s: 1.8x on 2 devices, 91 %
    assert scaling.analyse(runs).headline.text == ("grow (strong scaling): 1.8× faster on 2 devices than on 1 — 91 % "
                                           "scaling efficiency.")
    header = page.header("t", runs).text
    assert "1 run incomplete (p4): a rank's steps file is missing or a rank stopped early" in header
    assert run_labels.with_marks(runs[["run_id"]], runs)["marks"].tolist() == ["", "", "incomplete"]
    # its three ranks' 3 × 1,024 tokens per 0.4 s (7,680 tokens/s) beat the 2 ranks' 4,096 per 0.55 s (7,447),
    # but an incomplete run never headlines a throughput
    assert runs.set_index("run_id")["tokens_per_s"].to_dict() == pytest.approx({"p1": 4096, "p2": 4096 / 0.55,
                                                                                "p4": 3072 / 0.4})
    assert throughput.analyse(throughput.measured(runs)).headline.text.startswith("Peak throughput 7,447 tokens/s with 2 ")


# --- projections only as far as the data reaches ------------------------------------------------

def test_a_law_whose_band_spans_more_than_four_times_is_neither_drawn_nor_tabulated_there(tmp_path):
    """Amdahl through 1-8 devices (s = 0.05, with ±3 % noise): its band stays narrow to 64 devices. USL
    through the same 4 counts and 4 points has 3 parameters: its band is wide, and beyond the measured
    scale the data cannot project it."""
    p = np.array([1, 2, 4, 8], dtype=float)
    rates = 1000 * p / (0.05 + 0.95 / p) / p * np.array([1.0, 1.03, 0.97, 1.02])
    rows = [{"run_id": f"g{n:g}", "experiment": "e", "gpus": n, "global_batch_size": 8, "tokens": r * 10,
             "elapsed_s": 10.0} for n, r in zip(p, rates)]
    found = scaling.analyse(scaling.studies(open_runs(_write(tmp_path, rows)))).projections
    curves = scaling.projection.curves(found)
    for law, fitted in found[0].fits.items():
        drawn = curves[curves["curve"] == f"{scaling.projection.LAWS[law]} fit"]
        beyond = drawn[drawn["devices"] > 8]
        assert (beyond["high"] <= 4 * beyond["low"]).all()
        low, high = fitted.band(drawn["devices"].max() * 1.2, scaling.projection.BAND_LEVEL)
        assert drawn["devices"].max() == pytest.approx(64) or not high[0] <= 4 * low[0]
    table = scaling.projection.projected(found)
    wide = ~table["usl_band"].str.fullmatch(r"[\d.,]+×–[\d.,]+×")
    assert table.loc[wide, "usl"].isna().all()
    assert table.loc[wide, "usl_band"].str.startswith("the data cannot project this far: ").all()


# --- one colour per experiment -----------------------------------------------------------------

def test_every_chart_colours_an_experiment_alike_and_its_error_bars_in_its_colour():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    names = ["b", "a", "b", "c"]
    colors = theme.series_colors(names)
    assert colors == {"b": theme.SERIES[0], "a": theme.SERIES[1], "c": theme.SERIES[2]}
    frame = pd.DataFrame({"x": [1, 2, 3], "y": [1.0, 2.0, 3.0], "low": [0.5, 1.5, 2.5], "high": [1.5, 2.5, 3.5],
                          "experiment": ["a", "b", "a"]})
    fig, ax = plt.subplots()
    theme.error_bars(ax, frame, "x", "y", "low", "high", color=frame["experiment"].map(colors))
    bars = {to_hex(c.get_colors()[0]): len(c.get_segments()) for c in ax.collections if len(c.get_segments())}
    assert bars == {theme.SERIES[1]: 2, theme.SERIES[0]: 1}  # a's two bars in a's colour, b's in b's
    # the panels of a grid: each title in its experiment's colour
    ax.set_title("a")
    theme.color_titles({"a": ax}, colors)
    (title,) = [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text() == "a"]
    assert to_hex(title.get_color()) == theme.SERIES[1]
    plt.close(fig)


# --- ranks and communication -------------------------------------------------------------------

def test_seed_004_rank_0_computes_outside_the_synchronised_steps_and_one_gpu_reports_communication():
    runs = scaling.studies(open_runs([str(REFERENCE / "seed_004_scaling.csv")]))
    steps = open_steps([str(REFERENCE / "seed_004_ranks.csv")], runs)
    table = scaling.analyse(runs, steps).rank_phases
    # the runs whose slowest rank takes 1.1x its fastest or more: b64 on 2 GPUs, b128 on 2 and 4 (1.70x)
    assert list(dict.fromkeys(table["run_id"])) == ["seed004-b64-g2", "seed004-b128-g2", "seed004-b128-g4"]
    two = table[table["run_id"] == "seed004-b64-g2"].set_index("rank")
    # rank 0: 1384.64 s, of it 1335.39 s compute; rank 1: 806.75 s, 759.79 s compute (seed_004_ranks.csv)
    assert two.loc[0, "beyond_fastest_s"] == pytest.approx(1384.64 - 806.75)
    assert two.loc[0, "compute"] - two.loc[1, "compute"] == pytest.approx(1335.39 - 759.79)
    notes = scaling.analyse(runs, steps).rank_time_notes
    assert notes[0].startswith("Run seed004-b64-g2: rank 0 takes 577.9 s longer than rank 1 (1,384.6 s against "
                               "806.8 s), 575.6 s of it in compute. Yet the other ranks' communication is not "
                               "longer (38.9 s against its own 41.1 s)")
    assert "outside the synchronised steps" in notes[0] and len(notes) == 3
    # one GPU exchanges no gradients, yet the seed reports 50.93 s and 25.31 s of communication
    single = scaling.analyse(runs).single_device_comm
    assert [s.split(":")[0] for s in single] == ["Run seed004-b64-g1", "Run seed004-b128-g1"]
    assert single[0].startswith("Run seed004-b64-g1: 50.93 s of “communication” on a single device (2.3 % of")


def test_a_slow_rank_the_others_wait_for_in_communication_is_told_from_one_they_do_not_wait_for(tmp_path):
    """Two runs of 2 ranks, totals over the window in seconds. 'waited': rank 1 takes 1,400 s (1,380 s compute,
    20 s communication); rank 0 1,000 s, of it 320 s communication — 300 s more than rank 1's: it waits for
    rank 1 in the all-reduce. 'alone': rank 0 takes 1,000 s (980 s compute) and rank 1 700 s with the same
    20 s of communication: rank 1 does not wait, rank 0's extra 300 s lie outside the synchronised steps."""
    rows = []
    for run_id, ranks in (("waited", [(1000.0, 680.0, 320.0), (1400.0, 1380.0, 20.0)]),
                          ("alone", [(1000.0, 980.0, 20.0), (700.0, 680.0, 20.0)])):
        rows += [{"run_id": run_id, "rank": r, "step": 0, "warmup": False, "step_s": t, "compute_s": c, "comm_s": w}
                 for r, (t, c, w) in enumerate(ranks)]
    runs = open_runs(_write(tmp_path, [{"run_id": r, "experiment": "e", "gpus": 2, "elapsed_s": t}
                                       for r, t in (("waited", 1400.0), ("alone", 1000.0))]))
    steps = open_steps([_write(tmp_path, rows, "steps.csv")], runs)
    waited, alone = scaling.analyse(runs, steps).rank_time_notes
    assert waited.startswith("Run waited: rank 1 takes 400.0 s longer than rank 0 (1,400.0 s against 1,000.0 s), "
                             "700.0 s of it in compute. The other ranks' communication is 300.0 s longer than its "
                             "own: they wait for it in the synchronised steps")
    assert alone.startswith("Run alone: rank 0 takes 300.0 s longer than rank 1 (1,000.0 s against 700.0 s), "
                            "300.0 s of it in compute. Yet the other ranks' communication is not longer (20.0 s "
                            "against its own 20.0 s)")
    assert "outside the synchronised steps" in alone
    table = scaling.analyse(runs, steps).rank_phases.set_index(["run_id", "rank"])
    assert table.loc[("alone", 0), "beyond_fastest_s"] == 300.0 and table.loc[("alone", 1), "beyond_fastest_s"] == 0


def test_communication_on_one_device_is_named_only_beyond_a_percent_of_its_time(tmp_path):
    # 2 s of 1,000 s (0.2 %, a DDP all-reduce over one rank) is not named; 30 s of 1,000 s (3 %) is
    runs = open_runs(_write(tmp_path, [{"run_id": r, "experiment": "e", "gpus": 1, "elapsed_s": 1000.0, "comm_s": c}
                                       for r, c in (("quiet", 2.0), ("loud", 30.0))]))
    (note,) = scaling.analyse(runs).single_device_comm
    assert note.startswith("Run loud: 30.00 s of “communication” on a single device (3.0 % of its elapsed time)")


def test_the_hfu_note_is_left_out_of_a_page_that_shows_no_mfu(tmp_path):
    """Seed 001's four rows have an MFU (against dense peaks) and no activation checkpointing: their HFU is
    unknown, which matters on a page that shows MFU and HFU, not on the scaling page, which shows neither;
    a run with the setting recorded has no such note anywhere."""
    runs = open_runs([str(REFERENCE / "seed_001_platforms.csv")])
    note = "hfu: no activation_checkpointing"
    assert page.note_counts(runs).set_index("note").loc[note, "runs"] == 4
    assert note not in set(page.note_counts(runs, mfu=False)["note"])
    known = open_runs(_write(tmp_path, [{"run_id": "a", "experiment": "e", "platform": "NVIDIA H100 SXM",
                                         "precision": "bf16", "n_params": 1e9, "gpus": 1, "tokens": 1e5,
                                         "elapsed_s": 1.0, "activation_checkpointing": True}]))
    assert known["hfu"].iloc[0] == pytest.approx(known["mfu"].iloc[0] * 4 / 3)
    assert note not in set(page.note_counts(known)["note"])


# --- the training-only rate beside the rate with evaluation -------------------------------------

def test_a_run_that_evaluates_gets_its_training_only_rate_beside_the_window_rate(tmp_path):
    """One rank, 4 measured steps of 100 tokens: three of 1.0 s, and one of 1.5 s of which 0.5 s validate.
    Over the window, 400 tokens / 4.5 s = 88.9 tokens/s; training only, 400 / (4.5 - 0.5) = 100 tokens/s.
    A run without evaluation is not listed."""
    rows = [{"run_id": run, "rank": 0, "step": i, "warmup": i == 0, "step_s": 1.5 if run == "eval" and i == 2 else 1.0,
             "validation_s": 0.5 if run == "eval" and i == 2 else None, "tokens": 100}
            for run in ("eval", "plain") for i in range(5)]
    steps_path = _write(tmp_path, rows, "steps.csv")
    runs = open_runs(_write(tmp_path, [{"run_id": "eval", "experiment": "e", "gpus": 1, "tokens": 400, "elapsed_s": 4.5},
                                       {"run_id": "plain", "experiment": "e", "gpus": 1, "tokens": 400,
                                        "elapsed_s": 4.0}]))
    rates = run_labels.evaluation_rates(runs, open_steps([steps_path], runs))
    assert rates["run_id"].tolist() == ["eval"]
    row = rates.iloc[0]
    assert (row["unit"], row["evaluation_s"]) == ("tokens", 0.5)
    assert row["window_rate"] == pytest.approx(400 / 4.5) and row["training_rate"] == pytest.approx(100.0)
    assert row["evaluation_share"] == pytest.approx(0.5 / 4.5)


def test_seed_003_validation_beside_its_training_loop_is_said_to_be_unsplit():
    """Seed 003 gives each configuration's validation (12.97 s at micro-batch 16) beside its training loop's
    time, and no steps: which of the two its rate covers is its source's, and the page says so."""
    runs = open_runs([str(REFERENCE / "seed_003_batch_size.csv")])
    assert run_labels.evaluation_rates(runs, None).empty
    (note,) = run_labels.evaluation_notes(runs, None)
    assert note.startswith("seed003-bs16-acc64, seed003-bs32-acc32, seed003-bs64-acc16, seed003-bs128-acc8, …: "
                           "validation_s given beside elapsed_s")


SWEEP = Path(__file__).resolve().parent / "data" / "clients" / "mingpt_ddp_sweep"


def test_a_run_in_two_studies_is_one_run_in_the_rank_and_quality_sections():
    # pytorch/examples' minGPT DDP (README beside the runs): ddp2-bs8 (2 ranks × 8) is in the strong study with bs16
    # (global batch 16) and in the weak one with bs8 (8 per device); its ranks, its straggler sentence and the
    # data-quality rows name it once, as they name bs8 and bs16
    runs = scaling.studies(open_runs([str(SWEEP)]))
    assert runs["run_id"].value_counts()["ddp2-bs8"] == 2
    result = scaling.analyse(runs, open_steps([str(SWEEP)], runs))
    assert sorted(result.ranks["rank"][result.ranks["run_id"] == "ddp2-bs8"]) == [0, 1]
    assert [note.count("ddp2-bs8") for note in result.straggler_notes] == [1]
    quality = page.quality(runs).text
    assert "ddp2-bs8, ddp2-bs8" not in quality and "bs16, ddp2-bs8, bs8" in quality


def test_a_ddp_run_whose_rank_0_evaluates_gets_its_training_rate_from_the_wait_of_the_other_rank():
    # the same sweep by the script's own clock (README beside it): ddp2-bs8's rank 1 spent its 5.853 s of steps
    # 1.118 s waiting for rank 0's evaluations: 372,352 tokens / 4.735 s = 78,637 tokens/s of training; bs8 and
    # bs16: 373,184 / 6.263 s = 59,585 and 372,160 / 5.755 s = 64,666. The slowest rank, rank 1, evaluated nothing:
    # read from its window alone, ddp2-bs8 had no evaluation and no row
    runs = open_runs([str(SWEEP)])
    rates = run_labels.evaluation_rates(runs, open_steps([str(SWEEP)], runs)).set_index("run_id")["training_rate"]
    assert rates.to_dict() == pytest.approx({"bs8": 59_585, "bs16": 64_666, "ddp2-bs8": 78_637}, rel=0.005)
