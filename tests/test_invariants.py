"""Figures that cannot be true are emptied with their reason (trainperf.invariants), wherever they are shown:
derive's columns, the scaling page's Karp–Flatt fractions, the data-quality section and the command line."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from trainperf import derive
from trainperf.invariants import EFFICIENCY_TOLERANCE, violations
from trainperf.report import page, scaling
from trainperf.report.page import open_runs
from trainperf.table_rules import check_runs


def runs(*rows: dict) -> pd.DataFrame:
    return check_runs(pd.DataFrame(rows).assign(experiment="e"))


def notes_of(frame: pd.DataFrame, run_id: str) -> list[str]:
    text = frame.loc[frame["run_id"] == run_id, "notes"].iloc[0]
    return [] if pd.isna(text) else str(text).split("; ")


def test_a_karp_flatt_fraction_above_one_is_emptied_with_its_reason():
    # strong scaling (global batch 64 on 1 and 2 devices): 1,000 -> 800 tokens/s, S = 0.8, p = 2:
    # e = (1/0.8 - 1/2) / (1 - 1/2) = 1.5, not a serial share of anything
    d = derive(runs({"run_id": "g1", "gpus": 1, "global_batch_size": 64, "tokens_per_s": 1000.0},
                    {"run_id": "g2", "gpus": 2, "global_batch_size": 64, "tokens_per_s": 800.0}))
    two = d.set_index("run_id").loc["g2"]
    assert two["scaling_multiplier"] == pytest.approx(0.8) and two["scaling_efficiency"] == pytest.approx(0.4)
    assert pd.isna(two["serial_fraction"])
    assert ("serial_fraction: impossible, emptied: Karp–Flatt above 1: more devices were slower than the baseline, "
            "beyond what serial work explains") in notes_of(d, "g2")


def test_a_super_linear_strong_speedup_keeps_its_efficiency_but_not_a_negative_karp_flatt():
    # strong: 1,000 -> 2,100 tokens/s on 2 devices: E = 1.05, e = (1/2.1 - 1/2) / (1/2) = -0.0476
    d = derive(runs({"run_id": "g1", "gpus": 1, "global_batch_size": 64, "tokens_per_s": 1000.0},
                    {"run_id": "g2", "gpus": 2, "global_batch_size": 64, "tokens_per_s": 2100.0}))
    two = d.set_index("run_id").loc["g2"]
    assert two["scaling_efficiency"] == pytest.approx(1.05) and pd.isna(two["serial_fraction"])
    assert any(n.startswith("serial_fraction: impossible, emptied: Karp–Flatt below 0") for n in notes_of(d, "g2"))


def test_an_efficiency_far_above_one_is_emptied_under_weak_scaling_and_noted_under_strong():
    # weak: 16 samples per device (16, 32); 100 -> 244 samples/s on 2 devices: E = 1.22 > 1 + 0.10
    weak = derive(runs({"run_id": "w1", "gpus": 1, "global_batch_size": 16, "samples_per_s": 100.0},
                       {"run_id": "w2", "gpus": 2, "global_batch_size": 32, "samples_per_s": 244.0}))
    assert EFFICIENCY_TOLERANCE == 0.10
    w2 = weak.set_index("run_id").loc["w2"]
    assert w2["scaling_type"] == "weak"
    assert pd.isna(w2["scaling_efficiency"]) and pd.isna(w2["scaling_multiplier"])
    assert any(n.startswith("scaling_multiplier, scaling_efficiency, serial_fraction, cost_efficiency: impossible, "
                            "emptied: scaling efficiency more than 10% above 1 outside strong scaling") for n in notes_of(weak, "w2"))
    # the same rates with the global batch held at 32: strong scaling, a shrinking share per device; kept, noted
    strong = derive(runs({"run_id": "s1", "gpus": 1, "global_batch_size": 32, "samples_per_s": 100.0},
                         {"run_id": "s2", "gpus": 2, "global_batch_size": 32, "samples_per_s": 244.0}))
    assert strong.set_index("run_id").loc["s2", "scaling_efficiency"] == pytest.approx(1.22)
    assert any(n.startswith("scaling_efficiency: super-linear under strong scaling") for n in notes_of(strong, "s2"))


def test_phases_longer_than_the_step_are_emptied():
    # 10 s elapsed; forward 6 s + backward 5 s = 11 s > 10 s x 1.01: the timers cannot be right
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens": 1e6, "elapsed_s": 10.0, "forward_s": 6.0,
                     "backward_s": 5.0, "comm_s": 1.0},
                    {"run_id": "b", "gpus": 1, "tokens": 1e6, "elapsed_s": 10.0, "forward_s": 4.0,
                     "backward_s": 5.0, "comm_s": 1.0}))
    a, b = d.set_index("run_id").loc["a"], d.set_index("run_id").loc["b"]
    assert a[["forward_s", "backward_s", "comm_s", "compute_s", "comm_overhead"]].isna().all()
    assert any(": impossible, emptied: phases that never overlap" in n for n in notes_of(d, "a"))
    assert b["compute_s"] == pytest.approx(9.0) and b["comm_overhead"] == pytest.approx(0.1)  # 9 s + 1 s of 10 s


def test_the_data_quality_section_and_summarize_list_what_was_emptied(tmp_path):
    # an H100 at 2.44 x its dense peak (tests/test_derive.py's arithmetic): emptied, counted, printed
    table = tmp_path / "runs.csv"
    pd.DataFrame([{"run_id": "a", "experiment": "e", "gpus": 8, "tokens": 1.6e9, "elapsed_s": 3600.0,
                   "n_params": 6.7e9, "n_layers": 32, "d_model": 4096, "seq_len": 2048, "platform": "H100",
                   "precision": "bf16"}]).to_csv(table, index=False)
    derived = open_runs(str(table))
    assert derived["mfu"].isna().all()
    found = violations(derived)
    # above the H100's datasheet peak: its TFLOP/s cannot be true either
    assert found[["run_id", "figures"]].values.tolist() == [["a", "mfu, hfu, tflops_per_gpu, tflops_total"]]
    counted = page.impossible(derived)
    assert counted[["figures", "runs"]].values.tolist() == [["mfu, hfu, tflops_per_gpu, tflops_total", 1]]
    assert "Impossible figures, emptied" in page.quality(derived).text
    done = subprocess.run([sys.executable, "-m", "trainperf", "summarize", str(table)], capture_output=True,
                          text=True, check=True)
    assert "1 figure(s) emptied as impossible" in done.stderr
    assert "a: mfu, hfu, tflops_per_gpu, tflops_total: mfu above 1, more FLOP/s than the device's peak" in done.stderr


def test_the_scaling_page_plots_no_karp_flatt_outside_zero_one_and_says_why(tmp_path):
    # strong scaling, global batch 8: 1,000 tokens/s on 1 device, 1,800 on 2 (e = (1/1.8 - 1/2)/(1/2) = 0.111),
    # 1,500 on 4 (S = 1.5, e = (1/1.5 - 1/4) / (3/4) = 0.556), 900 on 8 (S = 0.9: e = (1/0.9 - 1/8) / (7/8) = 1.127)
    rates = {1: 1000.0, 2: 1800.0, 4: 1500.0, 8: 900.0}
    path = tmp_path / "runs.csv"
    pd.DataFrame([{"run_id": f"g{n}", "experiment": "e", "gpus": n, "global_batch_size": 8, "tokens": r * 10,
                   "elapsed_s": 10.0} for n, r in rates.items()]).to_csv(path, index=False)
    studied = scaling.studies(open_runs(str(path)))
    frame = scaling.analyse(studied).table
    assert frame["serial_fraction"].iloc[1:3].tolist() == pytest.approx([1 / 9, 5 / 9])
    assert pd.isna(frame["serial_fraction"].iloc[3]) and frame["serial_emptied"].tolist() == [False] * 3 + [True]
    notes = scaling.analyse(studied).serial_notes
    assert notes[0].startswith("e (strong scaling): the Karp–Flatt fraction e is outside [0, 1] at 8 devices")
    assert notes[0].endswith("not plotted.")

