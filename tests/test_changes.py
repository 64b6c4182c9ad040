"""What to change (each page's RULES, trainperf.report.what_to_change): every rule's gain against figures worked by hand from the
committed data (the seeds' tables in data/reference, which state some of these conclusions in words:
../shared/seeds/003 and 004) or from synthetic runs with a known injected cost; the section at the end
of every notebook; and pages built on the embedded data and on a user's ordinary data."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from trainperf import compare
from trainperf.report import batch_size, page, platforms, scaling, throughput, what_to_change
from trainperf.report.build.pipeline import REPORTS
from trainperf.runfolder import rankfile

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "data" / "reference"
RUNS = ROOT / "data" / "runs"
NOTEBOOKS = ROOT / "notebooks"


def _csv(tmp_path: Path, rows: list[dict], name: str = "runs.csv") -> str:
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return str(path)


def _scaling(runs: pd.DataFrame, steps=None) -> pd.DataFrame:
    """The changes the scaling page of ``runs`` lists."""
    return what_to_change.listed(what_to_change.candidates(scaling.analysis.RULES, scaling.analyse(runs, steps))[0])


def _changes(module, runs: pd.DataFrame, steps=None) -> pd.DataFrame:
    """The changes the page of ``module`` (throughput, batch_size or platforms) of ``runs`` lists."""
    return what_to_change.listed(what_to_change.candidates(module.RULES, module.analyse(runs, steps))[0])


def _compared(comparison) -> pd.DataFrame:
    """The changes the compare page of ``comparison`` lists."""
    return what_to_change.listed(what_to_change.candidates(what_to_change.COMPARISON_RULES, comparison)[0])


def _rule(frame: pd.DataFrame, words: str) -> pd.DataFrame:
    return frame[frame["change"].str.contains(words, regex=False)].reset_index(drop=True)


# --- rules, against figures worked by hand ---------------------------------------------------------------

def test_seed_004_a_rank_working_alone_outside_the_synchronised_steps_costs_two_fifths_of_the_epoch():
    """Seed 004 (../shared/seeds/004: rank 0's epoch 1384.64 s, rank 1's 806.75 s on 2 GPUs, the same
    communication, 41.09 s and 38.94 s): the other rank does not wait for rank 0 in the all-reduce, so rank
    0's extra 577.89 s lie outside the synchronised steps; 577.89 / 1384.64 = 41.7 % of the epoch. Batch
    128: (1188.86 − 693.97) / 1188.86 = 41.6 % on 2 GPUs and (706.41 − 415.71) / 706.41 = 41.2 % on 4,
    the mean 41.4 % and (494.89 + 290.70) / 2 = 392.80 s, two runs: medium."""
    runs = scaling.studies(page.open_runs([str(REFERENCE / "seed_004_scaling.csv")]))
    steps = page.open_steps([str(REFERENCE / "seed_004_ranks.csv")], runs)
    found = _rule(_scaling(runs, steps), "outside the synchronised steps")
    assert found["applies_to"].tolist() == ["seed004-batch64 (strong scaling): seed004-b64-g2",
                                            "seed004-batch128 (strong scaling): seed004-b128-g2, seed004-b128-g4"]
    assert found["expected_gain"].tolist() == pytest.approx([577.89 / 1384.64, (494.89 / 1188.86 + 290.70 / 706.41) / 2])
    assert found["seconds_saved"].tolist() == pytest.approx([577.89, (494.89 + 290.70) / 2])
    assert found["confidence"].tolist() == ["low", "medium"]
    assert (found["saved_per"] == "measured window").all() and "1,384.6 s against 806.8 s" in found.loc[0, "evidence"]


def _profiled(folder: Path, ranks: dict[int, list[dict]]) -> Path:
    """A run folder as the profiler writes it, each rank's steps given (``step_s`` and phases; ``gap_s``: the
    rank's time after the step before its next one, outside the steps); no warm-up."""
    folder.mkdir(parents=True)
    manifest = {"config": {"experiment": "synthetic", "seq_len": 16}, "warmup_steps": 0, "warmup_rule": "fixed",
                "environment": {"world_size": len(ranks), "device": "cpu", "strategy": "ddp",
                                "ranks": [{"rank": r, "node": "h"} for r in ranks]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for rank, steps in ranks.items():
        lines, start = [rankfile.header_line(rank, "h", 0, "h")], 0.0
        for number, step in enumerate(steps):
            values = dict.fromkeys(rankfile.LINE_COLUMNS)
            values.update(step=number, warmup=False, start_s=start, samples=8, tokens=128, micro_steps=1,
                          out_of_memory=False, **{k: v for k, v in step.items() if k != "gap_s"})
            lines.append(rankfile.step_line([values[c] for c in rankfile.LINE_COLUMNS]))
            start += step["step_s"] + step.get("gap_s", 0.0)
        lines.append(rankfile.end_line(len(steps), {}))
        (folder / f"steps-rank{rank}.jsonl").write_bytes(b"".join(lines))
    return folder


def test_a_rank_that_sleeps_outside_its_steps_costs_its_sleep_of_the_job(tmp_path):
    """Two ranks of 20 steps of 0.1 s with 0.02 s of communication each; rank 1 sleeps 0.05 s after each
    step but the last. Rank 0's window: 20 × 0.1 = 2.0 s; rank 1's: 2.0 + 19 × 0.05 = 2.95 s. Their
    communication is the same, so rank 0 does not wait for the sleep inside the steps: 0.95 s outside them,
    0.95 / 2.95 = 32.2 % of the job."""
    step = {"step_s": 0.1, "comm_s": 0.02, "forward_s": 0.03, "backward_s": 0.05}
    run = _profiled(tmp_path / "data" / "sleeper", {0: [step] * 20, 1: [{**step, "gap_s": 0.05}] * 19 + [step]})
    runs = throughput.measured(page.open_runs([str(run)]))
    found = _rule(_changes(throughput, runs, page.data_steps([str(run)], runs)),
                  "outside the synchronised steps")
    assert found["expected_gain"].tolist() == pytest.approx([0.95 / 2.95], rel=1e-3)
    assert found["seconds_saved"].tolist() == pytest.approx([0.95], rel=1e-3)
    assert found.loc[0, "confidence"] == "low"


def test_a_data_phase_of_known_share_is_found_with_its_interval_from_the_steps(tmp_path):
    """One rank, 40 steps of 0.10 s of which 0.03 s wait for data (±0.002 s alternating): 30 % of the step,
    and the block bootstrap of its steps gives an interval excluding 0: high. Left out below 2 %: a run
    whose data loading is 0.001 s of 0.1 s (1 %)."""
    slow = [{"step_s": 0.1, "data_s": 0.03 + (0.002 if i % 2 else -0.002), "forward_s": 0.03, "backward_s": 0.04}
            for i in range(40)]
    quick = [{**s, "data_s": 0.001} for s in slow]
    data = [str(_profiled(tmp_path / "data" / "loader", {0: slow})),
            str(_profiled(tmp_path / "other" / "quick", {0: quick}))]
    runs = page.open_runs(data[:1])
    found, _ = what_to_change.candidates(throughput.RULES, throughput.analyse(runs, page.data_steps(data[:1], runs)))
    loading = _rule(found, "Load the next batch")
    assert loading["expected_gain"].tolist() == pytest.approx([0.30], rel=0.01)
    assert loading["confidence"].tolist() == ["high"] and loading["listed"].all()
    runs = page.open_runs(data[1:])
    quiet, _ = what_to_change.candidates(throughput.RULES, throughput.analyse(runs, page.data_steps(data[1:], runs)))
    assert _rule(quiet, "Load the next batch")["expected_gain"].tolist() == pytest.approx([0.01], rel=0.01)
    assert not _rule(quiet, "Load the next batch")["listed"].any()


def test_exposed_communication_from_repeats_is_high_and_all_communication_only_an_upper_bound(tmp_path):
    """Two repeats on 2 devices with 12 s and 13 s of exposed communication in 100 s: 12.5 % of the step; its
    interval from the repeats, 0.125 ± 12.706 × 0.00707 / √2 = 6.1 % to 18.9 %, excludes 0: high. The same
    runs with only all their communication (comm_s): an upper bound, low."""
    rows = [{"run_id": f"r{i}", "experiment": "e", "gpus": 2, "elapsed_s": 100.0, "tokens": 1e6,
             "comm_exposed_s": c, "comm_s": 2 * c} for i, c in enumerate((12.0, 13.0))]
    found = _rule(_scaling(page.open_runs([_csv(tmp_path, rows)])), "Hide more of the comm")
    assert found["expected_gain"].tolist() == pytest.approx([0.125])
    assert found["confidence"].tolist() == ["high"]
    assert "6.1 % to 18.9 %" in found.loc[0, "evidence"]
    total = [{k: v for k, v in r.items() if k != "comm_exposed_s"} for r in rows]
    found = _rule(_scaling(page.open_runs([_csv(tmp_path, total, "total.csv")])), "Hide more")
    assert found["expected_gain"].tolist() == pytest.approx([0.25]) and found["confidence"].tolist() == ["low"]


def test_more_processes_than_cores_cost_what_the_fewer_processes_gain(tmp_path):
    """Repeats at 2 processes, 2,010 and 1,990 tokens/s, and oversubscribed at 4, 1,610 and 1,590: running 2
    gains 2,000 / 1,600 − 1 = 25 % of tokens/s, beyond the repeats' noise: high."""
    rows = [{"run_id": f"p{g}-r{i}", "experiment": "e", "gpus": g, "elapsed_s": 10.0, "tokens": rate * 10,
             "oversubscribed": g == 4, "extra_cpu_cores": 2}
            for g, rates in ((2, (2010.0, 1990.0)), (4, (1610.0, 1590.0))) for i, rate in enumerate(rates)]
    runs = throughput.measured(page.open_runs([_csv(tmp_path, rows)]))
    found = _rule(_changes(throughput, runs), "processes instead of")
    assert found["change"].tolist() == ["Run 2 processes instead of 4: no more busy processes than the 2 cores"]
    assert found["expected_gain"].tolist() == pytest.approx([0.25])
    assert found["confidence"].tolist() == ["high"]


def test_seed_000_per_device_throughput_drops_at_the_first_step_across_a_node():
    """Seed 000: 122,599.14 tokens/s on 4 GPUs of one node (30,649.8 per GPU), 205,907.53 on 8 across two
    (25,738.4): recovering the drop gains 30,649.8 / 25,738.4 − 1 = 19.1 % per device; one run each: low."""
    runs = throughput.measured(page.open_runs([str(REFERENCE / "seed_000_throughput.csv")]))
    found = _rule(_changes(throughput, runs), "communication between nodes")
    assert found["expected_gain"].tolist() == pytest.approx([(122_599.1365 / 4) / (205_907.5329 / 8) - 1], rel=1e-6)
    assert found["gain_of"].tolist() == ["throughput per device"] and found["confidence"].tolist() == ["low"]
    assert "4 devices on 1 node → 8 on 2 nodes" in found.loc[0, "evidence"]


def test_seed_003_larger_micro_batches_and_the_time_outside_the_training_loop():
    """Seed 003 (../shared/seeds/003): 16,150 tokens/s at micro-batch 1,024, 15,250 at 512: micro-batches
    below 1,024 lose, 16,150 / 15,250 − 1 = 5.9 %, single figures: low; on the same work (the most any
    configuration measured, 15,250 × 35.54 = 541,985 tokens) the loop takes 35.54 s against 541,985 /
    16,150 = 33.56 s. Yet 512 finishes first in all, as the seed concludes. Its timers: the train worker
    outside the epoch takes 35.60 s a run (32.25, 32.22, 31.91, 31.52, 34.30, 34.49, 52.48), of a mean total
    of 141.73 s (314.00 … 102.82): 25.1 %, seen in 7 runs: medium."""
    runs = batch_size.sweeps(page.open_runs([str(REFERENCE / "seed_003_batch_size.csv")]))
    found = _changes(batch_size, runs)
    batch = _rule(found, "Use micro-batches")
    assert batch["change"].tolist() == ["Use micro-batches of 1,024 or more (1,024 × 1 is the fastest)"]
    assert batch["expected_gain"].tolist() == pytest.approx([16150 / 15250 - 1])
    assert batch["seconds_saved"].tolist() == pytest.approx([35.54 - 15250 * 35.54 / 16150])
    assert batch["confidence"].tolist() == ["low"] and "512 × 2 finished first" in batch.loc[0, "evidence"]
    worker = _rule(found, "train worker outside the epoch")
    worked = [300.29 - 268.04, 171.14 - 138.92, 105.70 - 73.79, 82.20 - 50.68, 76.43 - 42.13, 73.23 - 38.74,
              88.91 - 36.43]
    totals = [314.00, 184.91, 118.89, 95.20, 89.86, 86.43, 102.82]
    assert worker["expected_gain"].tolist() == pytest.approx([sum(worked) / sum(totals)])
    assert worker["seconds_saved"].tolist() == pytest.approx([sum(worked) / 7])
    assert worker["confidence"].tolist() == ["medium"] and worker["gain_of"].tolist() == ["wall clock (goodput)"]
    assert found["expected_gain"].is_monotonic_decreasing and len(found) <= what_to_change.MOST


def test_a_profiled_checkpoint_after_the_last_step_is_its_share_of_the_wall_clock(tmp_path):
    """A profiled run whose steps take 20 × 0.1 s and that saved a 0.5 s checkpoint after them: 0.5 s of its
    wall clock (2.0 s of steps + 0.5 s, closed at once): 20 %."""
    run = _profiled(tmp_path / "data" / "checkpointed", {0: [{"step_s": 0.1}] * 20})
    (run / "events-rank0.jsonl").write_text('{"format": "trainperf-events", "version": 1, "rank": 0}\n'
                                            '{"phase": "checkpoint", "start_s": 2.0, "seconds": 0.5}\n')
    steps = (run / "steps-rank0.jsonl").read_text().splitlines()
    steps[-1] = json.dumps({**json.loads(steps[-1]), "wall_s": 2.5})
    (run / "steps-rank0.jsonl").write_text("\n".join(steps) + "\n")
    runs = throughput.measured(page.open_runs([str(run)]))
    found = _rule(_changes(throughput, runs), "checkpoint")
    assert found["expected_gain"].tolist() == pytest.approx([0.2], rel=1e-3)
    assert found["seconds_saved"].tolist() == pytest.approx([0.5], rel=1e-3) and found["saved_per"].tolist() == ["run"]


def test_the_platforms_page_names_the_settings_a_faster_platform_used_without_a_gain():
    """llm-foundry's MPT-350M table: the A100 80GB's best configuration per device (69,330 tokens/s) used
    micro-batch × accumulation 128 × 2, the A100 40GB's (66,285) 64 × 4: try 128 × 2 on the 40GB. The
    margin, 4.6 %, is the hardware's too: no gain given, low."""
    runs = platforms.comparable(page.open_runs([str(REFERENCE / "llmfoundry_mpt.csv")]))
    found = _rule(_changes(platforms, runs), "micro-batch × accumulation 128 × 2")
    row = found[found["applies_to"] == "MPT-350M on NVIDIA A100 SXM 40GB"].iloc[0]
    assert row["change"] == ("Try on NVIDIA A100 SXM 40GB the settings NVIDIA A100 SXM 80GB's best configuration "
                             "used: micro-batch × accumulation 128 × 2")
    assert pd.isna(row["expected_gain"]) and row["confidence"] == "low" and "4.6 % faster" in row["evidence"]


def _side(tmp_path: Path, name: str, rates: tuple[float, ...]) -> compare.Side:
    rows = [{"run_id": f"{name}{i}", "experiment": "e", "gpus": 1, "elapsed_s": 10.0, "tokens": r * 10}
            for i, r in enumerate(rates)]
    return compare.read_side(_csv(tmp_path, rows, f"{name}.csv"), label=name)


def test_a_comparison_keeps_the_faster_side_or_says_how_many_runs_would_tell(tmp_path):
    """Repeats 1,000/1,010/990 against 1,200/1,210/1,190 tokens/s: the candidate is 20 % faster beyond the
    noise: keep it, high; the other way round, keep the baseline: 1,200 / 1,000 − 1 = 20 % again. The
    embedded DDP and FSDP runs (−5.9 %, 95 % interval −22.0 % to +13.6 %) are inconclusive: about 30 runs a
    side would tell."""
    slow, fast = _side(tmp_path, "slow", (1000.0, 1010.0, 990.0)), _side(tmp_path, "fast", (1200.0, 1210.0, 1190.0))
    kept = _compared(compare.compare(slow, fast))
    assert kept["change"].tolist() == ["Keep the candidate"] and kept["confidence"].tolist() == ["high"]
    assert kept["expected_gain"].tolist() == pytest.approx([0.2])
    reverted = _compared(compare.compare(fast, slow))
    assert reverted["change"].tolist() == ["Keep the baseline: the candidate is slower"]
    assert reverted["expected_gain"].tolist() == pytest.approx([0.2])
    strategy = RUNS / "bench-cpu-small-fp32-strategy"
    sides = [compare.read_side(*(strategy / f"bench-cpu-small-fp32-strategy-{s}-p2-r{r}" for r in (1, 2)))
             for s in ("ddp", "fsdp")]
    found = _compared(compare.compare(*sides))
    assert found["change"].tolist() == ["Measure more before deciding: about 30 runs a side would detect 2 %"]


# --- a user's ordinary data --------------------------------------------------------------------------

ORDINARY = {
    "2x2 sweep": [{"run_id": f"mb{b}-p{g}", "experiment": "my-sweep", "platform": "cpu", "model": "m", "gpus": g,
                   "micro_batch_size": b, "global_batch_size": b * g, "tokens": rate * 10, "elapsed_s": 10.0}
                  for (b, g), rate in {(8, 1): 4096.0, (8, 2): 7447.0, (16, 1): 4551.0, (16, 2): 8402.0}.items()],
    "single run": [{"run_id": "only", "experiment": "e", "gpus": 1, "tokens": 1e6, "elapsed_s": 100.0}],
    "elapsed only": [{"run_id": f"g{g}", "experiment": "e", "gpus": g, "elapsed_s": 100.0 / g ** 0.9}
                     for g in (1, 2, 4)],
}


@pytest.mark.parametrize("data", ORDINARY)
def test_ordinary_data_without_phases_gets_a_section_that_says_why_it_supports_no_change(tmp_path, data):
    runs = page.open_runs([_csv(tmp_path, ORDINARY[data])])
    for kind in ("throughput", "scaling"):
        text = (scaling.what_to_change(scaling.analyse(runs)) if kind == "scaling" else what_to_change.section(
            *what_to_change.candidates(throughput.RULES, SimpleNamespace(runs=runs, steps=None)))).text
        assert text.startswith("The data supports no change: ") and "no run records data loading" in text, text


def test_a_2x2_sweep_supports_its_larger_micro_batch_on_each_device_count(tmp_path):
    """4,551 / 4,096 − 1 = 11.1 % on one process, 8,402 / 7,447 − 1 = 12.8 % on two: single figures, low."""
    runs = batch_size.sweeps(page.open_runs([_csv(tmp_path, ORDINARY["2x2 sweep"])]))
    found = _changes(batch_size, runs)
    assert found["expected_gain"].tolist() == pytest.approx([8402 / 7447 - 1, 4551 / 4096 - 1])
    assert found["applies_to"].tolist() == ["my-sweep (2 devices): micro-batches below 16",
                                            "my-sweep (1 device): micro-batches below 16"]
    assert "1 change" not in batch_size.what_to_change(batch_size.analyse(runs)).text


# --- the notebooks and the pages --------------------------------------------------------------------------

@pytest.mark.parametrize("name", REPORTS)
def test_every_notebook_ends_with_what_to_change(name):
    cells = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"]
    headings = [line for c in cells if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()
                if line.startswith("## ")]
    assert headings[-1] == "## What to change"
    assert cells[-2]["cell_type"] == "markdown" and "".join(cells[-2]["source"]).startswith("## What to change")
    call = {"throughput": "throughput.what_to_change(", "scaling": "scaling.what_to_change(",
            "batch_size": "batch_size.what_to_change(", "platforms": "compare.what_to_change(",
            "compare": "what_to_change.comparison("}[name]
    assert cells[-1]["cell_type"] == "code" and "".join(cells[-1]["source"]).startswith(call)


EXPECTED = {
    # seed 000's first step across nodes (19.1 % per device, above)
    "throughput": ["Look at communication between nodes first", "19.1 %"],
    # seed 004's rank 0 outside the synchronised steps (41.7 %, 577.89 s, above)
    "scaling": ["Move the work one rank does alone outside the synchronised steps", "41.7 %", "577.89 s"],
    # seed 003's train worker outside the epoch (25.1 %) and micro-batches below 1,024 (5.9 %)
    "batch_size": ["Shorten the train worker outside the epoch", "25.1 %", "Use micro-batches of 1,024 or more"],
    "platforms": ["Try on NVIDIA A100 SXM 40GB the settings"],
    # the embedded DDP against FSDP: inconclusive
    "compare": ["Measure more before deciding: about 30 runs a side would detect 2 %"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", REPORTS)
def test_the_embedded_pages_end_with_the_changes_their_data_supports(tmp_path_factory, name):
    from test_report import _built_once, _visible

    text = _visible((_built_once(tmp_path_factory, "reports-embedded") / f"{name}.html").read_text())
    last = text.rindex("What to change")
    assert "Claims checked" not in text[last:] and "Data quality" not in text[last:]
    for expected in EXPECTED[name]:
        assert expected in text[last:], (name, expected)
    assert "Expected gain" in text[last:] and "Confidence" in text[last:]


MINGPT = ROOT / "tests" / "data" / "clients" / "mingpt_ddp"
"""Three runs of a public DDP script, all oversubscribed (measured on a loaded machine; README there)."""


def test_runs_no_change_is_concluded_from_are_named_as_the_reason_not_said_to_lack_their_figures():
    """Every run records its phases, exposed communication, data loading and wall clock, and every run is
    oversubscribed: the section says so, not that no run records them. With batch-8 and batch-32 alone left
    oversubscribed, the rules that lack evidence in scale-p2 say so, and a last sentence names the two."""
    runs = throughput.measured(page.open_runs([str(MINGPT)]))
    text = throughput.what_to_change(throughput.analyse(runs)).text
    assert text == ("The data supports no change: every run shown is projected, oversubscribed or incomplete "
                    "(batch-8, batch-32, scale-p2), and no change is concluded from such runs.")
    some = runs.assign(oversubscribed=runs["run_id"] != "scale-p2")
    _, lacking = what_to_change.candidates(throughput.RULES, throughput.analyse(some))
    assert lacking[-1] == ("none of these looks at batch-8, batch-32, projected, oversubscribed or incomplete runs, "
                           "from which no change is concluded")
    assert not any("no run records data loading" in line for line in lacking)  # scale-p2 records it
