"""StepProfiler under torchrun (gloo, CPU): DDP and FSDP on two processes, two
simulated nodes, and one rank killed with SIGKILL mid-run.

The training job is ``tests/profiled_training.py``. Each test is bounded by a
timeout; every process must exit 0 (except the one killed on purpose).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from trainperf import DataWarning, export_chrome_trace, find_straggler, load_runs, load_steps
from trainperf.goodput import PARTS
from trainperf.runfolder import rankfile

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("profiled_training.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TIMEOUT_S = 240
STEPS = 4


def run_jobs(commands: list[list[str]], envs: list[dict[str, str]]) -> list[tuple[int, str]]:
    """Run the commands side by side; return each one's exit code and output
    (kept in files: a full pipe could stall one process while another waits
    for it in a collective). Past ``TIMEOUT_S`` every process still running
    gets SIGTERM (torchrun passes it on to its workers, which run in sessions
    of their own and would outlive a SIGKILL of torchrun), then SIGKILL, and
    the test fails."""
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
        processes = [subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
                     for command, env, log in zip(commands, envs, logs)]
        deadline = time.monotonic() + TIMEOUT_S
        timed_out = False
        try:
            for process in processes:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            for process in processes:
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
    if timed_out:
        pytest.fail(f"still running after {TIMEOUT_S} s: " + "\n".join(o[-2000:] for o in outputs))
    return [(process.returncode, output) for process, output in zip(processes, outputs)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment() -> dict[str, str]:
    # torchrun leaves OMP_NUM_THREADS unset with --nnodes > 1; two cores are shared
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def assert_exit_0(code: int, output: str) -> None:
    assert code == 0, f"exit {code}:\n{output[-3000:]}"


def assert_intact(path: Path, steps: int) -> None:
    """Every line of a rank's file parses; it ends with the end line."""
    read = rankfile.read_rank_file(path)
    assert read.bad_lines == [] and read.closed and read.steps == steps


def assert_carries_the_window_estimate(measured, window_steps: list[int]) -> None:
    """Each rank's measured steps carry one sampled window's estimate (its mean per step over the window's
    steps ``window_steps``): a positive ``comm_s`` with ``comm_exposed_s`` a part of it, no longer than the
    step; a step shorter than the estimate carries none. The window's mean is no longer than the mean of
    its steps, so at least one of them carries it."""
    for rank, mine in measured.groupby("rank"):
        carried, empty = mine[mine["comm_s"].notna()], mine[mine["comm_s"].isna()]
        assert carried["step"].isin(window_steps).any(), (rank, mine)
        (estimate,) = carried["comm_s"].unique()  # one window: one estimate per rank
        assert estimate > 0 and (carried["comm_s"] <= carried["step_s"]).all(), (rank, mine)
        assert (carried["comm_exposed_s"] <= carried["comm_s"] + 1e-6).all(), (rank, mine)
        assert (empty["step_s"] <= estimate).all() and empty["comm_exposed_s"].isna().all(), (rank, mine)


