"""trainperf compare on real run folders (tests/data/measured_runs), with injected slowdowns, and on runs tables."""

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

import trainperf
from trainperf import compare, stats
from trainperf.cli import main
from trainperf.errors import DataError
from trainperf.report.applicability import NotApplicable
from trainperf.report.page import open_side

RUNS = Path(__file__).parent / "data" / "measured_runs"  # real runs, kept as measured (see its README)
P2 = RUNS / "bench-cpu-small-fp32-strong-scaling" / "bench-cpu-small-fp32-strong-scaling-p2"
P4 = RUNS / "bench-cpu-small-fp32-strong-scaling" / "bench-cpu-small-fp32-strong-scaling-p4"


def altered(run, tmp_path, name, **changes):
    """A steps table of a real run with columns scaled (``step_s=1.2``) or, for a
    rank, delayed (``rank=(1, 0.05)``: rank 1's backward and step take 50 ms more)."""
    steps = trainperf.load_steps(run).drop(columns=["start_s"])
    steps["run_id"] = name
    rank = changes.pop("rank", None)
    for column, factor in changes.items():
        steps[column] = steps[column] * factor
    if rank is not None:
        hit = steps["rank"] == rank[0]
        steps.loc[hit, "backward_s"] += rank[1]
        steps.loc[hit, "step_s"] += rank[1]
    path = tmp_path / f"{name}.csv"
    steps.to_csv(path, index=False)
    return path


