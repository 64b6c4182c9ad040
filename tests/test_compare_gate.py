"""trainperf compare as a gate: peak memory, energy per token and goodput beside throughput, each in its
direction with its own minimum effect; JSON and Markdown output; a history of accepted baselines."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from trainperf import compare
from trainperf.cli import main
from trainperf.compare.history import accept, entries, read_baselines
from trainperf.errors import DataError
from trainperf.estimates import Side

RUNS = Path(__file__).parent.parent / "data" / "runs" / "bench-cpu-small-fp32-strategy"  # committed repeats


def side(name, rates, **columns):
    """A side of runs-table rows: ``rates`` tokens/s and any other columns (lists, one value a run)."""
    runs = pd.DataFrame({"run_id": [f"{name}-{i}" for i in range(len(rates))], "tokens_per_s": rates, **columns})
    return Side(name, runs)


def t_interval(base, cand):
    """By hand: the relative difference of the means with its 95 % interval on the log scale, each side's
    standard error sd / (√n · mean), Welch's degrees of freedom (trainperf.stats.relative_difference)."""
    se = [np.std(x, ddof=1) / (math.sqrt(len(x)) * np.mean(x)) for x in (base, cand)]
    dof = sum(s ** 2 for s in se) ** 2 / sum(s ** 4 / (len(x) - 1) for s, x in zip(se, (base, cand)))
    ratio = np.mean(cand) / np.mean(base)
    half = scipy_stats.t.ppf(0.975, dof) * math.hypot(*se)
    return ratio - 1, ratio * math.exp(-half) - 1, ratio * math.exp(half) - 1


def test_each_metric_is_judged_in_its_own_direction():
    memory = ([10.0, 10.1, 9.9], [11.0, 11.1, 10.9])   # +10 %: more memory is worse
    energy = ([2.0, 2.1, 1.9], [1.7, 1.75, 1.65])      # -15 %: less energy is better
    goodput = ([0.90, 0.91, 0.89], [0.80, 0.81, 0.79])  # -11 %: less goodput is worse
    base = side("base", [1000.0, 1010.0, 990.0], peak_memory_gb=memory[0], energy_j_per_token=energy[0],
                goodput=goodput[0])
    cand = side("cand", [1000.0, 1010.0, 990.0], peak_memory_gb=memory[1], energy_j_per_token=energy[1],
                goodput=goodput[1])
    result = compare.compare(base, cand, metrics=["throughput", "peak_memory", "energy_per_token", "goodput"])
    rows = result.metrics.set_index("metric")
    assert rows["verdict"].to_dict() == {"throughput": "inconclusive", "peak_memory": "more memory",
                                         "energy_per_token": "less energy", "goodput": "lower goodput"}
    assert rows["regressed"].to_dict() == {"throughput": False, "peak_memory": True, "energy_per_token": False,
                                           "goodput": True}
    assert result.exit_code == 1
    for name, (a, b) in (("peak_memory", memory), ("energy_per_token", energy), ("goodput", goodput)):
        change, low, high = t_interval(a, b)
        assert rows.loc[name, ["change", "low", "high"]].tolist() == pytest.approx([change, low, high], rel=1e-9)
        assert rows.loc[name, "baseline"] == pytest.approx(np.mean(a))
    assert rows.loc["peak_memory", "min_effect"] == 0.05 and rows.loc["goodput", "min_effect"] == 0.02
    # only the judged metrics count: without memory and goodput there is no regression
    assert compare.compare(base, cand, metrics=["throughput", "energy_per_token"]).exit_code == 0
    # a minimum effect of its own: +10 % of memory under a 20 % minimum is no regression
    loose = compare.compare(base, cand, metrics=["peak_memory"], min_effects={"peak_memory": 0.2})
    assert loose.metrics["verdict"].tolist() == ["no detectable difference"] and loose.exit_code == 0


def test_a_metric_a_side_does_not_record_is_not_measured_never_a_crash():
    base = side("base", [1000.0, 1010.0], peak_memory_gb=[10.0, 10.2], goodput=[0.9, None])
    cand = side("cand", [700.0, 705.0], peak_memory_gb=[10.0, 10.1])
    result = compare.compare(base, cand, metrics=["throughput", "energy_per_token", "goodput"])
    rows = result.metrics.set_index("metric")
    assert rows.loc["energy_per_token", "verdict"] == "not measured"
    assert rows.loc["energy_per_token", "basis"] == "baseline: no energy_j_per_token; candidate: no energy_j_per_token"
    assert rows.loc["goodput", "basis"] == "baseline: 1 of 2 run(s) without goodput; candidate: no goodput"
    assert result.exit_code == 1 and rows.loc["throughput", "verdict"] == "slower"  # judged all the same