def test_ddp_and_fsdp_on_two_processes(tmp_path):
    # --standalone: torchrun binds a free port itself (no port chosen here that another job could take)
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp,fsdp,fsdp1", "--steps", str(STEPS), "--checkpoint-every", "2"]],
                                 [environment()])
    assert_exit_0(code, output)  # under DDP, also: the profiler's hook averaged as DDP does
    for strategy in ("ddp", "fsdp", "fsdp1"):
        for rank in (0, 1):
            assert_intact(tmp_path / strategy / f"steps-rank{rank}.jsonl", STEPS)
    steps = load_steps(tmp_path / "ddp")
    measured = steps[~steps["warmup"]]
    # several all-reduces per backward (small buckets); exposure is a part of their time
    assert (measured["comm_s"] > 0).all()
    assert (measured["comm_exposed_s"] <= measured["comm_s"] + 1e-6).all()
    assert (measured["comm_s"] <= measured["step_s"]).all()
    # the exposed wait happens inside backward(): counted once, so the phases add up to no more than the step
    timed = measured[["data_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "comm_exposed_s"]].fillna(0)
    assert (timed.sum(axis=1) <= measured["step_s"] + 1e-6).all()
    runs = load_runs(tmp_path).set_index("run_id")
    assert runs.loc["ddp", "strategy"] == "ddp" and runs.loc["fsdp", "strategy"] == "fsdp"
    assert runs.loc["fsdp1", "strategy"] == "fsdp"
    assert runs["gpus"].tolist() == [2, 2, 2] and runs["nodes"].tolist() == [1, 1, 1]
    assert runs["complete"].all() and (runs["steps"] == STEPS - 1).all()
    # every rank wrote its own wall clock and its own checkpoints (after steps 1 and 3), outside its steps
    for rank in (0, 1):
        assert rankfile.read_rank_file(tmp_path / "ddp" / f"steps-rank{rank}.jsonl").wall_s > 0
        lines = (tmp_path / "ddp" / f"events-rank{rank}.jsonl").read_text().splitlines()
        assert json.loads(lines[0])["rank"] == rank
        saves = [json.loads(line) for line in lines[1:]]
        assert [s["phase"] for s in saves] == ["checkpoint", "checkpoint"] and all(s["seconds"] > 0 for s in saves)
        mine = steps[steps["rank"] == rank].set_index("step")
        assert mine.loc[2, "start_s"] >= saves[0]["start_s"] + saves[0]["seconds"] - 1e-5
        assert mine.loc[1, "start_s"] + mine.loc[1, "step_s"] <= saves[0]["start_s"] + 1e-5
    # every part (a rank's wait for the other's longer checkpoint, where there was one, among them)
    goodput = runs.loc["ddp", [*PARTS, "outside_checkpoint_s"]].astype(float).fillna(0.0)
    assert goodput.sum() == pytest.approx(runs.loc["ddp", "wall_s"], rel=1e-4)
    assert runs.loc["ddp", "outside_checkpoint_s"] > 0 and 0 < runs.loc["ddp", "goodput"] < 1
    assert runs.loc["fsdp", "tokens"] == 2 * (STEPS - 1) * 8 * 16
    # FSDP2 and FSDP issue their own collectives: sampled with torch.profiler (steps 1 and 2 of
    # STEPS = 4, warm-up 1), every measured step of every rank carries the window's estimate, except a step
    # shorter than it
    for strategy in ("fsdp", "fsdp1"):
        sampled = load_steps(tmp_path / strategy)
        measured = sampled[~sampled["warmup"]]
        assert sampled.loc[sampled["warmup"], "comm_s"].isna().all()
        assert_carries_the_window_estimate(measured, window_steps=[1, 2])
        manifest = json.loads((tmp_path / strategy / "manifest.json").read_text())
        assert "windows of 2 step(s) every 100 steps or more from step 1" in manifest["config"]["comm_measurement"]


def test_the_ranks_of_a_ddp_run_share_one_clock_in_the_trace(tmp_path):
    """DDP's all-reduces end every step on both ranks together, so step k
    starts on both at once: in the one trace of the run, the median gap
    between the ranks' starts of steps 1-7 is a few milliseconds at most.
    Independently, each step's start on the trace's clock (its
    ``baseTimeNanoseconds`` + ``ts``) comes just before the Unix time the
    job itself read before calling ``prof.step()`` (median within 5 ms)."""
    steps = 8
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp", "--steps", str(steps), "--wall-clock-log"]],
                                 [environment()])
    assert_exit_0(code, output)
    trace = json.loads(export_chrome_trace(tmp_path / "ddp", tmp_path / "out").read_text())
    starts = {(e["pid"], e["args"]["step"]): e["ts"] for e in trace["traceEvents"] if e.get("cat") == "step"}
    assert len(starts) == 2 * steps
    gaps = sorted(abs(starts[0, k] - starts[1, k]) for k in range(1, steps))
    assert gaps[len(gaps) // 2] < 5e3  # µs
    for rank in (0, 1):
        read_ns = json.loads((tmp_path / f"ddp-wall-rank{rank}.json").read_text())
        ahead = sorted(read_ns[k] - (trace["baseTimeNanoseconds"] + starts[rank, k] * 1e3) for k in range(1, steps))
        assert ahead[0] > -1e6 and 0 <= ahead[len(ahead) // 2] < 5e6  # ns


def test_host_memory_per_rank_and_its_mean_and_max_over_ranks(tmp_path):
    """Rank 1 holds 256 MiB more than rank 0: each rank's own file shows it,
    and the run's host_memory_gb is the largest rank's, host_memory_mean_gb
    the mean of each rank's largest (worked out here from the files)."""
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "local", "--steps", str(STEPS), "--hold-rank", "1",
                                   "--hold-mib", "256"]], [environment()])
    assert_exit_0(code, output)
    largest = []
    for rank in (0, 1):
        read = rankfile.read_rank_file(tmp_path / "local" / f"steps-rank{rank}.jsonl")
        measured = ~read.columns["warmup"]
        assert (read.columns["host_memory_gb"] > 0).all() and (read.columns["peak_memory_gb"] > 0).all()
        largest.append(read.columns["host_memory_gb"][measured].max())
    assert largest[1] - largest[0] > 0.24  # the 256 MiB (0.25 GiB), give or take the processes' other pages
    (row,) = load_runs(tmp_path / "local").to_dict("records")
    assert row["host_memory_gb"] == pytest.approx(max(largest), abs=1e-6)
    assert row["host_memory_mean_gb"] == pytest.approx(sum(largest) / 2, abs=1e-6)
    assert row["fits"] == True  # noqa: E712