def test_a_run_against_itself_is_no_difference_exit_0(capsys):
    assert main(["compare", str(P2), str(P2)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("no detectable difference: candidate tokens/s +0.0% vs baseline (95 % interval -")
    assert any("each run is taken to vary by 8% (coefficient of variation) from run to run" in line for line in out)
    assert out[-1].endswith("; minimum effect 2%; run-to-run CV 8% assumed)")


# A run against a copy of itself with its step times scaled: nothing varies from run
# to run, so these tests of the within-run intervals say so with --run-cv 0.

def test_injected_20_percent_slowdown_is_slower_exit_1(tmp_path, capsys):
    slow = altered(P2, tmp_path, "slow", step_s=1.2)
    assert main(["compare", str(P2), str(slow), "--run-cv", "0"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("slower: candidate tokens/s -16.7% vs baseline")  # 1 / 1.2 - 1
    assert any("none assumed (--run-cv 0): the intervals cover each run's steps only" in line for line in out)
    assert out[-1].endswith("; minimum effect 2%; steps only)")


def test_a_faster_candidate_exits_0_and_says_faster(tmp_path, capsys):
    fast = altered(P2, tmp_path, "fast", step_s=0.8)
    assert main(["compare", str(P2), str(fast), "--run-cv", "0"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("faster: candidate tokens/s +25.0%")


def test_one_run_a_side_adds_the_run_to_run_variation_to_the_interval(tmp_path):
    slow = altered(P2, tmp_path, "slow", step_s=1.2)
    steps_only = compare.compare(compare.read_side(P2), compare.read_side(slow), run_cv=0)
    widened = compare.compare(compare.read_side(P2), compare.read_side(slow), run_cv=0.08)
    assert steps_only.verdict == "slower" and widened.verdict == "no detectable difference"
    # by hand: log ratio ± t(ν) · √(se_b² + se_c² + 2 · 0.08²), the 8 % taken as known, ν by Welch from
    # each run's blocks; se and blocks from each side's own bootstrap (seeds 0 and 1, as compare draws)
    sides = [compare.estimate_steps(compare.read_side(p), "tokens", [], seed=i) for i, p in enumerate((P2, slow))]
    total = [e.se_log ** 2 + 0.08 ** 2 for e in sides]
    dof_side = [t ** 2 / (e.se_log ** 4 / e.dof) for t, e in zip(total, sides)]
    dof = sum(total) ** 2 / sum(t ** 2 / d for t, d in zip(total, dof_side))
    half = scipy_stats.t.ppf(0.975, dof) * math.sqrt(sum(total))
    assert 1 + widened.difference.high == pytest.approx(1 / 1.2 * math.exp(half), rel=1e-9)
    assert 1 + widened.difference.low == pytest.approx(1 / 1.2 * math.exp(-half), rel=1e-9)


def test_runs_of_one_configuration_in_three_experiments_are_not_called_different():
    # three real runs of 2-process DDP at batch 16 (5,476-6,270 tokens/s), measured in three experiments
    # of one sweep: with one run a side and steps alone, 4 of their 6 ordered pairs were called different
    runs = [P2, RUNS / "bench-cpu-small-fp32-strategy" / "bench-cpu-small-fp32-strategy-ddp-p2",
            RUNS / "bench-cpu-small-fp32-weak-scaling" / "bench-cpu-small-fp32-weak-scaling-p2"]
    calls = [compare.compare(compare.read_side(a), compare.read_side(b), draws=500).verdict
             for a in runs for b in runs if a != b]
    assert calls == ["no detectable difference"] * 6


def test_min_effect_above_the_change_gives_no_verdict(tmp_path):
    slow = altered(P2, tmp_path, "slow", step_s=1.2)
    assert main(["compare", str(P2), str(slow), "--min-effect", "0.2"]) == 0  # -16.7 % < 20 %


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "missing"), str(P2)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing: no such file or folder" in err[0]
    # a folder of different configurations is not a set of repeats
    assert main(["compare", str(RUNS / "bench-cpu-small-fp32-batch-size"), str(P2)]) == 2
    assert "differ in 'micro_batch_size'" in capsys.readouterr().err


def test_the_phase_and_the_rank_that_moved(tmp_path):
    # rank 1 spends 50 ms more in backward per step: the job waits for it
    late = altered(P2, tmp_path, "late", rank=(1, 0.05))
    result = compare.compare(compare.read_side(P2), compare.read_side(late), run_cv=0)
    phases = result.phases.set_index("phase")
    assert phases.loc["backward", "moved"] and not phases.loc["forward", "moved"]
    assert phases.loc["backward", "delta_s"] == pytest.approx(0.025)  # mean over 2 ranks of +50 ms and 0
    ranks = result.ranks.set_index("rank")
    assert ranks.loc["1", "moved"] and ranks.loc["1", "delta_s"] == pytest.approx(0.05)
    assert ranks.loc["1", "candidate_slowest"] == 1.0
    assert any(note.startswith("Rank 1 is the slowest in 100% of the candidate's steps") for note in result.notes)


def test_results_are_deterministic_for_a_seed(tmp_path):
    slow = altered(P4, tmp_path, "slow", step_s=1.05)
    a, b = (compare.compare(compare.read_side(P4), compare.read_side(slow), seed=7) for _ in range(2))
    assert a.difference == b.difference
    c = compare.compare(compare.read_side(P4), compare.read_side(slow), seed=8)
    assert c.difference.estimate == a.difference.estimate and c.difference.low != a.difference.low


def test_repeats_use_the_hierarchical_interval(tmp_path):
    strategy = RUNS / "bench-cpu-small-fp32-strategy" / "bench-cpu-small-fp32-strategy-ddp-p2"
    weak = RUNS / "bench-cpu-small-fp32-weak-scaling" / "bench-cpu-small-fp32-weak-scaling-p2"
    side = compare.read_side(P2, strategy, weak)  # three runs of one configuration (ddp, 2 processes, batch 16)
    assert len(side.steps) == 3
    one = compare.compare(compare.read_side(P2), compare.read_side(weak), run_cv=0)
    three = compare.compare(side, compare.read_side(weak))
    assert "hierarchical" in three.notes[0] and "each run's steps only" in one.notes[1]
    width = lambda r: r.sides["high"].iloc[0] / r.sides["low"].iloc[0] - 1  # noqa: E731
    assert width(three) > 3 * width(one)  # the runs differ by up to 13 %: much more than their steps
    # the single candidate run is taken to vary from run to run as the three repeats do
    assert any("as much as the other side's 3 repeats" in note for note in three.notes)
    spread = three.difference.high - three.difference.low
    assert spread > 3 * (one.difference.high - one.difference.low)


def runs_table(tmp_path, name, rates):
    path = tmp_path / f"{name}.csv"
    pd.DataFrame({"run_id": [f"{name}-{i}" for i in range(len(rates))], "gpus": 8, "tokens": 1e6,
                  "elapsed_s": [1e6 / r for r in rates]}).to_csv(path, index=False)
    return path


def test_runs_table_rows_single_row_per_side_gives_no_interval(tmp_path, capsys):
    a, b = runs_table(tmp_path, "a", [1000.0]), runs_table(tmp_path, "b", [700.0])
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "no detectable difference (no repeats or steps): candidate tokens/s -30.0% vs baseline (no interval)"
    assert any("only the run-to-run variance across repeats" in line for line in out)
    assert any("no interval can be computed" in line for line in out)


def test_runs_table_repeats_give_a_t_interval(tmp_path):
    base, cand = [1000.0, 1020.0, 990.0], [900.0, 910.0, 895.0]
    result = compare.compare(compare.read_side(runs_table(tmp_path, "a", base)),
                             compare.read_side(runs_table(tmp_path, "b", cand)))
    se = [np.std(x, ddof=1) / (math.sqrt(3) * np.mean(x)) for x in (base, cand)]
    expected = stats.relative_difference(np.mean(base), se[0], 2, np.mean(cand), se[1], 2)
    assert result.difference.estimate == pytest.approx(np.mean(cand) / np.mean(base) - 1)
    assert result.difference.low == pytest.approx(expected.low)
    assert result.verdict == "slower" and result.exit_code == 1


def test_min_effect_must_be_a_fraction():
    with pytest.raises(DataError, match="min_effect"):
        compare.compare(compare.read_side(P2), compare.read_side(P2), min_effect=-1)


def test_compare_notebook_has_a_literal_parameters_cell_and_no_outputs():
    from trainperf.report.build.parameters import declared_parameters
    from trainperf.report.build.pipeline import NOTEBOOKS

    notebook = json.loads((NOTEBOOKS / "compare.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code[0]["metadata"].get("tags") == ["parameters"] and not any(c.get("outputs") for c in code)
    assert {"baseline_runs", "candidate_runs", "min_effect", "run_cv", "seed", "title"} <= set(
        declared_parameters(NOTEBOOKS / "compare.ipynb"))
    assert all(len("".join(c["source"]).splitlines()) <= 15 for c in code)


@pytest.mark.slow
def test_compare_report_renders_the_verdict_of_ddp_against_fsdp(tmp_path):
    from trainperf.report.build.pipeline import build, plan

    sides = [("baseline_runs", str(RUNS / "bench-cpu-small-fp32-strategy" / "bench-cpu-small-fp32-strategy-ddp-p2")),
             ("candidate_runs", str(RUNS / "bench-cpu-small-fp32-strategy" / "bench-cpu-small-fp32-strategy-fsdp-p2"))]
    result = build(plan(["compare"], parameters=sides, out_dir=tmp_path), workers=1)
    assert not result.failed, result.failed[0].error
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "compare.html").read_text())))
    # by hand from the run folders: tokens over the sum of each step's slowest rank
    rates = []
    for name in ("ddp-p2", "fsdp-p2"):
        steps = trainperf.load_steps(RUNS / "bench-cpu-small-fp32-strategy" / f"bench-cpu-small-fp32-strategy-{name}")
        steps = steps[~steps["warmup"]]
        rates.append(steps["tokens"].sum() / steps.groupby("step")["step_s"].max().sum())
    assert f"slower: candidate tokens/s {rates[1] / rates[0] - 1:+.1%} vs baseline" in text
    assert "each run is taken to vary by 8%" in text and "Which phase moved" in text
    index = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "index.html").read_text())))
    assert f"slower: candidate tokens/s {rates[1] / rates[0] - 1:+.1%} vs baseline" in index  # the verdict heads its card
    assert len(re.findall(r'<img [^>]*src="data:image/svg\+xml;base64,', (tmp_path / "compare.html").read_text())) >= 3
    # the page's tables speak as the other reports' (headers, phase names, yes / no) and it ends with its inputs
    assert "Tokens/s, 95 % interval low" in text and "host-to-device copy" in text and "h2d" not in text
    assert "Data quality What was read for each side. Inputs read baseline: tests/data/measured_runs/" in text
    assert "measured_runs/bench-cpu-small-fp32-strategy/bench-cpu-small-fp32-strategy-fsdp-p2 — " in index  # its source


