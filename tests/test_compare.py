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
from trainperf import compare, estimates, stats
from trainperf.cli import main
from trainperf.errors import DataError
from trainperf.report.page import NotApplicable
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


def test_a_run_against_itself_is_inconclusive_warns_and_exits_0(capsys):
    assert main(["compare", str(P2), str(P2)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    # ±8 % run-to-run a side cannot tell 2 % from nothing: the interval (-20 % to +25 %) is far wider
    assert out[-1].startswith("inconclusive: candidate tokens/s +0.0% vs baseline (95 % interval -")
    assert any("each run is taken to vary by 8% (coefficient of variation) from run to run" in line for line in out)
    assert re.search(r"; minimum effect 2%; run-to-run CV 8% assumed\); about \d+ runs a side would detect 2% "
                     r"\(80 % power\)$", out[-1])
    assert any(line.startswith("warning: The same run(s) on both sides (bench-cpu-small-fp32-strong-scaling-p2): "
                               "a run compared with itself shows no change by construction") for line in out)


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
    assert steps_only.verdict == "slower" and widened.verdict == "inconclusive"
    # by hand: log ratio ± t(ν) · √(se_b² + se_c² + 2 · 0.08²), the 8 % taken as known, ν by Welch from
    # each run's blocks; se and blocks from each side's own bootstrap (seeds 0 and 1, as compare draws)
    sides = [estimates.estimate_steps(compare.read_side(p), "tokens", [], seed=i) for i, p in enumerate((P2, slow))]
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
    assert calls == ["inconclusive"] * 6  # none called different: too noisy to tell 2 % from nothing


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
    assert out[-1] == ("inconclusive (no repeats or steps): candidate tokens/s -30.0% vs baseline (no interval); "
                       "record repeats to measure the noise")
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


STRATEGY = Path(__file__).parent.parent / "data" / "runs" / "bench-cpu-small-fp32-strategy"  # committed repeats
DDP_R1 = STRATEGY / "bench-cpu-small-fp32-strategy-ddp-p2-r1"


def by_hand(run):
    """From a run folder's rank files, read with json alone: the mean over its measured steps (recorded by
    every rank; the warm-up is the run's, found from its step times) of the slowest rank's step_s, and of each
    phase's mean over ranks (s)."""
    rows = []
    for path in sorted(Path(run).glob("steps-rank*.jsonl")):
        lines = path.read_text().splitlines()
        columns = json.loads(lines[0])["columns"]
        rows += [dict(zip(columns, json.loads(line)), rank=path.name) for line in lines[1:] if line.startswith("[")]
    steps = pd.DataFrame(rows)
    warmup = int(trainperf.load_runs(run, cache=False)["warmup_steps"].iat[0])
    steps = steps[~steps["warmup"].astype(bool) & (steps["step"] >= warmup)]
    steps = steps[steps.groupby("step")["rank"].transform("nunique") == steps["rank"].nunique()]
    per_step = steps.groupby("step").agg(step_s=("step_s", "max"), **{c: (c, "mean") for c in
                                          ("data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s",
                                           "comm_s", "comm_exposed_s")})
    return per_step.mean()


@pytest.mark.parametrize("run", sorted(STRATEGY.glob("*fsdp*")) + sorted(RUNS.glob("*strategy/*fsdp*")),
                         ids=lambda p: p.name)
def test_the_phases_of_an_fsdp_run_add_up_to_its_step_time(run):
    """FSDP's exposed communication, sampled by torch.profiler, lies inside forward and backward: counted
    again as a phase it made 1.008 s of phases in a 0.910 s step. DDP's is taken out of backward: a slice."""
    result = compare.compare(compare.read_side(DDP_R1), compare.read_side(run), draws=200)
    phases = result.phases.set_index("phase")
    fsdp, ddp = by_hand(run), by_hand(DDP_R1)
    assert phases.loc["step_time", "candidate_s"] == pytest.approx(fsdp["step_s"], rel=1e-9)
    assert phases.drop("step_time")["candidate_s"].sum() == pytest.approx(fsdp["step_s"], abs=1e-9)
    assert phases.drop("step_time")["baseline_s"].sum() == pytest.approx(ddp["step_s"], abs=1e-9)
    # the timed phases themselves fill the step: what is left (other) is under 0.5 % of it, on both sides
    timed = ["data", "h2d", "forward", "loss", "backward", "optimizer", "comm_exposed", "slowest_wait"]
    for side, hand in (("candidate_s", fsdp), ("baseline_s", ddp)):
        assert 0 <= phases.loc["other", side] < 0.005 * hand["step_s"]
        assert phases.loc[timed, side].sum() == pytest.approx(hand["step_s"], rel=0.005)
    # exposed communication: DDP's slice as recorded, FSDP's none (inside its forward and backward, or untimed:
    # the older sweep in tests/data/measured_runs did not sample FSDP's collectives)
    assert phases.loc["comm_exposed", "baseline_s"] == pytest.approx(ddp["comm_exposed_s"], rel=1e-9)
    assert phases.loc["comm_exposed", "candidate_s"] == 0
    assert phases.loc["forward", "candidate_s"] == pytest.approx(fsdp["forward_s"], rel=1e-9)
    both = compare.compare(compare.read_side(run), compare.read_side(run), draws=200)
    assert both.phases.set_index("phase").drop("step_time")["baseline_s"].sum() == pytest.approx(fsdp["step_s"])
    assert "comm_exposed" not in set(both.phases["phase"])  # FSDP against FSDP: no slice of it at all
    if math.isnan(fsdp["comm_exposed_s"]):
        assert any("The candidate did not time its communication" in n for n in result.notes)
        return
    overlaps = result.overlaps.set_index("phase")
    assert overlaps.loc["comm", "candidate_s"] == pytest.approx(fsdp["comm_s"], rel=1e-9)
    assert any(f"exposed communication ({fsdp['comm_exposed_s']:.4f} s a step) was sampled" in n for n in result.notes)
    assert "comm_exposed" in set(both.overlaps["phase"])  # it overlaps forward and backward on both sides


def test_the_machine_load_at_the_start_of_each_side_and_a_warning_when_it_was_loaded(tmp_path, capsys):
    fsdp = STRATEGY / "bench-cpu-small-fp32-strategy-fsdp-p2-r1"
    result = compare.compare(compare.read_side(DDP_R1), compare.read_side(fsdp), draws=200)
    manifests = [json.loads((run / "manifest.json").read_text())["config"] for run in (DDP_R1, fsdp)]
    assert result.load["load_average_1min"].tolist() == [m["extra_load_average_1min"] for m in manifests]
    assert result.load["cpu_cores"].tolist() == [2, 2] and result.load["loaded"].tolist() == [True, True]
    assert result.warnings[0].startswith(f"The baseline ran on a loaded machine: {DDP_R1.name} (load average "
                                         f"{manifests[0]['extra_load_average_1min']:.2f} on 2 cores).")
    assert result.warnings[1].startswith("The candidate ran on a loaded machine")
    # a run the profiler made records its host in the manifest: its load shows, and a quiet one warns of nothing
    for name in ("a", "b"):
        prof = trainperf.StepProfiler(tmp_path / name, config={"peak_tflops_per_gpu": 1.0}, warmup_steps=1)
        for _ in range(5):
            with prof.step(samples=1, tokens=8):
                np.ones(1000).sum()
        prof.close()
    hosts = [json.loads((tmp_path / n / "manifest.json").read_text())["environment"]["host"] for n in ("a", "b")]
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    for name, run, host in zip(("baseline", "candidate"), "ab", hosts):
        loaded = " (loaded)" if host["load_average"] > host["cores"] else ""
        assert (f"Load at start (1-minute load average), {name}: {run} {host['load_average']:.2f} on "
                f"{host['cores']} cores{loaded}.") in out
        assert (f"The {name} ran on a loaded machine" in out) == bool(loaded)


def test_sides_with_different_tokens_per_step_are_judged_on_tokens_per_second(tmp_path):
    # twice the tokens in 1.5 times the step time: slower steps, 2 / 1.5 - 1 = +33.3 % tokens/s
    bigger = altered(P2, tmp_path, "bigger", tokens=2.0, step_s=1.5)
    result = compare.compare(compare.read_side(P2), compare.read_side(bigger), run_cv=0)
    assert result.verdict == "faster" and result.difference.estimate == pytest.approx(2 / 1.5 - 1)
    assert result.sides["work_per_step"].tolist() == [2048, 4096]  # 1,024 tokens per rank per step, 2 ranks
    assert ("The sides do different work per step (2,048 and 4,096 tokens per step): the verdict judges tokens/s, "
            "not step time") in " ".join(result.notes)
    same = compare.compare(compare.read_side(P2), compare.read_side(altered(P2, tmp_path, "slow", step_s=1.2)))
    assert not any("different work per step" in n for n in same.notes)


def test_the_command_line_gives_a_phase_change_of_the_step_and_of_the_phase_itself(tmp_path, capsys):
    late = altered(P2, tmp_path, "late", rank=(1, 0.05))  # rank 1: 50 ms more backward a step
    assert main(["compare", str(P2), str(late), "--run-cv", "0"]) == 1  # 13 % slower
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if line.startswith("phase "))
    assert header.split()[:6] == ["phase", "baseline", "s", "candidate", "s", "of"] and "of own" in header
    backward = next(line for line in out if line.startswith("backward ")).split()
    hand = by_hand(P2)  # +25 ms a step: the mean over 2 ranks of +50 ms and 0
    assert backward[3] == f"{0.025 / hand['step_s']:+.1%}" and backward[4] == f"{0.025 / hand['backward_s']:+.1%}"


def test_inconclusive_carries_the_repeats_that_would_detect_the_minimum_effect(tmp_path, capsys):
    """Three repeats a side whose spread (about 1.5 % and 3.5 %) leaves the interval far wider than 2 %:
    inconclusive. The runs a side that would detect 2 %: the smallest n at which a two-sided t test on log
    throughput, sd pooled over the sides, has 80 % power (power from scipy's noncentral t)."""
    base, cand = [1000.0, 1020.0, 990.0], [1000.0, 1030.0, 960.0]
    a, b = runs_table(tmp_path, "a", base), runs_table(tmp_path, "b", cand)
    result = compare.compare(compare.read_side(a), compare.read_side(b))
    assert result.verdict == "inconclusive" and result.exit_code == 0
    sd = math.sqrt(np.mean([np.var(x, ddof=1) / np.mean(x) ** 2 for x in (base, cand)]))
    effect = math.log(1.02) / sd

    def power(n):
        dof, shift = 2 * n - 2, effect * math.sqrt(n / 2)
        critical = scipy_stats.t.ppf(0.975, dof)
        return scipy_stats.nct.sf(critical, dof, shift) + scipy_stats.nct.sf(critical, dof, -shift)

    n = result.repeats_needed
    assert power(n) >= 0.8 > power(n - 1)
    assert main(["compare", str(a), str(b)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(
        f"; about {n} runs a side would detect 2% (80 % power)")
    # repeats that agree to 0.1 %: the interval lies within ±2 %, a conclusive "no change"
    quiet = compare.compare(compare.read_side(runs_table(tmp_path, "c", [1000.0, 1001.0, 999.0, 1000.5])),
                            compare.read_side(runs_table(tmp_path, "d", [1001.0, 1000.0, 1002.0, 1000.5])))
    assert quiet.verdict == "no detectable difference" and -0.02 < quiet.difference.low < quiet.difference.high < 0.02
    assert "runs a side would detect" not in quiet.headline()


@pytest.mark.slow
def test_the_compare_page_and_its_index_card_call_a_noisy_comparison_inconclusive(tmp_path):
    """The page's default sides: DDP against FSDP, two committed repeats each (data/runs), whose interval
    (about -21 % to +10 %) cannot tell a 2 % change from none."""
    from trainperf.report.build.pipeline import build, plan

    result = build(plan(["compare"], out_dir=tmp_path), workers=1)
    assert not result.failed, result.failed[0].error
    expected = compare.compare(compare.read_side(*sorted(STRATEGY.glob("*ddp*"))),
                               compare.read_side(*sorted(STRATEGY.glob("*fsdp*"))),
                               metrics=["throughput", "peak_memory", "energy_per_token", "goodput"])
    assert expected.verdict == "inconclusive" and expected.repeats_needed > 2
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "compare.html").read_text())))
    index = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "index.html").read_text())))
    assert expected.headline() in text and expected.headline() in index  # the card's headline is the verdict
    assert "no detectable difference" not in index
    assert f"about {expected.repeats_needed} runs a side would detect 2% (80 % power)" in index
    assert "Machine load at start" in text and "The baseline ran on a loaded machine" in text
    assert "waiting for the slowest rank" in text and "Memory, energy and goodput" in text
    assert "more memory" in text and "not measured" in text