def test_exposed_communication_is_what_the_training_thread_does_not_hide(tmp_path):
    """A sampled 8 MiB all-reduce per step (``collective_overlap_training.py``):
    started asynchronously and hidden behind matrix products on the training
    thread until it completes, only the last product's tail is exposed;
    waited for synchronously (as FSDP does on CPU), all of it is. A sampler
    that missed the training thread's computation (wrong thread, wrong
    records) would call the first exposed too; one that counted gloo's own
    worker threads as computation would hide the second."""
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2",
                                   str(SCRIPT.with_name("collective_overlap_training.py")), str(tmp_path)]],
                                 [environment()])
    assert_exit_0(code, output)
    for run, hidden in (("overlapped", True), ("waited", False)):
        steps = load_steps(tmp_path / run)
        window = steps[~steps["warmup"]].groupby("rank")[["comm_s", "comm_exposed_s"]].first()
        assert (window["comm_s"] > 0).all(), run
        if hidden:
            # hidden but for the last product's tail and the gaps between products: far below the waited
            # run's whole collective, with room for a loaded machine's descheduling between products
            assert (window["comm_exposed_s"] < 0.5 * window["comm_s"]).all(), window
        else:
            assert window["comm_exposed_s"].tolist() == pytest.approx(window["comm_s"].tolist(), rel=0.05), window


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="CUDA only: NCCL between two ranks needs two GPUs")
def test_ddp_and_fsdp_with_nccl_on_two_gpus(tmp_path):
    """The GPU path: each rank on its own GPU, NCCL. DDP's all-reduces are
    timed with CUDA events in the communication hook; FSDP2's and FSDP's
    collectives are sampled from the NCCL kernels on the device timeline
    (steps 1 and 2, warm-up 1). Every measured step carries communication,
    the exposed part is a part of it, and the sampling neither failed nor
    was turned off (no ProfilerWarning)."""
    steps_run = 6
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp,fsdp,fsdp1", "--steps", str(steps_run), "--device", "cuda"]],
                                 [environment()])
    assert_exit_0(code, output)
    assert "ProfilerWarning" not in output, output[-3000:]
    runs = load_runs(tmp_path).set_index("run_id")
    assert runs["gpus"].tolist() == [2, 2, 2] and runs["complete"].all()
    assert (runs["platform"] != "cpu").all() and (runs["steps"] == steps_run - 1).all()
    for strategy in ("ddp", "fsdp", "fsdp1"):
        manifest = json.loads((tmp_path / strategy / "manifest.json").read_text())
        assert manifest["environment"]["backend"] == "nccl"
        steps = load_steps(tmp_path / strategy)
        measured = steps[~steps["warmup"]]
        if strategy == "ddp":
            assert (measured["comm_s"] > 0).all()
            assert (measured["comm_exposed_s"] <= measured["comm_s"] + 1e-6).all()
            assert (measured["comm_s"] <= measured["step_s"]).all()
        else:
            assert_carries_the_window_estimate(measured, window_steps=[1, 2])
            assert "torch.profiler windows" in manifest["config"]["comm_measurement"]