def test_a_single_run_against_repeats_borrows_their_spread(tmp_path):
    base, cand = [1000.0, 1020.0, 990.0, 1010.0], [930.0]
    result = compare.compare(compare.read_side(runs_table(tmp_path, "a", base)),
                             compare.read_side(runs_table(tmp_path, "b", cand)))
    relative_sd = np.std(base, ddof=1) / np.mean(base)
    se = math.hypot(relative_sd / 2, relative_sd)  # the mean of 4 runs against one run
    t = scipy_stats.t.ppf(0.975, 3)
    assert result.difference.high == pytest.approx(930 / np.mean(base) * math.exp(t * se) - 1)
    assert result.verdict == "slower" and any("as much as the other side's 4 repeats" in n for n in result.notes)


def test_command_line_values_are_checked(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(P2), str(P2), "--min-effect", "5"])
    assert exit_info.value.code == 2 and "a fraction in [0, 1)" in capsys.readouterr().err


def test_report_data_leaves_compare_not_applicable_unless_its_sides_are_named(tmp_path):
    from trainperf.report.build.pipeline import plan

    (job,) = plan(["compare"], data=[str(RUNS / "bench-cpu-small-fp32-strategy")], out_dir=tmp_path)
    assert job.parameters["baseline_runs"] == [] and job.parameters["candidate_runs"] == []  # never the embedded runs
    with pytest.raises(NotApplicable, match="no runs given for baseline_runs"):
        open_side([], "baseline_runs")
    (job,) = plan(["compare"], data=[str(RUNS)], parameters=[("baseline_runs", str(P2)), ("candidate_runs", str(P4))],
                  out_dir=tmp_path)
    assert (job.parameters["baseline_runs"], job.parameters["candidate_runs"]) == ([str(P2)], [str(P4)])


