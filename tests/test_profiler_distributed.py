"""StepProfiler under torchrun (gloo, CPU): DDP and FSDP on two processes, two
simulated nodes, and one rank killed with SIGKILL mid-run.

The training job is ``tests/profiled_training.py``. Each test is bounded by a
timeout; every process must exit 0 (except the one killed on purpose).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainperf import DataWarning, load_runs, load_steps
from trainperf.profiler import rankfile
from trainperf.steps import read_run

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("profiled_training.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TIMEOUT_S = 240
STEPS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment() -> dict[str, str]:
    # torchrun leaves OMP_NUM_THREADS unset with --nnodes > 1; two cores are shared
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def assert_exit_0(process: subprocess.CompletedProcess | subprocess.Popen, output: str = "") -> None:
    assert process.returncode == 0, f"exit {process.returncode}:\n{output[-3000:]}"


def assert_intact(path: Path, steps: int) -> None:
    """Every line of a rank's file parses; it ends with the end line."""
    read = rankfile.read_rank_file(path)
    assert read.bad_lines == [] and read.closed and read.steps == steps


def test_ddp_and_fsdp_on_two_processes(tmp_path):
    out = subprocess.run([*TORCHRUN, "--nproc_per_node=2", f"--master_port={free_port()}", str(SCRIPT),
                          str(tmp_path), "--strategies", "ddp,fsdp", "--steps", str(STEPS)],
                         env=environment(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert_exit_0(out, out.stdout + out.stderr)
    for strategy in ("ddp", "fsdp"):
        for rank in (0, 1):
            assert_intact(tmp_path / strategy / f"steps-rank{rank}.jsonl", STEPS)
    steps = load_steps(tmp_path / "ddp")
    measured = steps[~steps["warmup"]]
    # several all-reduces per backward (small buckets); exposure is a part of their time
    assert (measured["comm_s"] > 0).all()
    assert (measured["comm_exposed_s"] <= measured["comm_s"] + 1e-6).all()
    assert (measured["comm_s"] <= measured["step_s"]).all()
    runs = load_runs(tmp_path).set_index("run_id")
    assert runs.loc["ddp", "strategy"] == "ddp" and runs.loc["fsdp", "strategy"] == "fsdp"
    assert runs["gpus"].tolist() == [2, 2] and runs["nodes"].tolist() == [1, 1]
    assert runs["complete"].all() and (runs["steps"] == STEPS - 1).all()
    # FSDP issues its own collectives: no communication hook, comm not separated
    assert load_steps(tmp_path / "fsdp")["comm_s"].isna().all()
    assert runs.loc["fsdp", "tokens"] == 2 * (STEPS - 1) * 8 * 16


def test_two_nodes_map_ranks_to_their_node(tmp_path):
    port = free_port()
    nodes = [subprocess.Popen([*TORCHRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                               f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=trainperf-test", str(SCRIPT),
                               str(tmp_path), "--strategies", "ddp", "--steps", str(STEPS)],
                              env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [node.communicate(timeout=TIMEOUT_S)[0] for node in nodes]
    for node, output in zip(nodes, outputs):
        assert_exit_0(node, output)
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
    rank 1 kills itself with SIGKILL when step 3 of 8 begins."""
    port, steps = free_port(), 8
    processes = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path), "--strategies", "local",
                                   "--steps", str(steps), "--kill-rank", "1", "--kill-at", "3",
                                   "--step-sleep", "0.05"],
                                  env={**environment(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in (0, 1)]
    outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in processes]
    assert_exit_0(processes[0], outputs[0])
    assert processes[1].returncode == -signal.SIGKILL
    run_dir = tmp_path / "local"
    assert_intact(run_dir / "steps-rank0.jsonl", steps)
    killed = rankfile.read_rank_file(run_dir / "steps-rank1.jsonl")
    assert killed.bad_lines == [] and not killed.closed and killed.steps == 3  # steps 0-2 completed
    with pytest.warns(DataWarning, match=r"rank\(s\) 1 stopped early \(rank 1: 3 of 8 steps, profiler not closed\)"):
        runs = load_runs(run_dir)
    row = runs.iloc[0]
    assert not row["complete"] and row["extra_stopped_early_ranks"] == "[1]"
    assert row["ranks"] == 2 and row["gpus"] == 2
    assert len(read_run(run_dir).steps) == steps + 3