def test_the_slowed_rank_is_named_from_the_communication_waits(tmp_path):
    """Rank 1 sleeps 0.15 s in each forward. Every rank's step then takes as
    long (the all-reduce waits for rank 1), but rank 0 waits about 0.15 s per
    step in it, and rank 1 hardly at all."""
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp", "--steps", str(STEPS), "--step-sleep", "0.15",
                                   "--slow-rank", "1"]], [environment()])
    assert_exit_0(code, output)
    per_rank, sentence = find_straggler(load_steps(tmp_path / "ddp"))
    assert per_rank["straggler"].tolist() == [False, True]
    assert per_rank.loc[0, "comm_exposed_s"] > 0.1 > per_rank.loc[1, "comm_exposed_s"]
    # rank 0 waits about the sleep for it: most of it at least, and more only as much as a loaded
    # machine delays rank 1 besides (medians over the steps)
    assert 0.1 < per_rank.loc[1, "wait_gap_s"] < 0.3
    assert sentence.startswith("Run ddp: rank 1 is the straggler.")


def test_the_wait_for_rank_0s_evaluation_is_booked_as_such_not_as_communication(tmp_path):
    """Rank 0 alone evaluates (sleeps 0.3 s) outside the steps after steps 3 and 5 of 8; rank 1 waits for it in
    its next all-reduce. That wait is rank 1's exposed communication in steps 4 and 6, up to the evaluation's
    length: wait_outside_s = (0 + rank 0's two validation phases, as its events file times them) / 2 ranks at
    most, and at least 80 % of it (rank 1 may itself run late on a loaded machine and wait less)."""
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp", "--steps", "8", "--evaluate-rank", "0",
                                   "--evaluate-after", "3,5", "--evaluate-s", "0.3"]], [environment()])
    assert_exit_0(code, output)
    events = (tmp_path / "ddp" / "events-rank0.jsonl").read_text().splitlines()[1:]
    evaluated = sum(json.loads(line)["seconds"] for line in events)
    assert not (tmp_path / "ddp" / "events-rank1.jsonl").exists() and len(events) == 2
    row = load_runs(tmp_path / "ddp").iloc[0]
    assert row["wait_outside_for"] == "rank 0's validation"
    assert 0.8 * evaluated / 2 <= row["wait_outside_s"] <= evaluated / 2 + 1e-6
    assert row["comm_exposed_s"] < row["wait_outside_s"]  # what is left is the all-reduces' own time


