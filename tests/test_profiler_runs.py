"""What a profiled run records for the reports: the CPU peak behind a CPU
run's MFU, the batch facts (micro-batch, accumulation, global batch), and one
run per folder."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

import trainperf
from trainperf import StepProfiler
from trainperf.profiler import RunFolderInUse
from trainperf.profiler import cpu_peak as cpu_peak_module
from trainperf.profiler.cpu_peak import CACHE_FILE, cpu_model
from trainperf import aggregate_steps

N_PARAMS = 1_000_000


def _profile(run_dir, steps=4, micro=1, samples=8, seq_len=16, **kwargs):
    prof = StepProfiler(run_dir, config={"precision": "fp32", "n_params": N_PARAMS, "seq_len": seq_len},
                        warmup_steps=1, trace=False, **kwargs)
    x = torch.randn(samples, 32)
    for _ in range(steps):
        with prof.step() as step:
            for _ in range(micro):
                (x @ x.T).sum()
                step.micro_step(tokens=samples * seq_len, samples=samples)
    prof.close()
    return json.loads((run_dir / "manifest.json").read_text())


def test_cpu_run_records_the_measured_peak_and_gets_mfu(tmp_path, monkeypatch):
    # a quiet machine whose matmuls run at 50 TFLOP/s per thread (fakes: this machine's load and speed vary), with
    # a cache of its own (in the tests' shared one, another test may have cached a real quiet measurement first)
    machine_cache = tmp_path / "cache"
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(machine_cache))
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(cpu_peak_module, "_torch_measure", lambda dtype, threads: 50.0 * threads)
    manifest = _profile(tmp_path / "a")
    peak = manifest["environment"]["cpu_peak"]
    cached = json.loads((machine_cache / CACHE_FILE).read_text())
    key = f"{cpu_model()}|{peak['cores']}|{torch.__version__}|{{}}|float32"
    assert peak["quiet"] and "on a quiet machine" in peak["source"]
    assert cached[key.format(1)]["tflops"] == 50.0 and peak["threads"] == torch.get_num_threads()
    key = key.format(torch.get_num_threads())
    assert cached[key]["tflops"] == peak["tflops"] and peak["tflops"] > 0 and peak["dtype"] == "float32"
    run = trainperf.derive(trainperf.load_runs(tmp_path / "a")).iloc[0]
    assert run["peak_tflops_per_gpu"] == peak["tflops"]
    # 6 N FLOPs per token (no layers given) over the run's own tokens/s, against the recorded peak
    assert run["mfu"] == pytest.approx(run["tokens_per_s"] * 6 * N_PARAMS / 1e12 / peak["tflops"], rel=1e-6)
    assert "cpu runs need a measured" not in str(run.get("notes") or "")
    again = _profile(tmp_path / "b")["environment"]["cpu_peak"]
    assert again["cached"] is True and again["tflops"] == peak["tflops"]  # measured once per machine


def test_a_peak_given_in_the_config_is_not_measured(tmp_path, monkeypatch):
    import trainperf.profiler.step_profiler as step_profiler

    monkeypatch.setattr(step_profiler, "cpu_peak", lambda precision, **_: pytest.fail("measured"))
    prof = StepProfiler(tmp_path / "r", config={"peak_tflops_per_gpu": 0.5}, trace=False)
    prof.close()
    assert "cpu_peak" not in json.loads((tmp_path / "r" / "manifest.json").read_text())["environment"]


def test_profiled_run_records_its_batch_facts(tmp_path):
    _profile(tmp_path / "acc", micro=3, samples=4)
    run = trainperf.load_runs(tmp_path / "acc").iloc[0]
    assert (run["micro_batch_size"], run["grad_accum_steps"], run["global_batch_size"]) == (4, 3, 12)


def test_batch_facts_sum_data_parallel_ranks_only():
    # two ranks, 3 measured steps each of 2 micro-steps of 8 samples: 16 samples per rank per step
    steps = pd.DataFrame({
        "run_id": "r", "rank": np.repeat([0, 1], 3), "step": np.tile([0, 1, 2], 2), "warmup": False,
        "step_s": 1.0, "samples": 16.0, "micro_steps": 2})
    row = aggregate_steps(steps).iloc[0]
    assert (row["micro_batch_size"], row["grad_accum_steps"], row["global_batch_size"]) == (8, 2, 32)
    manifests = {"r": {"config": {"tensor_parallel": 2}}}  # both ranks hold one model replica
    assert aggregate_steps(steps, manifests).iloc[0]["global_batch_size"] == 16
    given = {"r": {"config": {"micro_batch_size": 5}}}
    assert aggregate_steps(steps, given).iloc[0]["micro_batch_size"] == 5  # the config wins


def test_a_folder_holding_another_run_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    _profile(run_dir)
    (run_dir / "steps-rank1.jsonl").write_text((run_dir / "steps-rank0.jsonl").read_text())  # a 2-rank run's
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    with pytest.raises(RunFolderInUse, match=rf"^{run_dir} already holds a run \(manifest\.json, "
                                             r"steps-rank0\.jsonl, steps-rank1\.jsonl\).*overwrite=True"):
        _profile(run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # nothing written


def test_overwrite_replaces_the_old_run_entirely(tmp_path):
    run_dir = tmp_path / "run"
    _profile(run_dir)
    (run_dir / "steps-rank1.jsonl").write_text((run_dir / "steps-rank0.jsonl").read_text())
    _profile(run_dir, steps=5, overwrite=True)
    assert not (run_dir / "steps-rank1.jsonl").exists()
    run = trainperf.load_runs(run_dir).iloc[0]
    assert (run["gpus"], run["ranks"], run["steps"]) == (1, 1, 4)  # 5 steps, 1 of them warm-up
    assert not math.isnan(run["elapsed_s"])


def test_without_a_process_group_rank_0_leaves_the_other_ranks_files_alone(tmp_path, monkeypatch):
    """Ranks started by torchrun but never joined in a process group cannot
    agree: rank 0 must not take rank 1's fresh file for another run's."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "steps-rank1.jsonl").write_text("")  # rank 1 of this job was faster
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    _profile(run_dir)
    assert (run_dir / "steps-rank0.jsonl").exists() and (run_dir / "steps-rank1.jsonl").exists()
    with pytest.raises(RunFolderInUse):  # but its own files and the manifest are another run's
        _profile(run_dir)


