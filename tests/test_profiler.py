"""StepProfiler in one process: what it records, the files it writes, and
that it never breaks the job it measures."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import trainperf
from trainperf import cli
from trainperf import StepProfiler, export_chrome_trace, load_runs, load_steps
from trainperf.profiler import ProfilerWarning, clocks, collectives, comm, record, step_profiler
from trainperf.runfolder import linefile, rankfile


class FakeTime:
    """A perf_counter that only moves when told to: phase times become exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(clocks, "perf_counter", fake)
    monkeypatch.setattr(step_profiler, "perf_counter", fake)
    return fake


def accumulation_run(run_dir, fake):
    """Three optimizer steps of two micro-batches each; the wait for a batch
    takes 0.5 s, forward 1 s, backward 2 s, the optimizer 0.25 s; a 3 s
    validation after step 1, outside any step (a phase of its own, in no step)."""
    def loader():
        for i in range(3):
            fake.advance(0.5)
            yield i

    prof = StepProfiler(run_dir, config={"model": "toy", "precision": "fp32"}, warmup_steps=1)
    for i, _ in enumerate(prof.batches(loader())):
        with prof.step() as step:
            for _micro in range(2):
                step.micro_step(tokens=100, samples=2)
                with prof.phase("forward"):
                    fake.advance(1.0)
                with prof.phase("backward"):
                    fake.advance(2.0)
            with prof.phase("optimizer"):
                fake.advance(0.25)
            step.loss = 3.0 - i
        if i == 1:
            with prof.phase("validation"):
                fake.advance(3.0)
    prof.close()


def test_tokens_given_to_a_step_and_to_its_micro_steps_count_once(tmp_path, fake_time):
    """400 tokens given to step() and 2 x 200 to its micro-steps were counted as 800; step()'s count the whole
    step, and a warning says the micro-steps' are not added. Samples given only to the micro-steps add up."""
    prof = StepProfiler(tmp_path / "both", config={"model": "toy"}, warmup_steps=0)
    with pytest.warns(ProfilerWarning, match=r"given both to step\(\) and to its micro_step\(\) calls"):
        for _ in range(2):
            with prof.step(tokens=400) as step:
                for _micro in range(2):
                    step.micro_step(tokens=200, samples=2)
                    fake_time.advance(1.0)
    prof.close()
    steps = load_steps(tmp_path / "both")
    assert steps["tokens"].tolist() == [400, 400] and steps["samples"].tolist() == [4, 4]
    assert steps["micro_steps"].tolist() == [2, 2]


