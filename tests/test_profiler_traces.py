"""The profiler in traces people already read, and communication measured
from torch.profiler windows: ``trainperf/<phase>`` ranges in a user's own
torch.profiler trace, the Chrome trace export that Perfetto opens, and the
arithmetic that turns collective records into ``comm_s`` and
``comm_exposed_s``."""

from __future__ import annotations

import json
import numbers
import time
from types import SimpleNamespace

import pytest
import torch

from trainperf import DataError, StepProfiler, export_chrome_trace, load_steps
from trainperf.profiler import ProfilerWarning, collectives


def profiled_steps(run_dir, steps=2, **options):
    """A tiny model trained for ``steps`` steps under the profiler."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(steps)]
    with StepProfiler(run_dir, warmup_steps=0, **options) as prof:
        for x, y in prof.batches(data):
            with prof.step(samples=len(x)):
                with prof.phase("forward"):
                    out = model(x)
                with prof.phase("loss"):
                    loss = torch.nn.functional.mse_loss(out, y)
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()


def test_phases_are_ranges_in_a_users_torch_profiler_trace(tmp_path):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as user_profile:
        profiled_steps(tmp_path / "run")
    ranges = {}
    for event in user_profile.events():
        ranges.setdefault(event.name, []).append(event)
    for name in ("step", "forward", "loss", "backward", "optimizer"):
        assert len(ranges.get(f"trainperf/{name}", [])) == 2, name
    assert len(ranges["trainperf/data"]) == 3  # two batches, then the wait that finds the loader empty
    # the kernels of a phase lie inside its range
    (forward,) = [e for e in ranges["trainperf/forward"][:1]]
    linears = [e for e in ranges["aten::linear"] if e.time_range.start >= forward.time_range.start]
    assert linears and linears[0].time_range.end <= forward.time_range.end
    step = ranges["trainperf/step"][0]
    assert step.time_range.start <= forward.time_range.start and forward.time_range.end <= step.time_range.end
    # the exported trace is the user's own: it holds the ranges too
    user_profile.export_chrome_trace(str(tmp_path / "user.json"))
    names = {e.get("name") for e in json.loads((tmp_path / "user.json").read_text())["traceEvents"]}
    assert {"trainperf/step", "trainperf/backward"} <= names


def test_chrome_trace_export_follows_the_trace_event_format(tmp_path):
    """What Perfetto's JSON importer and chrome://tracing read (Trace Event
    Format, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU,
    and https://perfetto.dev/docs/getting-started/other-formats): an object
    with ``traceEvents``; complete events ``ph: "X"`` with ``name``, numeric
    ``ts`` and ``dur`` in microseconds, integer ``pid`` and ``tid``; metadata
    events ``ph: "M"`` naming processes and threads; ``displayTimeUnit`` ms or ns."""
    profiled_steps(tmp_path / "run", steps=3)
    trace = json.loads(export_chrome_trace(tmp_path / "run").read_text())
    assert trace["displayTimeUnit"] in ("ms", "ns")
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    metadata = [e for e in events if e["ph"] == "M"]
    assert len(complete) + len(metadata) == len(events)
    for event in complete:
        assert isinstance(event["name"], str) and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["ts"], numbers.Real) and isinstance(event["dur"], numbers.Real)
        assert event["ts"] >= 0 and event["dur"] >= 0
    named_threads = {e["tid"] for e in metadata if e["name"] == "thread_name"}
    assert {e["tid"] for e in complete} <= named_threads
    assert any(e["name"] == "process_name" for e in metadata)
    assert sum(e["cat"] == "step" for e in complete) == 3


def test_window_communication_by_hand():
    """Host records (µs) of a window on the training thread 1, gloo on
    threads 2 and 3: all-gathers 0 -> 40 and 30 -> 60 (union 60 µs), a
    reduce 100 -> 130; the training thread computes 10 -> 20 and 50 -> 110.
    Exposed: 0 -> 10, 20 -> 50 and 110 -> 130 = 60 µs. A record of another
    thread (a data loader's aten op) is not compute of the training thread;
    a record after the sampled steps is clipped away."""
    records = [
        ("gloo:all_gather", False, 2, 0.0, 40.0),
        ("gloo:all_gather", False, 3, 30.0, 60.0),
        ("gloo:all_reduce", False, 2, 100.0, 130.0),
        ("aten::mm", False, 1, 10.0, 20.0),
        ("aten::add", False, 1, 50.0, 110.0),
        ("aten::mul", False, 1, 52.0, 54.0),  # nested in the add: counted once
        ("aten::copy_", False, 4, 0.0, 130.0),  # another thread
        ("FSDP::all_gather", False, 1, 0.0, 130.0),  # a range, not compute
        ("gloo:all_reduce", False, 2, 200.0, 300.0),  # after the steps
    ]
    comm, exposed = collectives.window_seconds(records, span=(0.0, 150.0), thread=1)
    assert comm == pytest.approx((60 + 30) * 1e-6)
    assert exposed == pytest.approx((10 + 30 + 20) * 1e-6)


def test_fsdp_on_cpu_waits_for_every_collective_by_hand():
    """The shape of FSDP's records on CPU with gloo (``benchmarks/fsdp_cpu_overlap.py``):
    the training thread 1 issues each collective (``c10d::`` op, a few
    ``aten::`` ops before it) and waits inside FSDP's range while gloo's
    worker threads 2 and 3 run it, with ``aten::`` copies of their own;
    the training thread computes again only after it. An all-gather 3 -> 90
    µs and a reduce-scatter (an all-reduce in gloo) 160 -> 200 µs: 127 µs of
    communication, all exposed, although ranges and other threads' ops span
    them."""
    records = [
        ("FSDP::all_gather (0)", False, 1, 0.0, 95.0),
        ("aten::empty", False, 1, 0.5, 1.0),
        ("c10d::_allgather_base_", False, 1, 1.0, 5.0),
        ("aten::detach", False, 1, 2.0, 2.5),
        ("gloo:all_gather", False, 2, 3.0, 90.0),
        ("aten::copy_", False, 2, 80.0, 90.0),  # gloo's worker: part of the collective
        ("aten::split_with_sizes_copy", False, 1, 91.0, 95.0),
        ("autograd::engine::evaluate_function: AddmmBackward0", False, 1, 96.0, 210.0),
        ("aten::mm", False, 1, 100.0, 150.0),
        ("FSDP::post_backward_reduce (0)", False, 1, 152.0, 205.0),
        ("aten::div_", False, 1, 153.0, 156.0),
        ("c10d::_reduce_scatter_base_", False, 1, 156.0, 160.0),
        ("gloo:all_reduce", False, 3, 160.0, 200.0),
        ("aten::add_", False, 3, 190.0, 199.0),
    ]
    comm, exposed = collectives.window_seconds(records, span=(0.0, 210.0), thread=1)
    assert comm == pytest.approx(127e-6)
    assert exposed == pytest.approx(127e-6)


def test_window_communication_on_the_device_by_hand():
    """Device records: NCCL kernels 0 -> 50 and 80 -> 100 µs; compute kernels
    20 -> 90. Host records are ignored once the device has collectives."""
    records = [
        ("ncclDevKernel_AllGather_RING_LL", True, 7, 0.0, 50.0),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", True, 8, 80.0, 100.0),
        ("ampere_sgemm_128x64_tn", True, 7, 20.0, 90.0),
        ("aten::mm", False, 1, 0.0, 1000.0),
    ]
    comm, exposed = collectives.window_seconds(records, span=None, thread=1)
    assert comm == pytest.approx(70e-6)
    assert exposed == pytest.approx((20 + 10) * 1e-6)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_torch(clocks: tuple[FakeClock, ...], read_s: float, events: tuple = ()) -> SimpleNamespace:
    """Just what CollectiveSampler uses of torch: a profile with ``events``
    as its Kineto records, whose stop takes ``read_s`` seconds on ``clocks``."""

    class Profile:
        def __init__(self, activities):
            self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: list(events)))

        def start(self):
            pass

        def stop(self):
            for clock in clocks:
                clock.now += read_s

    return SimpleNamespace(autograd=SimpleNamespace(profiler=SimpleNamespace(_is_profiler_enabled=False)),
                           profiler=SimpleNamespace(profile=Profile,
                                                    ProfilerActivity=SimpleNamespace(CPU="cpu", CUDA="cuda")),
                           cuda=SimpleNamespace(synchronize=lambda: None))


class KinetoEvent:
    """A record of Kineto's raw results, with the methods torch's
    ``_KinetoEvent`` has (times in µs here)."""

    def __init__(self, name: str, activity: str, thread: int, start_us: float, end_us: float) -> None:
        self._name, self._activity, self._thread = name, activity, thread
        self._start, self._end = start_us, end_us

    def name(self):
        return self._name

    def activity_type(self):
        return self._activity

    def device_type(self):
        on_host = self._activity in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
        return torch.autograd.DeviceType.CPU if on_host else torch.autograd.DeviceType.CUDA

    def is_user_annotation(self):
        return self._activity.endswith("user_annotation")

    def start_thread_id(self):
        return self._thread

    def start_ns(self):
        return int(self._start * 1000)

    def duration_ns(self):
        return int((self._end - self._start) * 1000)


GPU_WINDOW = (
    KinetoEvent("trainperf/step", "user_annotation", 1, 0, 300),
    KinetoEvent("aten::mm", "cpu_op", 1, 0, 300),
    KinetoEvent("nccl:_all_gather_base", "user_annotation", 1, 5, 8),  # ProcessGroupNCCL's host range
    KinetoEvent("cudaLaunchKernel", "cuda_runtime", 1, 6, 7),
    # the device: a range drawn there and a synchronization wait are not work
    KinetoEvent("trainperf/step", "gpu_user_annotation", 0, 0, 300),
    KinetoEvent("Stream Wait Event", "cuda_sync", 0, 0, 100),
    # kernel names as torch.profiler prints them (NCCL >= 2.19, and older NCCL in
    # https://github.com/pytorch/pytorch/issues/102434); a kernel's name may not be its collective
    # (https://github.com/NVIDIA/nccl/issues/739): any NCCL kernel is communication
    KinetoEvent("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", 0, 10, 110),
    KinetoEvent("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "kernel", 0, 60, 90),
    KinetoEvent("Memcpy DtoD (Device -> Device)", "gpu_memcpy", 0, 100, 105),
    KinetoEvent("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*...", "kernel", 0, 200, 260),
)
"""A sampled GPU step (µs): NCCL kernels 10 -> 110 and 200 -> 260 (160 µs);
a GEMM 60 -> 90 and a copy 100 -> 105 hide 35 µs of the first: 125 µs
exposed."""


def test_gpu_window_from_kineto_records_by_hand(monkeypatch):
    """The NCCL path, without a GPU: Kineto's device records as torch gives
    them, read by the sampler. Only kernels and memory operations are work
    on the device; the host's records do not count once the device has
    collectives."""
    sampler = collectives.CollectiveSampler(fake_torch((), 0.0, GPU_WINDOW), cuda=True, warmup_steps=0)
    assert sampler.start(0)
    comm, exposed = sampler.stop()
    assert comm == pytest.approx(160e-6) and exposed == pytest.approx(125e-6)


def test_a_gpu_window_without_device_records_is_an_error_not_zero(monkeypatch):
    """No CUPTI, no device records: the window cannot tell the communication
    (the profiler then warns and stops sampling), rather than report none."""
    host_only = tuple(e for e in GPU_WINDOW if str(e.device_type()).endswith("CPU"))
    sampler = collectives.CollectiveSampler(fake_torch((), 0.0, host_only), cuda=True, warmup_steps=0)
    assert sampler.start(0)
    with pytest.raises(RuntimeError, match="no work on the GPU"):
        sampler.stop()


def window_starts(monkeypatch, warmup_steps: int, read_s: float, steps: int = 100,
                  cpu_step_s: float = 1.0) -> list[int]:
    """Drive a sampler (windows of 2 steps, every 10 or more) over steps of
    1 s of wall time and ``cpu_step_s`` of the training thread's CPU time
    (less than 1 s where other processes share the core); reading a window
    takes ``read_s`` of both. Return the steps that started a window."""
    wall, cpu = FakeClock(), FakeClock()
    monkeypatch.setattr(collectives, "perf_counter", wall)
    monkeypatch.setattr(collectives, "thread_time", cpu)
    sampler = collectives.CollectiveSampler(fake_torch((wall, cpu), read_s), cuda=False, warmup_steps=warmup_steps,
                                            every=10, steps=2)
    starts = []
    for index in range(steps):
        if not sampler.active and sampler.due(index):
            assert sampler.start(index)
            starts.append(index)
        wall.now += 1.0
        cpu.now += cpu_step_s
        if sampler.last_of_window(index):
            sampler.stop()
    return starts


def test_sampling_schedule(monkeypatch):
    # a window that costs nothing: every 10 steps from the first measured step
    assert window_starts(monkeypatch, warmup_steps=2, read_s=0.0) == [2, 12, 22, 32, 42, 52, 62, 72, 82, 92]
    # a warm-up longer than a window ends with the first window (step 0 is never sampled)
    assert window_starts(monkeypatch, warmup_steps=5, read_s=0.0)[:2] == [3, 13]
    # a window costing 0.203 s more than two 1 s steps waits until that is at most 0.25 % of the time
    # since it ended: 0.203 / 0.0025 = 81.2 s, so 82 steps after its last step (window 2-3: next at
    # 4 + 82 = 86; window 86-87: next at 88 + 82 = 170)
    assert window_starts(monkeypatch, warmup_steps=2, read_s=0.203, steps=200) == [2, 86, 170]
    # on a shared core the training thread gets 0.25 s of CPU per 1 s step: the same window is
    # 0.25 % of the CPU time only 0.203 / 0.0025 / 0.25 = 324.8 steps later (next at 4 + 325 = 329)
    assert window_starts(monkeypatch, warmup_steps=2, read_s=0.203, steps=400, cpu_step_s=0.25) == [2, 329]
    with pytest.raises(ValueError, match="1 <= steps <= every"):
        collectives.CollectiveSampler(torch, cuda=False, warmup_steps=0, every=2, steps=3)


def test_a_users_own_torch_profiler_is_left_alone(tmp_path):
    sampler = collectives.CollectiveSampler(torch, cuda=False, warmup_steps=0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert sampler.start(0) is False and not sampler.active


def test_any_collective_is_sampled_on_request(tmp_path):
    """``comm_sampling=True`` without FSDP: a one-process gloo group whose
    all-reduces the job issues itself. A window of 2 steps from step 0 (no
    warm-up), the next 4 steps later at the earliest: every step carries an
    estimate, and the steps of a window are written once it ended. Each step
    also does 5 ms of other work, as a training step does: a step of nothing
    but one small all-reduce (about 20 µs) could be shorter than the window's
    mean on a busy machine, and an estimate cannot be true of such a step."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        tensor = torch.ones(1 << 16)
        with StepProfiler(tmp_path / "run", warmup_steps=0, comm_sampling=True, comm_sample_every=4,
                          comm_sample_steps=2) as prof:
            for _ in range(6):
                with prof.step():
                    with prof.phase("forward"):
                        dist.all_reduce(tensor)
                        time.sleep(0.005)
    finally:
        dist.destroy_process_group()
    steps = load_steps(tmp_path / "run")
    assert (steps["comm_s"] > 0).all()
    # steps 0-1 are the first window; 2-3 carry its estimate (no window may start before step 4)
    assert steps["comm_s"].iloc[:4].nunique() == 1
    assert (steps["comm_s"] <= steps["step_s"]).all() and (steps["comm_exposed_s"] <= steps["comm_s"]).all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["comm_measurement"].startswith("torch.profiler windows of 2 step(s) every 4 steps")


def test_a_failing_window_stops_the_sampling_not_the_profiler(tmp_path, monkeypatch):
    def broken(self):
        raise RuntimeError("no records")

    monkeypatch.setattr(collectives.CollectiveSampler, "stop", broken)
    with pytest.warns(ProfilerWarning, match="communication is not sampled: RuntimeError: no records"):
        with StepProfiler(tmp_path / "run", warmup_steps=0, comm_sampling=True, comm_sample_every=2,
                          comm_sample_steps=1) as prof:
            for _ in range(4):
                with prof.step(samples=1):
                    with prof.phase("forward"):
                        torch.ones(4).sum()
    steps = load_steps(tmp_path / "run")
    assert len(steps) == 4 and steps["comm_s"].isna().all() and (steps["forward_s"] > 0).all()


def test_a_torch_profiler_trace_merges_onto_the_runs_clock(tmp_path):
    """A Kineto trace written by torch.profiler in this test, merged by its
    ``baseTimeNanoseconds``: each ``trainperf/forward`` range it recorded
    (the same phase, seen by torch) lies where trainperf's own forward phase
    lies on the run's clock, to within 1 ms on both ends (the phase sleeps
    20 ms, so a misplaced clock cannot pass), the ``aten::linear`` ops sit
    inside it, and the torch processes sort below rank 0's tracks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as user_profile:
        with StepProfiler(tmp_path / "run", warmup_steps=0) as prof:
            for x in prof.batches([torch.randn(4, 8) for _ in range(3)]):
                with prof.step(samples=len(x)):
                    with prof.phase("forward"):
                        model(x).sum().backward()
                        time.sleep(0.02)
    user_profile.export_chrome_trace(str(tmp_path / "kineto.json"))
    merged = json.loads(export_chrome_trace(tmp_path / "run", tmp_path / "out",
                                            torch_traces=[tmp_path / "kineto.json"]).read_text())
    events = merged["traceEvents"]
    ours = sorted((e for e in events if e["pid"] == 0 and e["name"] == "forward"), key=lambda e: e["ts"])
    theirs = sorted((e for e in events if e.get("name") == "trainperf/forward"), key=lambda e: e["ts"])
    assert len(ours) == len(theirs) == 3
    for mine, torchs in zip(ours, theirs):
        assert torchs["pid"] != 0 and mine["dur"] >= 20e3  # µs
        assert abs(mine["ts"] - torchs["ts"]) < 1e3
        assert abs((mine["ts"] + mine["dur"]) - (torchs["ts"] + torchs["dur"])) < 1e3
    linears = [e for e in events if e.get("name") == "aten::linear"]
    assert len(linears) == 3
    for op, mine in zip(sorted(linears, key=lambda e: e["ts"]), ours):
        assert mine["ts"] - 1e3 <= op["ts"] and op["ts"] + op["dur"] <= mine["ts"] + mine["dur"] + 1e3
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert sort[0] < min(index for pid, index in sort.items() if pid != 0)


def test_a_torch_trace_without_a_base_time_is_refused_by_name(tmp_path):
    profiled_steps(tmp_path / "run")
    (tmp_path / "old.json").write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(DataError, match=r"old\.json.*baseTimeNanoseconds"):
        export_chrome_trace(tmp_path / "run", torch_traces=[tmp_path / "old.json"])