def test_charts_draw_at_most_a_thousand_steps_of_a_run_evenly_spaced():
    """A run of 2,500 steps is drawn at 1,000 steps spaced 2,499 / 999 = 2.5015 apart, rounded (0, 3, 5, ...,
    2,499); a run of 10 steps whole; the sentence names the thinned run."""
    steps = pd.DataFrame({"side": "baseline", "run_id": ["long"] * 2500 + ["short"] * 10,
                          "step": [*range(2500), *range(10)], "step_time_s": 1.0})
    shown, sentence = compare.plotted_steps(steps)
    long = shown[shown["run_id"] == "long"]["step"]
    assert len(long) == 1000 and long.iloc[:3].tolist() == [0, 3, 5] and long.iloc[-1] == 2499
    assert shown[shown["run_id"] == "short"]["step"].tolist() == list(range(10))
    assert sentence == ("The charts draw 1,000 steps of a longer run, evenly spaced along it: long (1,000 of 2,500 steps). "
                        "The throughput above uses every step.")
    assert compare.plotted_steps(steps[steps["run_id"] == "short"])[1] == ""


def test_a_steps_table_side_is_the_run_its_steps_aggregate_to(tmp_path):
    """A side given as a steps table is read from its summaries (its step rows are never held whole): its runs row
    is the one the aggregator makes of all its steps."""
    table = altered(P2, tmp_path, "p2-table", step_s=1.0)
    side = compare.read_side(table)
    whole = trainperf.derive(trainperf.aggregate_steps(trainperf.load_steps(table)))
    columns = ["run_id", "gpus", "steps", "tokens", "elapsed_s", "tokens_per_s", "rank_imbalance"]
    pd.testing.assert_frame_equal(side.runs[columns], whole[columns])