def test_steps_phases_and_accumulation_by_hand(tmp_path, fake_time):
    accumulation_run(tmp_path / "acc", fake_time)
    steps = load_steps(tmp_path / "acc")
    # step = 0.5 data + 2 x (1 + 2) + 0.25 = 6.75 s; step 2 starts after the 3 s validation, outside the steps
    assert steps["step"].tolist() == [0, 1, 2]
    assert steps["warmup"].tolist() == [True, False, False]
    assert steps["start_s"].tolist() == pytest.approx([0.0, 6.75, 16.5])
    assert steps["step_s"].tolist() == pytest.approx([6.75, 6.75, 6.75])
    assert steps["data_s"].tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert steps["forward_s"].tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert steps["backward_s"].tolist() == pytest.approx([4.0, 4.0, 4.0])
    assert steps["optimizer_s"].tolist() == pytest.approx([0.25, 0.25, 0.25])
    assert steps["validation_s"].isna().all() and steps["h2d_s"].isna().all() and steps["comm_s"].isna().all()
    events = (tmp_path / "acc" / "events-rank0.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in events[1:]] == [{"phase": "validation", "start_s": 13.5, "seconds": 3.0}]
    assert steps["tokens"].tolist() == [200, 200, 200]  # both micro-steps count
    assert steps["samples"].tolist() == [4, 4, 4]
    assert steps["micro_steps"].tolist() == [2, 2, 2]
    assert steps["loss"].tolist() == [3.0, 2.0, 1.0]
    assert (steps["peak_memory_gb"] > 0).all()
    assert steps["run_id"].tolist() == ["acc"] * 3 and steps["rank"].tolist() == [0, 0, 0]

    run = load_runs(tmp_path / "acc").iloc[0]
    # window = steps 1 and 2: from 6.75 s to 16.5 + 6.75 = 23.25 s, the validation between them included
    assert run["elapsed_s"] == pytest.approx(16.5)
    assert run["forward_s"] == pytest.approx(4.0) and run["backward_s"] == pytest.approx(8.0)
    assert run["data_s"] == pytest.approx(1.0) and "validation_s" not in run
    assert run["outside_validation_s"] == pytest.approx(3.0)
    assert run["optimizer_s"] == pytest.approx(0.5)
    assert (run["tokens"], run["samples"], run["steps"], run["warmup_steps"]) == (400, 8, 2, 1)
    assert run["train_loss"] == 1.0 and run["grad_accum_steps"] == 2
    assert (run["gpus"], run["nodes"], run["ranks"], run["complete"]) == (1, 1, 1, True)
    assert (run["model"], run["precision"], run["platform"], run["strategy"]) == ("toy", "fp32", "cpu", "single")
    assert run["rank_imbalance"] == 1.0 and run["slowest_rank"] == 0


def test_manifest_holds_config_and_environment(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parent
    monkeypatch.chdir(repo)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
    prof = StepProfiler(tmp_path / "m", config={"model": "toy", "seq_len": 64})
    prof.close()
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["config"] == {"model": "toy", "seq_len": 64}
    env = manifest["environment"]
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    assert env["world_size"] == 1 and env["nodes"] == 1 and len(env["ranks"]) == 1
    assert env["git_commit"] == head  # the commit of the working directory (None outside git)
    assert manifest["warmup_steps"] == 2


def test_real_training_loop(tmp_path):
    """A real model on the real clock: what the loop computed is what was recorded."""
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loader():
        for _ in range(4):
            time.sleep(0.02)
            yield torch.randn(16, 32), torch.randn(16, 1)

    losses = []
    with StepProfiler(tmp_path / "real", warmup_steps=2) as prof:
        for x, y in prof.batches(loader()):
            with prof.step(tokens=x.numel(), samples=len(x)) as step:
                with prof.phase("h2d"):
                    x, y = x.to("cpu"), y.to("cpu")
                with prof.phase("forward"):
                    out = model(x)
                with prof.phase("loss"):
                    loss = torch.nn.functional.mse_loss(out, y)
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()
                step.loss = loss
            losses.append(loss.item())
    steps = load_steps(tmp_path / "real")
    assert steps["loss"].tolist() == pytest.approx(losses, abs=1e-6)
    assert (steps["data_s"] >= 0.02).all()
    phases = steps[["data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s"]]
    assert phases.notna().all().all()
    assert (steps["step_s"] >= phases.sum(axis=1) - 1e-5).all()  # phases lie inside the step's window
    assert steps["tokens"].tolist() == [512] * 4 and steps["warmup"].tolist() == [True, True, False, False]


KILLED_JOB = """
import os, signal, sys, torch
from trainperf import StepProfiler
# SIGINT raises KeyboardInterrupt, as in a job started in a shell's foreground (one started in the background
# inherits SIGINT ignored, and Python then leaves it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
{before}
prof = StepProfiler({run_dir!r}, warmup_steps=0, write_every_steps=2, write_every_s=3600)
for i in range(5):
    with prof.step(tokens=10):
        with prof.phase("forward"):
            pass
{end}
"""


def killed_job(run_dir, end, before=""):
    """Five steps written in batches of two (never by time), then ``end``
    instead of ``close()``: the process's exit code."""
    return subprocess.run([sys.executable, "-c", KILLED_JOB.format(run_dir=str(run_dir), end=end, before=before)],
                          capture_output=True, text=True).returncode


def test_a_killed_job_loses_at_most_the_batch_not_yet_written(tmp_path):
    """A process that dies without a chance to write (SIGKILL, os._exit)
    keeps every batch written: steps 0-3 (two batches of two), not step 4,
    which waited for the third; every line it kept reads."""
    assert killed_job(tmp_path / "k", "os.kill(os.getpid(), signal.SIGKILL)") == -signal.SIGKILL
    with pytest.warns(trainperf.DataWarning, match=r"rank\(s\) 0 stopped early \(rank 0: profiler not closed\)"):
        row = load_runs(tmp_path / "k").iloc[0]
    assert load_steps(tmp_path / "k")["step"].tolist() == [0, 1, 2, 3]
    assert not row["complete"] and row["extra_stopped_early_ranks"] == "[0]"


@pytest.mark.parametrize("end, code", [("os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM),
                                       ("os.kill(os.getpid(), signal.SIGINT)", -signal.SIGINT),  # KeyboardInterrupt, then Python exits by SIGINT
                                       ("sys.exit(4)", 4)])
def test_a_terminated_or_exiting_job_writes_its_last_batch_and_ends_as_it_would(tmp_path, end, code):
    """SIGTERM kills the process as its default action would (exit by the
    signal), SIGINT still raises KeyboardInterrupt, an exit keeps its code;
    each writes step 4 first. No end line: the profiler was not closed."""
    assert killed_job(tmp_path / "t", end) == code
    read = rankfile.read_rank_file(tmp_path / "t" / "steps-rank0.jsonl")
    assert read.columns["step"].tolist() == [0, 1, 2, 3, 4] and not read.closed and read.bad_lines == []


def test_a_signal_handler_of_the_job_still_runs(tmp_path):
    """The job's own SIGTERM handler, installed before the profiler, is
    chained: it runs (and decides the exit code) after the last batch is written."""
    before = ("signal.signal(signal.SIGTERM, lambda *_: (open({marker!r}, 'w').write('ran'), os._exit(3)))"
              .format(marker=str(tmp_path / "marker")))
    assert killed_job(tmp_path / "h", "os.kill(os.getpid(), signal.SIGTERM)", before) == 3
    assert (tmp_path / "marker").read_text() == "ran"
    assert rankfile.read_rank_file(tmp_path / "h" / "steps-rank0.jsonl").columns["step"].tolist() == [0, 1, 2, 3, 4]


def test_a_closed_profiler_gives_the_signals_back(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    prof = StepProfiler(tmp_path / "g", warmup_steps=0)
    assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
    prof.close()
    assert {s: signal.getsignal(s) for s in before} == before


def test_chrome_trace_export(tmp_path, fake_time):
    accumulation_run(tmp_path / "acc", fake_time)
    path = export_chrome_trace(tmp_path / "acc")
    assert path == tmp_path / "acc" / "trace.json"
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    forward = [e for e in events if e["name"] == "forward"]
    assert len(forward) == 6 and all(e["dur"] == pytest.approx(1e6) for e in forward)  # 1 s in µs
    steps = [e for e in events if e["cat"] == "step"]
    assert [e["dur"] for e in steps] == pytest.approx([6.75e6, 6.75e6, 6.75e6])
    (validation,) = [e for e in events if e["name"] == "validation"]
    assert (validation["cat"], validation["tid"], validation["ts"], validation["dur"]) == ("outside", 0, 13.5e6, 3e6)
    # steps 1-2 only: the validation after step 1 lies between them and stays; step 0 goes
    kept = [e for e in json.loads(export_chrome_trace(tmp_path / "acc", tmp_path / "part", steps=(1, 2)).read_text())[
        "traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in kept if e["cat"] in ("step", "outside")] == ["step 1", "step 2", "validation"]


def test_trace_command(tmp_path, fake_time, capsys):
    accumulation_run(tmp_path / "acc", fake_time)
    assert cli.main(["trace", str(tmp_path / "acc"), "--out", str(tmp_path / "traces"), "--ranks", "0-1",
                     "--steps", "0-1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "traces" / "trace.json")
    events = json.loads((tmp_path / "traces" / "trace.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "step"] == ["step 0", "step 1"]
    assert cli.main(["trace", str(tmp_path / "missing")]) == 2
    assert cli.main(["trace", str(tmp_path / "acc"), "--ranks", "5"]) == 2  # no such rank: an error naming it


def test_unwritable_folder_warns_once_and_training_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(ProfilerWarning) as caught:
        prof = StepProfiler(blocker / "run")
        model = prof.watch(torch.nn.Linear(2, 1))
        done = 0
        for x in prof.batches([torch.ones(1, 2)] * 3):
            with prof.step(tokens=2) as step:
                with prof.phase("forward"):
                    step.loss = model(x).sum()
            done += 1
        prof.close()
    assert done == 3
    assert len(caught) == 1 and "profiling stopped, training goes on" in str(caught[0].message)


def test_disk_full_at_start_warns_once(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "manifest.json.partial").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.warns(ProfilerWarning, match="No space left on device") as caught:
        prof = StepProfiler(tmp_path / "full")
        for _ in range(3):
            with prof.step():
                pass
        prof.close()
    assert len(caught) == 1


def test_disk_full_mid_run_keeps_earlier_steps(tmp_path, monkeypatch):
    prof = StepProfiler(tmp_path / "mid", warmup_steps=0, trace=False, write_every_steps=1)  # a write per step
    real_write = linefile.os.write
    calls = {"n": 0}

    def filling_write(fd, data):
        calls["n"] += 1
        if calls["n"] > 3:  # the header and two steps fit, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(linefile.os, "write", filling_write)
    with pytest.warns(ProfilerWarning) as caught:
        for _ in range(5):
            with prof.step(tokens=1):
                pass
        prof.close()
    assert len(caught) == 1
    monkeypatch.undo()
    assert load_steps(tmp_path / "mid")["step"].tolist() == [0, 1, 2]
    with pytest.warns(trainperf.DataWarning, match="profiler not closed"):
        assert not load_runs(tmp_path / "mid")["complete"].iloc[0]


def test_user_errors_pass_through_and_the_failed_step_is_not_recorded(tmp_path):
    prof = StepProfiler(tmp_path / "err", warmup_steps=0)
    with prof.step():
        pass
    with pytest.raises(ZeroDivisionError):
        with prof.step():
            with prof.phase("forward"):
                1 / 0
    with prof.step():
        pass
    prof.close()
    assert load_steps(tmp_path / "err")["step"].tolist() == [0, 1]


def test_unknown_phase_warns_once_and_is_not_timed(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = StepProfiler(tmp_path / "u", warmup_steps=0)
        for _ in range(3):
            with prof.step():
                with prof.phase("forwrad"):
                    pass
        prof.close()
    assert [str(w.message).count("unknown phase 'forwrad'") for w in caught] == [1]
    assert len(load_steps(tmp_path / "u")) == 3


def test_comm_seconds_by_hand():
    """Two backward passes (accumulation without no_sync). Pass 1: buckets
    ready at 0, 1, 2.5 s (the last), their all-reduces end at 2, 3, 4 s;
    pass 2: ready at 10 and 11.5 s (the last), ending at 11 and 12 s."""
    intervals = [(0.0, 2.0, False), (1.0, 3.0, False), (2.5, 4.0, True),
                 (10.0, 11.0, False), (11.5, 12.0, True)]
    total, exposed = comm.comm_seconds(intervals)
    # in flight: 0 -> 4 s, then 10 -> 11 s and 11.5 -> 12 s (the gap is not communication)
    assert total == pytest.approx(4.0 + 1.0 + 0.5)
    # after the last bucket was ready: 4 - 2.5 s, then 12 - 11.5 s
    assert exposed == pytest.approx(1.5 + 0.5)
    # an earlier bucket still in flight after the last one finished is exposed too
    assert comm.comm_seconds([(0.0, 5.0, False), (1.0, 2.0, True)]) == pytest.approx((5.0, 4.0))
    assert comm.exposed_intervals(intervals) == [(2.5, 4.0), (11.5, 12.0)]


def test_exposed_communication_is_taken_out_of_backward_once():
    """Backward timed 1 -> 4.2 s and 9 -> 12.1 s; the exposed waits 2.5 -> 4 s and
    11.5 -> 12 s lie inside it, so backward keeps 3.2 - 1.5 + 3.1 - 0.5 = 4.3 s."""
    backward = [(1.0, 4.2), (9.0, 12.1)]
    assert record.overlap(backward, [(2.5, 4.0), (11.5, 12.0)]) == pytest.approx(2.0)
    assert record.overlap(backward, [(4.5, 5.0)]) == 0.0  # a wait after backward returned is not in it


def test_import_trainperf_does_not_import_torch():
    code = "import sys, trainperf; trainperf.StepProfiler; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class FakeEvent:
    """A CUDA event on a fake device that runs ``lag`` events behind the host."""

    def __init__(self, device):
        self.device = device

    def record(self, stream):
        assert stream == ("stream", "cuda:1"), "recorded on another device's stream"
        self.device.recorded += 1
        self.number = self.device.recorded
        self.time = self.device.host_time()

    def query(self):
        return self.number <= self.device.recorded - self.device.lag

    def elapsed_time(self, end):
        assert self.query() and end.query(), "read before the device reached it"
        return (end.time - self.time) * 1000.0


class FakeCuda:
    def __init__(self, host_time, lag):
        self.host_time, self.lag, self.recorded, self.synchronized = host_time, lag, 0, 0

    def Event(self, enable_timing):  # noqa: N802 (torch.cuda's name)
        return FakeEvent(self)

    def current_stream(self, device):
        return ("stream", device)

    def synchronize(self, device):
        assert device == "cuda:1"
        self.synchronized += 1
        self.lag = 0


def test_device_marks_are_resolved_late_without_a_sync_per_phase(tmp_path, fake_time):
    """With a device running behind the host, steps wait for their events
    (non-blocking queries) and are written once the device got there; the
    only synchronize is at close. Marks go on the timed device's stream."""
    cuda = FakeCuda(fake_time, lag=8)
    prof = StepProfiler(tmp_path / "gpu", warmup_steps=0)
    prof._clock = clocks.CudaClock(cuda, "cuda:1")
    prof._origin = prof._clock.mark()
    lines = tmp_path / "gpu" / "steps-rank0.jsonl"
    for _ in range(6):
        with prof.step():
            with prof.phase("forward"):
                fake_time.advance(0.5)
            with prof.phase("backward"):
                fake_time.advance(1.0)
    written_before_close = len(lines.read_text().splitlines()) - 1
    assert cuda.synchronized == 0 and 0 < written_before_close < 6
    prof.close()
    assert cuda.synchronized == 1
    steps = load_steps(tmp_path / "gpu")
    assert steps["forward_s"].tolist() == pytest.approx([0.5] * 6)
    assert steps["step_s"].tolist() == pytest.approx([1.5] * 6)


def test_ddps_broadcast_of_the_buffers_is_exposed_communication_not_forward(tmp_path, fake_time):
    """A model with buffers (BatchNorm's running statistics) under DDP: each forward starts with DDP's broadcast
    of them from rank 0, which the forward waits for (here 40 ms on the fake clock; on several ranks, as long as
    rank 0 takes to get there). Steps of a 10 ms forward, that broadcast and a 20 ms backward whose all-reduce
    takes no time: forward_s 10 ms, comm_s and comm_exposed_s 40 ms, backward_s 20 ms, step 70 ms. A forward
    through the DDP model in a validation phase after step 0 broadcasts too, in no step; DDP then skips the
    broadcast of the next forward (one that follows a forward without gradients), so step 1 has none."""
    import gc

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)))
        broadcast = model._sync_buffers

        def slow_broadcast() -> None:
            fake_time.advance(0.040)
            broadcast()

        model._sync_buffers = slow_broadcast
        prof = StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, warmup_steps=0, trace=False)
        prof.watch(model)
        for i, x in enumerate(prof.batches([torch.ones(4, 2)] * 3)):
            with prof.step(samples=4):
                with prof.phase("forward"):
                    fake_time.advance(0.010)
                    out = model(x)
                with prof.phase("backward"):
                    fake_time.advance(0.020)
                    out.sum().backward()  # returns once the all-reduce completed: no time on the fake clock
            if i == 0:
                with prof.phase("validation"), torch.no_grad():
                    model(x)
        prof.close()
        steps = load_steps(tmp_path / "run")
        assert steps["forward_s"].tolist() == pytest.approx([0.010] * 3)
        assert steps["comm_s"].tolist() == pytest.approx([0.040, 0.0, 0.040])
        assert steps["comm_exposed_s"].tolist() == pytest.approx([0.040, 0.0, 0.040])
        assert steps["backward_s"].tolist() == pytest.approx([0.020] * 3)
        assert steps["step_s"].tolist() == pytest.approx([0.070, 0.030, 0.070])
        del model, out
        gc.collect()
    finally:
        dist.destroy_process_group()


def test_a_closed_profiler_lets_go_of_the_process_group(tmp_path):
    """After close(), only the model keeps its communication hook: the profiler holds no reference to the
    process group, so the script's teardown (free the model, then destroy the group) frees it as it would
    without trainperf."""
    import gc

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
        prof = StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0})
        prof.watch(model)
        for x in prof.batches([torch.ones(4, 2)] * 3):
            with prof.step(samples=4):
                model(x).sum().backward()
        prof.close()
        group = model.process_group
        del model  # the README's teardown, before destroying the group
        gc.collect()
        assert not [r for r in gc.get_referrers(group) if type(r).__module__.startswith("trainperf")]
    finally:
        dist.destroy_process_group()


def test_stopping_waits_until_the_backend_thread_let_go_of_the_completion_callback():
    """The end of an all-reduce is marked by a Python callback that the
    communication backend's thread runs, and frees, after DDP has seen the
    all-reduce complete. A process that exits before that thread let go of it
    aborts (gloo under torchrun: "terminate called without an active exception",
    SIGABRT, at the end of a 2-rank README run on a loaded machine). ``stop()``
    (at ``close()``) returns only once the callback is freed: here the backend is
    a thread that completes the all-reduce 0.2 s later."""
    import threading

    from trainperf.profiler.clocks import HostClock

    all_reduce = torch.futures.Future()
    timer = comm.DdpCommTimer(HostClock(), lambda state, bucket: all_reduce, None)
    bucket = type("Bucket", (), {"is_last": lambda self: True})()
    seen_by_ddp = timer.hook(None, bucket)

    def backend() -> None:
        time.sleep(0.2)
        all_reduce.set_result(torch.ones(2))  # runs the callback, completes DDP's future, frees the callback

    thread = threading.Thread(target=backend)
    thread.start()
    timer.stop()
    assert seen_by_ddp.done() and seen_by_ddp.value().tolist() == [1.0, 1.0]
    thread.join()


def test_where_the_wall_clock_went_by_hand(tmp_path, fake_time):
    """A fake clock from the profiler's start: 2 s of set-up; steps of 4, 2 (the 2 warm-up steps), 1 and 1 s; a
    3 s checkpoint outside the steps; a step whose code raises after 0.5 s (not recorded); a last 1 s step; 1 s
    more to close(). Wall clock 15.5 s; the steps 9 s, of which the warm-up's 6 s less 2 steady steps of 1 s is
    excess: productive 5 s; unaccounted: the failed step's 0.5 s."""
    prof = StepProfiler(tmp_path / "run", config={"peak_tflops_per_gpu": 1.0}, trace=False)
    fake_time.advance(2.0)
    for seconds in (4.0, 2.0, 1.0, 1.0):
        with prof.step(samples=1):
            fake_time.advance(seconds)
    with prof.phase("checkpoint"):
        fake_time.advance(3.0)
    with pytest.raises(RuntimeError), prof.step(samples=1):
        fake_time.advance(0.5)
        raise RuntimeError("out of memory")
    with prof.step(samples=1):
        fake_time.advance(1.0)
    fake_time.advance(1.0)
    prof.close()
    steps = load_steps(tmp_path / "run")
    assert steps["start_s"].tolist() == pytest.approx([2.0, 6.0, 8.0, 9.0, 13.5])  # the last after the checkpoint
    run = load_runs(tmp_path / "run", cache=False).iloc[0]
    assert (run["warmup_steps"], run["warmup_rule"]) == (2, "fixed")  # 3 steps after the warm-up: too few to judge
    assert run["wall_s"] == pytest.approx(15.5)
    assert run["goodput"] == pytest.approx(5.0 / 15.5)
    parts = ["productive_s", "warmup_excess_s", "startup_s", "outside_checkpoint_s", "unaccounted_s", "after_steps_s"]
    assert run[parts].tolist() == pytest.approx([5.0, 4.0, 2.0, 3.0, 0.5, 1.0], abs=1e-5)


def test_a_hook_that_fires_after_the_work_records_it_outside_the_steps(tmp_path, fake_time):
    """``outside_since_last``: a validation that ended 2 s after step 0 and a checkpoint 1 s after it become phases
    outside the steps, and step 1 starts after them; a name that is no column name is refused, once."""
    prof = StepProfiler(tmp_path / "run", trace=False)
    with prof.step():
        fake_time.advance(1.0)
    fake_time.advance(2.0)
    prof.outside_since_last("validation")
    fake_time.advance(1.0)
    prof.outside_since_last("checkpoint")
    with pytest.warns(ProfilerWarning, match="'save model' is not timed"):
        with prof.phase("save model"):
            fake_time.advance(5.0)  # not timed: lands in the next step's window
    with prof.step():
        fake_time.advance(1.0)
    prof.close()
    events = (tmp_path / "run" / "events-rank0.jsonl").read_text().splitlines()
    assert json.loads(events[0]) == {"format": "trainperf-events", "version": 1, "rank": 0}
    assert [json.loads(line) for line in events[1:]] == [
        {"phase": "validation", "start_s": 1.0, "seconds": 2.0}, {"phase": "checkpoint", "start_s": 3.0, "seconds": 1.0}]
    assert load_steps(tmp_path / "run")[["start_s", "step_s"]].values.tolist() == [[0.0, 1.0], [4.0, 6.0]]


def test_the_warm_up_rule_is_written_for_the_reader(tmp_path):
    """``warmup="fixed"`` keeps the configured count (the reader's rule is in the manifest); any other rule than
    mser or fixed is refused at once, before anything is written."""
    StepProfiler(tmp_path / "fixed", warmup_steps=3, warmup="fixed", trace=False).close()
    manifest = json.loads((tmp_path / "fixed" / "manifest.json").read_text())
    assert (manifest["warmup_steps"], manifest["warmup_rule"]) == (3, "fixed")
    with pytest.raises(ValueError, match="warmup='median'"):
        StepProfiler(tmp_path / "bad", warmup="median")
    assert not (tmp_path / "bad").exists()


class WindowOfTwo:
    """A communication sampler whose only window is steps 0 and 1, in which the collectives took 30 ms,
    10 ms of it exposed: 15 ms of communication a step, 5 ms exposed."""

    def __init__(self, *args: object) -> None:
        self.active = False
        self.estimate: tuple[float, float] | None = None

    def describe(self) -> str:
        return "one window of 2 steps"

    def due(self, index: int) -> bool:
        return index == 0

    def start(self, index: int) -> bool:
        self.active = True
        return True

    def last_of_window(self, index: int) -> bool:
        return index == 1

    def stop(self) -> tuple[float, float]:
        self.active, self.estimate = False, (0.015, 0.005)
        return self.estimate

    def cancel(self) -> None:
        self.active = False


def test_a_step_shorter_than_the_windows_estimate_carries_none(tmp_path, fake_time, monkeypatch):
    """Steps of 10, 20, 12 and 20 ms: the window's 15 ms a step is longer than steps 0 (in the window) and
    2 (after it), which get no comm_s and no comm_exposed_s (a step cannot communicate for longer than it
    lasts); the others get 15 and 5 ms. The manifest's words on the sampling say so."""
    monkeypatch.setattr(step_profiler, "CollectiveSampler", WindowOfTwo)
    with StepProfiler(tmp_path / "run", warmup_steps=0, trace=False, comm_sampling=True) as prof:
        for milliseconds in (10, 20, 12, 20):
            with prof.step(tokens=10, samples=1):
                fake_time.advance(milliseconds / 1000)
    steps = load_steps(tmp_path / "run")
    nan = float("nan")
    assert steps["step_s"].tolist() == pytest.approx([0.010, 0.020, 0.012, 0.020])
    assert steps["comm_s"].tolist() == pytest.approx([nan, 0.015, nan, 0.015], nan_ok=True)
    assert steps["comm_exposed_s"].tolist() == pytest.approx([nan, 0.005, nan, 0.005], nan_ok=True)
    words = collectives.CollectiveSampler(torch, False, 0, 100, 2).describe()
    assert words.endswith("each step carries the latest window's mean, none where that is longer than the step")