def test_the_wait_for_rank_0s_evaluation_in_ddps_broadcast_of_the_buffers_is_booked_as_such(tmp_path):
    """As above, with a model that has buffers (BatchNorm's running statistics): DDP broadcasts them from rank 0
    at the start of every forward, so rank 1 waits for rank 0's evaluation there, inside its forward phase,
    before any all-reduce. That broadcast is communication the forward waits for: the wait is wait_outside_s,
    as above, and no rank's forward holds it (a forward of this model takes milliseconds; the evaluation 0.3 s)."""
    ((code, output),) = run_jobs([[*TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT), str(tmp_path),
                                   "--strategies", "ddp", "--steps", "8", "--evaluate-rank", "0", "--batch-norm",
                                   "--evaluate-after", "3,5", "--evaluate-s", "0.3"]], [environment()])
    assert_exit_0(code, output)
    events = (tmp_path / "ddp" / "events-rank0.jsonl").read_text().splitlines()[1:]
    evaluated = sum(json.loads(line)["seconds"] for line in events)
    row = load_runs(tmp_path / "ddp").iloc[0]
    assert row["wait_outside_for"] == "rank 0's validation"
    assert 0.8 * evaluated / 2 <= row["wait_outside_s"] <= evaluated / 2 + 1e-6
    assert row["comm_exposed_s"] < row["wait_outside_s"]
    steps = load_steps(tmp_path / "ddp")
    assert (steps.loc[~steps["warmup"], "forward_s"] < 0.1).all()  # the first step's forward starts DDP up


def test_two_nodes_map_ranks_to_their_node(tmp_path):
    port = free_port()
    command = [*TORCHRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=trainperf-test", str(SCRIPT),
               str(tmp_path), "--strategies", "ddp", "--steps", str(STEPS)]
    for code, output in run_jobs([command, command], [environment(), environment()]):
        assert_exit_0(code, output)
    run_dir = tmp_path / "ddp"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ranks = manifest["environment"]["ranks"]
    # one process per node: global rank = node rank x 1 + local rank 0
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in ranks] == [(0, 0, 0), (1, 1, 0)]
    host = socket.gethostname()
    assert [r["node"] for r in ranks] == [f"{host}#0", f"{host}#1"]  # one host, two torchrun nodes
    for rank in (0, 1):
        assert_intact(run_dir / f"steps-rank{rank}.jsonl", STEPS)
    steps = load_steps(run_dir)
    assert steps.groupby("rank")["node"].first().tolist() == [f"{host}#0", f"{host}#1"]
    row = load_runs(run_dir).iloc[0]
    assert (row["nodes"], row["gpus"], row["complete"]) == (2, 2, True)


def test_rank_killed_mid_run_leaves_the_others_intact(tmp_path):
    """Two processes started by hand (torchrun would stop the survivor);
    rank 1 kills itself with SIGKILL when step 3 of 8 begins. Steps are
    written in batches of 2 (and never by time): steps 0 and 1 were written
    when step 1 ended, step 2 waited in the batch the kill lost (the bound:
    at most the batch not yet written)."""
    port, steps = free_port(), 8
    command = [sys.executable, str(SCRIPT), str(tmp_path), "--strategies", "local", "--steps", str(steps),
               "--kill-rank", "1", "--kill-at", "3", "--step-sleep", "0.05",
               "--write-every-steps", "2", "--write-every-s", "3600"]
    envs = [{**environment(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for rank in (0, 1)]
    (code0, output0), (code1, output1) = run_jobs([command, command], envs)
    assert_exit_0(code0, output0)
    assert code1 == -signal.SIGKILL, output1
    run_dir = tmp_path / "local"
    assert_intact(run_dir / "steps-rank0.jsonl", steps)
    killed = rankfile.read_rank_file(run_dir / "steps-rank1.jsonl")
    assert killed.bad_lines == [] and not killed.closed and killed.steps == 2  # steps 0-2 completed, 0-1 written
    with pytest.warns(DataWarning, match=r"rank\(s\) 1 stopped early \(rank 1: 2 of 8 steps, profiler not closed\)"):
        runs = load_runs(run_dir)
    row = runs.iloc[0]
    assert not row["complete"] and row["extra_stopped_early_ranks"] == "[1]"
    assert row["ranks"] == 2 and row["gpus"] == 2
    assert len(load_steps(run_dir)) == steps + 2