def test_one_run_a_side_gets_the_metrics_assumed_run_to_run_variation():
    # peak memory: 1 % a run (data/runs' repeats differ by 0.6 %), known: a normal interval ±1.96·√2·1 %
    result = compare.compare(side("a", [1000.0], peak_memory_gb=[20.0]), side("b", [1000.0], peak_memory_gb=[21.6]),
                             metrics=["peak_memory"])
    row = result.metrics.iloc[0]
    half = scipy_stats.norm.ppf(0.975) * math.sqrt(2) * 0.01
    assert (row["low"], row["high"]) == pytest.approx((1.08 * math.exp(-half) - 1, 1.08 * math.exp(half) - 1))
    assert row["verdict"] == "more memory" and row["basis"] == "one run a side: run-to-run CV 1% assumed"
    # a 3 % increase is neither ruled in nor out at 5 %: inconclusive, with the runs a side that would tell
    small = compare.compare(side("a", [1000.0], peak_memory_gb=[20.0]), side("b", [1000.0], peak_memory_gb=[20.6]),
                            metrics=["peak_memory"]).metrics.iloc[0]
    # by hand: a 5 % effect against 1 % run-to-run spread is d = ln 1.05 / 0.01 = 4.88 standard deviations; a two-sample
    # t-test at 95 % has 80 % power from 3 runs a side (noncentral t: 0.70 with 2, 0.99 with 3)
    d = math.log(1.05) / 0.01
    power = [scipy_stats.nct.sf(scipy_stats.t.ppf(0.975, 2 * n - 2), 2 * n - 2, d * math.sqrt(n / 2)) for n in (2, 3)]
    assert power[0] < 0.8 <= power[1]
    assert small["verdict"] == "inconclusive" and small["repeats_needed"] == 3


def runs_csv(tmp_path, name, rates, memory, run_id=None):
    path = tmp_path / f"{name}.csv"
    pd.DataFrame({"run_id": [run_id or f"{name}-{i}" for i in range(len(rates))], "gpus": 8, "tokens": 1e6,
                  "elapsed_s": [1e6 / r for r in rates], "peak_memory_gb": memory}).to_csv(path, index=False)
    return path