def test_a_run_still_being_written_is_skipped_with_a_warning(tmp_path):
    """A folder of runs where one run has only its manifest (just started)
    and one only warm-up steps: the finished run is loaded; each other one is
    named in one DataWarning and listed as skipped. Named on its own, such a
    run is still an error."""
    _profile(tmp_path / "runs" / "done")
    started = StepProfiler(tmp_path / "runs" / "started", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=2)
    warming = StepProfiler(tmp_path / "runs" / "warming", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=2,
                           write_every_steps=1)  # batches of one step: its step is written as it ends
    with warming.step(samples=8):
        pass
    with pytest.warns(trainperf.DataWarning) as caught:
        runs = trainperf.load_runs(tmp_path / "runs")
    assert runs["run_id"].tolist() == ["done"] and runs.loc[0, "steps"] == 3
    messages = [str(w.message) for w in caught if issubclass(w.category, trainperf.DataWarning)]
    assert messages == [
        f"{tmp_path / 'runs' / 'started'}: run skipped, still running or no measured step "
        "(no measured steps: 0 step line(s) (warmup_steps = 2))",
        f"{tmp_path / 'runs' / 'warming'}: run skipped, still running or no measured step "
        "(no measured steps: 1 step line(s), all warm-up (warmup_steps = 2))"]
    assert [path for path, _ in runs.attrs["skipped"]] == [str(tmp_path / "runs" / n) for n in ("started", "warming")]
    with pytest.raises(trainperf.DataError, match="started: no measured steps"):
        trainperf.load_runs(tmp_path / "runs" / "started")
    started.close()
    warming.close()


def test_a_run_that_competed_for_the_cpu_is_marked_oversubscribed(tmp_path):
    """From the manifest's host (rank 0's, at the start) and the ranks on it: on CPU, processes x torch
    threads above the cores, or on any device a load average above them."""
    from trainperf.runfolder.reader import oversubscribed

    def environment(device: str, ranks: int, threads: int, load: float, cores: int = 2) -> dict:
        return {"device": device, "ranks": [{"rank": r, "node": "vm"} for r in range(ranks)],
                "host": {"cores": cores, "load_average": load, "threads_per_process": threads}}

    assert oversubscribed(environment("cpu", 4, 1, 0.5)) is True      # 4 busy threads on 2 cores
    assert oversubscribed(environment("cpu", 2, 2, 0.5)) is True      # 2 processes x 2 threads
    assert oversubscribed(environment("cpu", 2, 1, 0.5)) is False
    assert oversubscribed(environment("NVIDIA H100", 8, 4, 1.0, cores=4)) is False  # GPU ranks: their cores idle
    assert oversubscribed(environment("NVIDIA H100", 1, 1, 6.0, cores=4)) is True   # other work on the host
    assert oversubscribed({"device": "cpu"}) is None                   # a manifest without the host
    # a profiled run records its host, and its runs row follows the rule
    prof = trainperf.StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0})
    for _ in range(3):
        with prof.step(samples=1):
            torch.ones(8).sum()
    prof.close()
    host = json.loads((tmp_path / "run" / "manifest.json").read_text())["environment"]["host"]
    assert host["cores"] >= 1 and host["threads_per_process"] == torch.get_num_threads()
    row = trainperf.load_runs(tmp_path / "run", cache=False).iloc[0]
    assert bool(row["oversubscribed"]) == (torch.get_num_threads() > host["cores"]
                                           or host["load_average"] > host["cores"])
