"""Step intervals: reading run folders (bad lines included) and steps tables,
and aggregating them to runs rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from trainperf import DataError, DataWarning, aggregate_steps, load_runs, load_steps
from trainperf.aggregate import rank_totals, summarize
from trainperf.runfolder import rankfile
from trainperf.schema import STEP_INTERVAL_COLUMNS
from trainperf.reading.tables import as_intervals


def step_values(step, start, step_s, forward, tokens=100, warmup=False, loss=None):
    """A steps-file line's values: only forward timed, 8 samples."""
    values = dict.fromkeys(rankfile.LINE_COLUMNS)
    values.update(step=step, warmup=warmup, start_s=start, step_s=step_s, forward_s=forward,
                  tokens=tokens, samples=8, micro_steps=1, loss=loss, peak_memory_gb=1.25, out_of_memory=False)
    return [values[c] for c in rankfile.LINE_COLUMNS]


def write_run(folder, ranks, world_size=None, closed=True, config=None):
    """A run folder as the profiler writes it; ``ranks`` maps a rank to its
    list of step values; ranks 0-1 on host a, ranks 2-3 on host b."""
    folder.mkdir(parents=True)
    world = world_size or len(ranks)
    hosts = ["a", "a", "b", "b"]
    manifest = {"config": config or {"model": "m"}, "warmup_steps": 1,
                "environment": {"world_size": world, "device": "cpu", "strategy": "ddp",
                                "ranks": [{"rank": r, "host": hosts[r], "node": hosts[r]} for r in range(world)]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for rank, rows in ranks.items():
        lines = [rankfile.header_line(rank, hosts[rank], None, hosts[rank])]
        lines += [rankfile.step_line(v) for v in rows]
        if closed:
            lines.append(rankfile.end_line(len(rows), {}))
        (folder / f"steps-rank{rank}.jsonl").write_bytes(b"".join(lines))
    return folder


def two_rank_run(folder, **kwargs):
    """Rank 0: steps of 1 s with 0.5 s forward; rank 1: 1.5 s with 1 s forward.
    Step 0 is warm-up."""
    return write_run(folder, {
        0: [step_values(i, 1.0 * i, 1.0, 0.5, warmup=i == 0, loss=2.0 - 0.1 * i) for i in range(3)],
        1: [step_values(i, 1.5 * i, 1.5, 1.0, warmup=i == 0, loss=2.2 - 0.1 * i) for i in range(3)],
    }, **kwargs)


def test_slowest_rank_sets_elapsed_and_imbalance(tmp_path):
    row = load_runs(two_rank_run(tmp_path / "r2")).iloc[0]
    # window = steps 1-2; rank 0: 1.0 -> 3.0 s = 2 s, rank 1: 1.5 -> 4.5 s = 3 s
    assert row["elapsed_s"] == pytest.approx(3.0)  # the slowest rank, not the mean (2.5)
    assert row["mean_rank_elapsed_s"] == pytest.approx(2.5)
    assert row["slowest_rank"] == 1 and row["rank_imbalance"] == pytest.approx(1.5)
    assert row["forward_s"] == pytest.approx((2 * 0.5 + 2 * 1.0) / 2)  # mean of rank totals
    assert row["tokens"] == 400 and row["samples"] == 32  # 2 ranks x 2 steps
    assert (row["steps"], row["warmup_steps"], row["ranks"], row["gpus"], row["nodes"]) == (2, 1, 2, 2, 1)
    assert row["train_loss"] == pytest.approx((1.8 + 2.0) / 2)
    assert row["peak_memory_gb"] == 1.25 and row["complete"]
    assert row["run_id"] == "r2" and row["experiment"] == tmp_path.name and row["model"] == "m"
    assert row["strategy"] == "ddp" and row["platform"] == "cpu"


def test_load_runs_reads_a_run_folder(tmp_path):
    runs = load_runs(two_rank_run(tmp_path / "r2"))
    assert runs["elapsed_s"].tolist() == [pytest.approx(3.0)]
    assert runs["gpus"].tolist() == [2]


def test_nodes_count_distinct_hosts(tmp_path):
    rows = {r: [step_values(i, i, 1.0, 0.5) for i in range(2)] for r in range(4)}
    row = load_runs(write_run(tmp_path / "r4", rows)).iloc[0]
    assert (row["gpus"], row["nodes"]) == (4, 2)
    steps = load_steps(tmp_path / "r4")
    assert steps.groupby("rank")["node"].first().tolist() == ["a", "a", "b", "b"]


def test_rank_that_stopped_early_is_named(tmp_path):
    folder = write_run(tmp_path / "dead", {
        0: [step_values(i, i, 1.0, 0.5) for i in range(4)],
        1: [step_values(i, i, 1.0, 0.5) for i in range(2)],
    }, world_size=3)
    files = {p.name: p for p in folder.iterdir()}
    body = files["steps-rank1.jsonl"].read_bytes()
    files["steps-rank1.jsonl"].write_bytes(body[:body.rstrip(b"\n").rfind(b"\n") + 1])  # no end line
    with pytest.warns(DataWarning, match=r"rank\(s\) 1, 2 stopped early \(rank 1: 2 of 4 steps, "
                                         r"profiler not closed; rank 2: no steps recorded"):
        row = load_runs(folder).iloc[0]
    assert not row["complete"] and row["extra_stopped_early_ranks"] == "[1, 2]"
    assert row["ranks"] == 2 and row["gpus"] == 3


def test_a_run_still_being_written_is_measured_over_the_steps_every_rank_has_written(tmp_path):
    """No rank has closed its file yet and rank 0's runs ahead (it wrote steps 0-5, rank 1 steps 0-3, in batches):
    the job has done steps 0-3. Steps 1-3 measured (step 0 is warm-up): 2 ranks x 3 steps x 100 tokens = 600
    tokens in 3 s of the slowest rank, 200 tokens/s; counting rank 0's steps 4 and 5 against that time would give
    (500 + 300) / 5 s = 160. Rank 1 is still named for what it had written; the intervals stop at step 3 too."""
    ranks = {rank: [step_values(i, 1.0 * i, 1.0, 0.5, warmup=i == 0) for i in range(steps)]
             for rank, steps in ((0, 6), (1, 4))}
    folder = write_run(tmp_path / "live", ranks, closed=False)
    with pytest.warns(DataWarning, match=r"rank 1: 4 of 6 steps, profiler not closed"):
        row = load_runs(folder).iloc[0]
    assert (row["tokens"], row["elapsed_s"], row["steps"]) == (600, pytest.approx(3.0), 3)
    assert row["tokens"] / row["elapsed_s"] == pytest.approx(200.0) and not row["complete"]
    assert load_steps(folder).groupby("rank")["step"].max().tolist() == [3, 3]
    (folder / "steps-rank0.jsonl").write_bytes((folder / "steps-rank0.jsonl").read_bytes()
                                                 + rankfile.end_line(6, {}))  # rank 0 done: the job ended
    with pytest.warns(DataWarning, match=r"rank\(s\) 1 stopped early \(rank 1: 4 of 6 steps, profiler not closed"):
        ended = load_runs(folder).iloc[0]
    assert (ended["tokens"], ended["elapsed_s"]) == (800, pytest.approx(5.0))  # every step read, as written


def test_malformed_and_truncated_lines_are_skipped_counted_and_located(tmp_path):
    folder = two_rank_run(tmp_path / "bad", closed=False)
    path = folder / "steps-rank0.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, b"this is not json\n")  # line 3
    lines.insert(3, b"[1,false,2.0]\n")  # line 4: too few values
    lines.insert(4, b'[1,"no",1.0,1.0,null,null,0.5,null,null,null,null,null,null,100,8,1,null,1.0]\n')  # line 5
    lines.append(b"[3,false,3.0,1.0,null,nu")  # line 8: cut off mid-write
    path.write_bytes(b"".join(lines))
    with pytest.warns(DataWarning) as caught:
        steps = load_steps(folder)
    message = str(caught[0].message)
    assert message.startswith("skipped 4 malformed or repeated line(s) in steps files:")
    for line in (3, 4, 5, 8):
        assert f"steps-rank0.jsonl:{line}:" in message
    assert steps[steps["rank"] == 0]["step"].tolist() == [0, 1, 2]  # the good lines are kept


def test_fast_and_line_by_line_readers_agree(tmp_path):
    folder = two_rank_run(tmp_path / "ok", closed=False)
    fast = rankfile.read_rank_file(folder / "steps-rank1.jsonl")
    with open(folder / "steps-rank1.jsonl", "ab") as f:
        f.write(b"garbage\n")  # forces the line-by-line reader for the whole file
    slow = rankfile.read_rank_file(folder / "steps-rank1.jsonl")
    assert len(slow.bad_lines) == 1 and len(fast.bad_lines) == 0
    for name in rankfile.LINE_COLUMNS:
        np.testing.assert_array_equal(fast.columns[name], slow.columns[name])
        assert fast.columns[name].dtype == slow.columns[name].dtype


@pytest.mark.parametrize("corrupt", [b"[[1],false,", b'[1,"false",'])
def test_a_nested_array_or_a_string_is_a_bad_line_on_the_fast_path_too(tmp_path, corrupt):
    """Once its brackets are removed, ``[[1],false,...`` or a quoted value
    would parse as CSV: the fast reader must not accept what the line-by-line
    reader rejects."""
    folder = two_rank_run(tmp_path / "n", closed=False)
    path = folder / "steps-rank0.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[2].startswith(b"[1,false,")
    lines[2] = corrupt + lines[2][len(b"[1,false,"):]  # line 3
    path.write_bytes(b"".join(lines))
    read = rankfile.read_rank_file(path)
    assert [b.line for b in read.bad_lines] == [3]
    assert read.columns["step"].tolist() == [0, 2]


def test_load_steps_reads_a_folder_of_runs_and_steps_tables(tmp_path):
    two_rank_run(tmp_path / "all" / "one")
    two_rank_run(tmp_path / "all" / "two")
    (tmp_path / "all" / "log.csv").write_text("run_id,rank,step,step_s\nimported,0,0,2.5\nimported,0,1,2.0\n")
    steps = load_steps(tmp_path / "all")
    assert list(steps.columns) == list(STEP_INTERVAL_COLUMNS)
    assert steps.groupby("run_id").size().to_dict() == {"imported": 2, "one": 6, "two": 6}
    imported = steps[steps["run_id"] == "imported"]
    assert imported["step_s"].tolist() == [2.5, 2.0] and imported["forward_s"].isna().all()


def test_aggregate_steps_without_manifest_uses_step_times(tmp_path):
    """A steps table from a log importer: no start times, no manifest."""
    steps = pd.DataFrame({"run_id": ["x"] * 4, "rank": [0, 0, 1, 1], "step": [0, 1, 0, 1],
                          "warmup": [False] * 4, "step_s": [2.0, 2.0, 3.0, 3.5], "tokens": [10.0] * 4})
    row = aggregate_steps(steps).iloc[0]
    assert row["elapsed_s"] == 6.5 and row["slowest_rank"] == 1
    assert row["rank_imbalance"] == pytest.approx(6.5 / 4.0) and row["tokens"] == 40
    assert row["gpus"] == 2 and row["complete"]


def test_missing_manifest_is_a_data_error(tmp_path):
    folder = two_rank_run(tmp_path / "r")
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match=r"manifest.json: cannot read the run's manifest"):
        load_runs(folder)


def test_config_keys_outside_the_schema_become_extra(tmp_path):
    folder = two_rank_run(tmp_path / "c", config={"model": "m", "dataset": "owt", "reported_mfu": 0.4})
    row = load_runs(folder).iloc[0]
    assert row["extra_dataset"] == "owt" and row["reported_mfu"] == 0.4


def test_run_without_measured_steps_is_a_data_error(tmp_path):
    folder = write_run(tmp_path / "warm", {0: [step_values(0, 0.0, 1.0, 0.5, warmup=True)]})
    with pytest.raises(DataError, match=r"warm: no measured steps: 1 step line\(s\), all warm-up"):
        load_runs(folder)


def test_steps_table_warmup_spellings_and_a_bad_one(tmp_path):
    """A warm-up column of 1 / 0 with a gap reads back as floats (1.0, blank);
    anything that is no bool is an error naming its line."""
    table = tmp_path / "log.csv"
    table.write_text("run_id,rank,step,warmup,step_s\nx,0,0,1.0,2.0\nx,0,1,,2.0\nx,0,2,0.0,1.0\n")
    assert load_steps(table)["warmup"].tolist() == [True, False, False]
    table.write_text("run_id,rank,step,warmup\nx,0,0,maybe\n")
    with pytest.raises(DataError, match=r"log.csv, line 2, row 1, column 'warmup': not a bool: 'maybe'"):
        load_steps(table)


def test_rank_totals_are_each_ranks_window_and_give_the_runs_elapsed_time(tmp_path):
    steps = load_steps(two_rank_run(tmp_path / "r2"))
    # a second run without start times: elapsed is the sum of step_s (rank 0: 0.4 + 0.6, rank 1: 0.5 + 0.7)
    bare = pd.DataFrame({"run_id": "r3", "rank": [0, 0, 1, 1, 0, 1], "step": [1, 2, 1, 2, 0, 0],
                         "warmup": [False] * 4 + [True] * 2, "step_s": [0.4, 0.6, 0.5, 0.7, 9.0, 9.0],
                         "forward_s": [0.1, 0.1, 0.2, np.nan, 9.0, 9.0]})
    totals = rank_totals(summarize(as_intervals(pd.concat([steps, bare], ignore_index=True))).per_rank)
    # window = steps 1-2; rank 0: 1.0 -> 3.0 s, rank 1: 1.5 -> 4.5 s; forward 2 x 0.5 s and 2 x 1.0 s
    assert totals["elapsed_s"].to_dict() == {("r2", 0): pytest.approx(2.0), ("r2", 1): pytest.approx(3.0),
                                             ("r3", 0): pytest.approx(1.0), ("r3", 1): pytest.approx(1.2)}
    assert totals.loc[("r2", 1), "forward_s"] == pytest.approx(2.0)
    assert totals.loc[("r3", 1), "forward_s"] == pytest.approx(0.2)  # the warm-up's 9 s left out
    assert aggregate_steps(bare).iloc[0]["elapsed_s"] == pytest.approx(1.2)


def test_every_kind_of_bad_input_in_one_folder_is_named_on_the_page_and_the_rest_is_read(tmp_path):
    """One data folder: a good run, a run whose rank file was cut mid-line, a run with a rank that crashed
    (fewer steps, no end line), a run folder still being written (no measured step yet), a folder of rank files
    without its manifest and an empty file. The two good runs and the damaged ones are read; the data-quality
    section (``page.skipped``) names each problem once, the same from the caches on a second read."""
    from trainperf.report import page

    data = tmp_path / "data"
    two_rank_run(data / "good")
    cut = two_rank_run(data / "cut", closed=False)
    text = (cut / "steps-rank1.jsonl").read_bytes()
    (cut / "steps-rank1.jsonl").write_bytes(text + b"[3, false, 4.5, 1.")  # killed while writing a line
    write_run(data / "crashed", {0: [step_values(i, i, 1.0, 0.5, warmup=i == 0) for i in range(3)],
                                 1: [step_values(i, i, 1.0, 0.5, warmup=i == 0) for i in range(2)]}, closed=False)
    write_run(data / "starting", {0: [step_values(0, 0.0, 1.0, 0.5, warmup=True)]}, closed=False)
    two_rank_run(tmp_path / "copied")
    (tmp_path / "copied" / "manifest.json").rename(tmp_path / "manifest.json")
    (tmp_path / "copied").rename(data / "copied")
    (data / "empty.csv").write_text("")
    for attempt in ("first read", "from the caches"):
        runs = page.open_runs(str(data))
        assert sorted(runs["run_id"]) == ["crashed", "cut", "good"], attempt
        assert runs.set_index("run_id")["complete"].to_dict() == {"crashed": False, "cut": False, "good": True}
        quality = page.skipped(runs)
        reasons = dict(zip(quality["where"], quality["reason"]))
        assert reasons[str(data / "empty.csv")] == "empty file", attempt
        assert "without manifest.json" in reasons[str(data / "copied")], attempt
        assert "still running or no measured step" in reasons[str(data / "starting")], attempt
        warned = quality.loc[quality["where"] == "warning while reading", "reason"].tolist()
        assert [w for w in warned if "skipped 1 malformed or repeated line(s)" in w and "steps-rank1.jsonl" in w], warned
        assert [w for w in warned if "run crashed is incomplete" in w and "rank 1: 2 of 3 steps" in w], warned