def test_json_holds_every_figure_verdict_and_the_exit_code(tmp_path, capsys):
    a = runs_csv(tmp_path, "a", [1000.0, 1020.0, 990.0], [30.0, 30.2, 29.9])
    b = runs_csv(tmp_path, "b", [1001.0, 1019.0, 992.0], [33.0, 33.1, 32.8])
    assert main(["compare", str(a), str(b), "--metric", "throughput", "--metric", "peak_memory,goodput",
                 "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 1 and data["verdict"] == "inconclusive"  # throughput: −3.2 % .. +3.4 %, wider than 2 %
    metrics = {m["metric"]: m for m in data["metrics"]}
    assert list(metrics) == ["throughput", "peak_memory", "goodput"]
    change, low, high = t_interval([30.0, 30.2, 29.9], [33.0, 33.1, 32.8])
    assert (metrics["peak_memory"]["change"], metrics["peak_memory"]["low"]) == pytest.approx((change, low))
    assert metrics["peak_memory"]["verdict"] == "more memory" and metrics["peak_memory"]["regressed"] is True
    assert metrics["goodput"]["verdict"] == "not measured" and metrics["goodput"]["change"] is None
    assert data["sides"][0]["throughput"] == pytest.approx(np.mean([1000.0, 1020.0, 990.0]))
    assert data["defaults"]["energy_per_token"]["min_effect"] == 0.05
    assert main(["compare", str(a), str(b), "--metric", "peak_memory", "--min-effect", "peak_memory=0.15",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"][0]["min_effect"] == 0.15


def test_markdown_is_a_table_for_a_pull_request_comment(tmp_path, capsys):
    a = runs_csv(tmp_path, "a", [1000.0, 1020.0, 990.0], [30.0, 30.2, 29.9])
    b = runs_csv(tmp_path, "b", [800.0, 810.0, 795.0], [27.0, 27.1, 26.9])
    assert main(["compare", str(a), str(b), "--metric", "throughput,peak_memory", "--format", "markdown"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "### trainperf compare: regression (exit 1)"
    table = out[out.index("| metric | baseline | candidate | change | 95 % interval | minimum effect | verdict |"):]
    assert table[1] == "|---|---:|---:|---:|---|---:|---|"
    change, low, high = t_interval([1000.0, 1020.0, 990.0], [800.0, 810.0, 795.0])
    assert table[2] == f"| throughput (tokens/s) | 1,003 | 801.7 | {change:+.1%} | {low:+.1%} to {high:+.1%} | 2 % | **slower** |"
    assert table[3].startswith("| peak memory (GiB) | 30.03 | 27 | -10.1% |") and table[3].endswith("| 5 % | less memory |")


def test_the_last_line_of_a_gate_says_what_regressed(tmp_path, capsys):
    a = runs_csv(tmp_path, "a", [1000.0, 1020.0, 990.0], [30.0, 30.2, 29.9])
    b = runs_csv(tmp_path, "b", [1100.0, 1120.0, 1090.0], [33.0, 33.1, 32.8])
    assert main(["compare", str(a), str(b), "--metric", "throughput,peak_memory"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("faster: candidate tokens/s +10.0% vs baseline")
    more = 32.9667 / 30.0333 - 1  # the means of the memory columns, by hand: +9.8 %
    assert out[-1] == f"regression (exit 1): peak memory more memory ({more:+.1%})"
    assert out[-3].startswith(f"peak memory: more memory: candidate {more:+.1%} vs baseline (95 % interval")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(a), str(b), "--metric", "latency"])
    assert exit_info.value.code == 2 and "unknown metric 'latency'" in capsys.readouterr().err


def test_history_compares_with_the_last_accepted_baselines_and_their_spread(tmp_path, capsys):
    """Each accepted baseline a runs table of one run, all named alike (a CI job's run): the last N are repeats
    whose spread is the noise the candidate gets (trainperf.estimates.sides_difference): by hand, the mean of N
    runs against one run, se = √(s²/N + s²), s the relative sd of the N, t with N − 1 degrees of freedom."""
    history = tmp_path / "history"
    history.mkdir()
    rates = [1200.0, 1000.0, 1020.0, 990.0, 1010.0]  # the oldest is left out by --last 4
    for i, rate in enumerate(rates):
        shutil.copy(runs_csv(tmp_path, f"b{i}", [rate], [30.0], run_id="ci-run"), history / f"{i:03d}-b{i}.csv")
    candidate = runs_csv(tmp_path, "cand", [930.0], [30.0], run_id="ci-run")
    assert main(["compare", "--history", str(history), "--last", "4", str(candidate), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    last = rates[1:]
    s = np.std(last, ddof=1) / np.mean(last)
    half = scipy_stats.t.ppf(0.975, 3) * s * math.sqrt(1 / 4 + 1)
    ratio = 930 / np.mean(last)
    assert (data["difference"]["low"], data["difference"]["high"]) == pytest.approx(
        (ratio * math.exp(-half) - 1, ratio * math.exp(half) - 1))
    assert data["verdict"] == "slower" and data["sides"][0]["runs"] == 4
    assert data["notes"][0] == (f"Baseline: the last 4 of 5 accepted baseline(s) in {history} (001-b1.csv, "
                                "002-b2.csv, 003-b3.csv, 004-b4.csv), 4 run(s): their spread measures the run-to-run "
                                "variation.")
    # a candidate that regressed is not accepted; one that passes is, as the newest entry
    assert main(["compare", "--history", str(history), "--last", "4", str(candidate), "--accept"]) == 1
    assert len(entries(history)) == 5
    good = runs_csv(tmp_path, "good", [1005.0], [30.0], run_id="ci-run")
    assert main(["compare", "--history", str(history), "--last", "4", str(good), "--accept"]) == 0
    newest = entries(history)[-1]
    assert newest.name.endswith("-good.csv") and newest.read_text() == good.read_text()
    assert f"Accepted into the history as {newest}." in capsys.readouterr().out


def test_a_history_starts_with_an_accepted_candidate_and_refuses_to_start_without(tmp_path, capsys):
    run = RUNS / "bench-cpu-small-fp32-strategy-ddp-p2-r1"
    assert main(["compare", "--history", str(tmp_path / "h"), str(run)]) == 2
    assert "no accepted baseline yet: give --accept" in capsys.readouterr().err
    assert main(["compare", "--history", str(tmp_path / "h"), str(run), "--accept"]) == 0
    (first,) = entries(tmp_path / "h")
    assert first.name.endswith(f"-{run.name}") and (first / "manifest.json").is_file()
    # the next run folder is compared with it (one run each: the assumed run-to-run variation)
    assert main(["compare", "--history", str(tmp_path / "h"), str(RUNS / "bench-cpu-small-fp32-strategy-ddp-p2-r2"),
                 "--draws", "200"]) == 0
    out = capsys.readouterr().out
    assert "1 run(s): a single run: its run-to-run variation is assumed, not measured." in out
    assert main(["compare", str(run), str(run), "--accept"]) == 2
    assert "--accept adds the candidate to a history: give --history DIR" in capsys.readouterr().err


def test_history_entries_must_repeat_one_configuration(tmp_path):
    history = tmp_path / "h"
    for name in ("ddp-p2-r1", "fsdp-p2-r1"):
        accept(RUNS / f"bench-cpu-small-fp32-strategy-{name}", history)
    with pytest.raises(DataError, match="differ in 'strategy'"):
        read_baselines(history)
