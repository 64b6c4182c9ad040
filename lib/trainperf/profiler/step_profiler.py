"""``StepProfiler``: turns a user's own training loop into a trainperf run folder.

::

    prof = StepProfiler("data/runs/my-run", config={"model": "gpt-small", "precision": "bf16"})
    model = prof.watch(ddp_model)                  # times gradient all-reduces (DDP)
    for batch in prof.batches(loader):             # times the wait for each batch (data)
        with prof.step(tokens=n_tokens, samples=n_samples) as step:
            with prof.phase("h2d"): ...
            with prof.phase("forward"): ...
            with prof.phase("loss"): ...
            with prof.phase("backward"): ...
            with prof.phase("optimizer"): ...
            step.loss = loss                       # a tensor is read later, without a sync
    prof.close()

With gradient accumulation, one ``step`` is one optimizer step and each
micro-batch calls ``step.micro_step(tokens=..., samples=...)``; its phases add
up within the step. Tokens and samples are counted once: those given to
``step()`` are the whole step's, and micro-steps add theirs only where
``step()`` was given none.

What the job does between steps is timed as a phase outside any step, under
any name (``with prof.phase("checkpoint"): ...``, ``prof.phase("validation")``):
it is written to ``events-rank{R}.jsonl`` and the next step's window starts
when it ends, so that a step's time stays its own. Outside a step only the
next step's input (``data``, ``h2d``) counts in that step. ``close()`` records
the wall clock since the profiler started, the denominator of the run's
goodput (``trainperf.goodput``).

The profiler never breaks the job it measures: any failure of its own (a full
disk, an unwritable folder, an unexpected error) produces one
:class:`ProfilerWarning`, profiling stops, and every call becomes a no-op
while training goes on. Exceptions raised by the user's code inside a
``step`` or ``phase`` pass through untouched; a step that runs out of memory
is recorded as such first (:func:`out_of_memory`).
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from time import perf_counter
from typing import Any

from trainperf.profiler import environment, folder
from trainperf.profiler.collectives import DEFAULT_EVERY, DEFAULT_STEPS, CollectiveSampler
from trainperf.profiler.clocks import Clock, CudaClock, HostClock
from trainperf.profiler.comm import DdpCommTimer, parallel_module, strategy_of, watch_ddp
from trainperf.profiler.cpu_peak import cpu_peak
from trainperf.profiler.energy import energy_meter
from trainperf.profiler.exit_flush import ExitFlush
from trainperf.profiler.flop_count import StepFlopCounter, needs_counting, parameter_counts
from trainperf.profiler.folder import RunFolderInUse
from trainperf.profiler.memory import GIB, CudaMemory, HostPeak, host_memory_reader
from trainperf.profiler.record import CARRIED, DATA, PHASE_INDEX, StepRecord, number, resolve
from trainperf.profiler.trace import trace_line
from trainperf.runfolder import eventfile, rankfile
from trainperf.runfolder.linefile import LineFile
from trainperf.runfolder.manifest import MANIFEST_FILE, TRACE_FILE, write_json
from trainperf.schema import PHASES
from trainperf.steady_state import RULES

WRITE_EVERY_STEPS = 100
"""Steps kept in memory at most before they are written (one write per file)."""
WRITE_EVERY_S = 1.0
"""Seconds after which the steps kept in memory are written, checked when a step ends."""
MAX_PENDING_STEPS = 256
"""On GPU, steps wait for their CUDA events; past this many the device is
synchronized once and they are all written, which bounds memory if the host
runs far ahead of the device."""


class ProfilerWarning(UserWarning):
    """The profiler stopped profiling (training goes on), or ignored a call."""


DEFAULT_WARMUP_STEPS = 2
"""Steps flagged as warm-up where the user states none (MSER then finds the rest from the step times)."""


class StepProfiler:
    """Time the steps of a training loop on this rank and write them to
    ``run_dir`` (``manifest.json`` from rank 0, ``steps-rank{R}.jsonl`` and,
    with ``trace=True``, ``trace-rank{R}.jsonl`` from every rank).

    ``config``: canonical runs-table columns the profiler cannot know (model,
    precision, n_params, seq_len, ...). ``warmup_steps``: the first steps are
    recorded but flagged, and left out of summaries. A warm-up you state is a
    decision, kept exactly (``warmup="fixed"``, the default when
    ``warmup_steps`` is given); without one the first
    :data:`DEFAULT_WARMUP_STEPS` are the least warm-up and the reader finds
    where the steady state starts from the step times (``warmup="mser"``,
    ``trainperf.steady_state``). ``device``: the CUDA
    device to time on (default: the current one when CUDA is available, else
    the CPU). Create the profiler on every rank after the process group is
    initialized: it gathers every rank's host once (a collective).

    ``run_dir`` must not hold another run: a folder with another run's files
    raises :class:`RunFolderInUse` on every rank, before anything is written;
    ``overwrite=True`` removes that run's files first. On CPU, the machine's
    matmul peak (``peak_tflops_per_gpu``, for MFU) is measured once per
    machine and recorded in the manifest unless ``config`` gives one.

    ``count_flops``: count the FLOPs of the first step with PyTorch's FLOP
    counter and record ``flops_per_sample`` (``flop_count.py``): MFU for a
    model no FLOPs formula describes (a CNN, a diffusion model). None (the
    default): ``watch(model)`` decides, counting unless ``config`` names a
    FLOPs convention or the model is a decoder-only transformer, and records
    ``flops_convention = counted`` when it counts. ``watch``
    records the model's parameter count unless ``config`` gives ``n_params``.

    ``comm_sampling``: measure communication with sampled ``torch.profiler``
    windows (``collectives.py``) of ``comm_sample_steps`` steps every
    ``comm_sample_every`` steps: None (default) under FSDP, True always (any
    collective: tensor parallelism, your own), False never.

    While a ``torch.profiler`` records, every step and phase is also a
    ``record_function`` range (``trainperf/step``, ``trainperf/forward``, ...),
    so its trace shows them beside the kernels.

    Every step records its memory (``memory.py``) and, where the hardware has
    a counter this process can read, its energy (``energy.py``), both read on
    the host without a synchronisation. On GPU the allocator's peak is the
    peak so far, and ``torch.cuda.max_memory_allocated`` keeps answering the
    user; ``reset_peak_memory=True`` records each step's own peak instead, by
    resetting the allocator's peaks after each step (the user's
    ``max_memory_allocated`` then only covers the current step).

    Completed steps are kept in memory and written in batches, one write
    per file: when ``write_every_steps`` steps are waiting, or when a step
    ends ``write_every_s`` seconds or more after the last write; and by
    ``close()``, at interpreter exit and on SIGTERM or SIGINT
    (``exit_flush.py``). A process killed without warning (SIGKILL, a
    crash) loses at most the steps of the batch not yet written: fewer than
    ``write_every_steps`` steps, all of them ended less than
    ``write_every_s`` seconds after the previous write.
    """

    def __init__(self, run_dir: str | Path, config: dict[str, Any] | None = None, *,
                 warmup_steps: int | None = None, warmup: str | None = None, trace: bool = True,
                 device: Any = None,
                 overwrite: bool = False,
                 comm_sampling: bool | None = None, comm_sample_every: int = DEFAULT_EVERY,
                 comm_sample_steps: int = DEFAULT_STEPS, count_flops: bool | None = None,
                 reset_peak_memory: bool = False, write_every_steps: int = WRITE_EVERY_STEPS,
                 write_every_s: float = WRITE_EVERY_S) -> None:
        self.run_dir = Path(run_dir)
        if write_every_steps < 1 or not write_every_s > 0:
            raise ValueError(f"write_every_steps={write_every_steps!r}, write_every_s={write_every_s!r}: "
                             "at least one step and more than 0 seconds")
        self._write_every = (write_every_steps, write_every_s)
        self._written_at = perf_counter()
        self._writing = False
        self._exit_flush: ExitFlush | None = None
        self.warmup_steps = DEFAULT_WARMUP_STEPS if warmup_steps is None else warmup_steps
        self.warmup = warmup or ("mser" if warmup_steps is None else "fixed")
        self._count_flops = count_flops
        self._off = True
        self._warned: set[str] = set()
        self._steps_file: LineFile | None = None
        self._trace_file: LineFile | None = None
        self._comm: DdpCommTimer | None = None
        self._sampler: CollectiveSampler | None = None
        self._sampling = (comm_sample_every, comm_sample_steps)
        self._sample_comm = comm_sampling
        self._open: StepRecord | None = None
        self._carry_phases: list[tuple[int, Any, Any]] = []
        self._carry_data: list[tuple[float, float]] = []
        self._outside: deque[tuple[str, Any, Any]] = deque()
        self._events_file: LineFile | None = None
        self._pending: deque[StepRecord] = deque()
        self._window_start: Any = None
        self._step_ranges = False
        self._index = 0
        self.rank = 0
        if self.warmup not in RULES:
            raise ValueError(f"warmup={warmup!r}: the warm-up rule is one of {', '.join(map(repr, RULES))}")
        try:
            self._start(dict(config or {}), trace, device, overwrite, reset_peak_memory)
            self._off = False
        except RunFolderInUse:
            raise
        except Exception as exc:
            self._fail("cannot start", exc)

    # -- setup -------------------------------------------------------------

    def _start(self, config: dict[str, Any], trace: bool, device: Any, overwrite: bool, reset_peak: bool) -> None:
        import torch
        import torch.distributed as dist

        self._torch_version = torch.__version__
        self._torch = torch
        self._record_function = torch.profiler.record_function
        # a range costs tens of µs even with no profiler recording: open ranges only while one records
        self._recording = getattr(torch._C._autograd, "_profiler_enabled", lambda: True)
        if device is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        device = torch.device(device) if device is not None else torch.device("cpu")
        self._cuda = device.type == "cuda"
        self._clock: Clock = CudaClock(torch.cuda, device) if self._cuda else HostClock()
        self._memory = CudaMemory(torch.cuda, device, reset_peak) if self._cuda else HostPeak()
        self._host_memory = host_memory_reader()
        self._device_name = torch.cuda.get_device_name(device) if self._cuda else "cpu"
        self._device_memory_gb = device_memory_gb(torch, device)
        self._backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        place = environment.this_place(dist)
        self._places = environment.gather_places(dist, place)
        self.rank = place.rank
        nodes = environment.node_names(self._places)
        first_on_host = (min(r for r, n in nodes.items() if n == nodes.get(place.rank)) == place.rank
                         if len(self._places) == place.world_size else place.local_rank in (None, 0))
        self._energy, self._energy_source = energy_meter(torch, device, first_on_host)
        folder.claim(self.run_dir, overwrite, dist, place.rank, place.world_size)
        self._config = config
        self._strategy: str | None = None if place.world_size > 1 else "single"
        self._cpu_peak = self._measure_cpu_peak() if not self._cuda and self.rank == 0 else None
        self._host = environment.host_load(torch.get_num_threads())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_manifest()
        node = nodes.get(place.rank, place.host)
        self._steps_file = LineFile(self.run_dir / rankfile.STEPS_FILE.format(rank=place.rank))
        if trace:
            self._trace_file = LineFile(self.run_dir / TRACE_FILE.format(rank=place.rank))
        if self._sample_comm:
            self._start_sampling()
        self._origin = self._clock.mark()
        self._host_origin = perf_counter() if self._cuda else self._origin
        self._steps_file.write(rankfile.header_line(place.rank, place.host, place.node_rank, node,
                                                    unix_ns_at(self._host_origin)))
        self._exit_flush = ExitFlush(self._write_at_exit)

    def _write_manifest(self) -> None:
        if self.rank == 0:
            write_json(self.run_dir / MANIFEST_FILE, environment.manifest(
                self._config, self._places, self._device_name, self._backend, self._strategy,
                self.warmup_steps, self.warmup, self._torch_version, cpu_peak=self._cpu_peak, host=self._host,
                energy=self._energy_source, device_memory_gb=self._device_memory_gb))

    def _measure_cpu_peak(self) -> dict[str, Any] | None:
        """This machine's CPU peak (cached per machine), unless the config gives one."""
        if "peak_tflops_per_gpu" in self._config:
            return None
        try:
            return cpu_peak(self._config.get("precision"))
        except Exception as exc:
            self._warn_once("peak", f"CPU peak not measured, MFU stays empty: {type(exc).__name__}: {exc}")
            return None

    def watch(self, model: Any, comm_hook: Any = None, comm_state: Any = None) -> Any:
        """Return ``model`` unchanged, after arranging to time its gradient
        communication: for ``DistributedDataParallel``, a communication hook
        wrapping ``comm_hook(comm_state, bucket)`` (default: DDP's averaging
        all-reduce; pass your own hook here rather than registering it
        yourself, DDP takes only one); a framework's wrapper of it (Lightning
        Fabric's ``fabric.setup``) is looked through. Call before the first backward. For
        FSDP, communication is sampled with torch.profiler
        (``collectives.py``); it also stays inside the forward and backward
        phases."""
        if self._off:
            return model
        try:
            counts = parameter_counts(model)
            if counts is not None:
                self.update_config(counts)  # the configuration's own n_params wins
            if self._count_flops is None and needs_counting(model, self._config):
                self._count_flops = True
                self.update_config({"flops_convention": "counted"})
            strategy = strategy_of(parallel_module(model))
            if strategy == "ddp":
                self._comm = watch_ddp(parallel_module(model), self._clock, comm_hook, comm_state)
            elif strategy == "fsdp" and self._sample_comm is None:
                self._start_sampling()
            if strategy is not None and strategy != self._strategy:
                self._strategy = strategy
                self._write_manifest()
        except Exception as exc:
            self._warn_once("watch", f"communication is not timed: {type(exc).__name__}: {exc}")
        return model

    def _start_sampling(self) -> None:
        """Sample communication from now on, and say how in the manifest."""
        if self._sampler is None:
            self._sampler = CollectiveSampler(self._torch, self._cuda, self.warmup_steps, *self._sampling)
            self._config["comm_measurement"] = self._sampler.describe()
            self._write_manifest()

    def update_config(self, values: dict[str, Any]) -> None:
        """Add run columns to the manifest's ``config`` once they are known
        (e.g. the sequence length, from the first batch); the values given
        when the profiler was created win."""
        if self._off:
            return
        try:
            added = {k: v for k, v in values.items() if k not in self._config}
            if added:
                self._config.update(added)
                self._write_manifest()
        except Exception as exc:
            self._fail("cannot update the manifest", exc)

    # -- the loop ------------------------------------------------------------

    def batches(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield the items of ``iterable``, timing each wait for the next one
        as the ``data`` phase (of the open step, else of the next step)."""
        iterator = iter(iterable)
        while True:
            start = None if self._off else self._begin_host_interval()
            try:
                with self._range("data") if start is not None else _NO_STEP:
                    item = next(iterator)
            except StopIteration:
                return
            if start is not None and not self._off:
                self._add_data(start, perf_counter())
            yield item

    def step(self, tokens: Any = None, samples: Any = None, loss: Any = None) -> _Step | _NoStep:
        """Context manager around one optimizer step. ``tokens`` and
        ``samples``: processed by this rank in the whole step (numbers or
        tensors); or give each micro-batch's to ``micro_step`` instead (given
        to both, ``step()``'s count). The returned object takes ``.loss`` (a
        number, or a tensor read without a sync)."""
        if self._off:
            return _NO_STEP
        if self._open is not None:
            self._warn_once("nested", "step() called inside an open step: the inner one is not recorded")
            return _NO_STEP
        record = StepRecord(self._index, self._index < self.warmup_steps, self._window(), self._carry_phases,
                            self._carry_data, tokens, samples, loss)
        self._carry_phases, self._carry_data = [], []
        self._open = record
        if self._sampler is not None and not self._sampler.active and self._sampler.due(record.index):
            try:
                self._sampler.start(record.index)
            except Exception as exc:
                self._warn_once("sampling", f"communication is not sampled: {type(exc).__name__}: {exc}")
                self._sampler = None
        counter = StepFlopCounter() if self._count_flops else None
        self._step_ranges = self._recording()  # once a step: its phases are ranges when the step is one
        return _Step(self, record, self._range("step", self._step_ranges), counter)

    def phase(self, name: str) -> _Phase | _OutsidePhase | _NoStep:
        """Context manager timing one phase. In a step: ``data``, ``h2d``,
        ``forward``, ``loss``, ``backward``, ``optimizer``, ``comm`` or
        ``validation``; repeated phases add up. Outside any step, ``data``
        and ``h2d`` (the next step's input) count in the next step; any other
        name (a letter, then letters, digits or underscores: ``checkpoint``,
        ``validation``, ``logging``) is a phase outside the steps, written to
        the events file, and the next step's window starts when it ends."""
        if self._off:
            return _NO_STEP
        if self._open is None and name not in CARRIED:
            return _OutsidePhase(self, name) if self._outside_name_ok(name) else _NO_STEP
        index = PHASE_INDEX.get(name)
        if index is None:
            self._warn_once(f"phase {name}", f"unknown phase {name!r} in a step is not timed; phases of a step: "
                                             f"{', '.join(PHASE_INDEX)}")
            return _NO_STEP
        if self._open is None:
            self._window()
        return _Phase(self, index, self._range(name, self._step_ranges if self._open is not None else None))

    def outside_since_last(self, name: str) -> None:
        """Record the time since the last step (or phase outside a step)
        ended, up to now, as a phase ``name`` outside the steps: for hooks
        that fire only when something is done (a framework's ``on_evaluate``,
        ``on_save``). Waits for data timed in that span are part of it.
        Nothing happens while a step is open or before the first step."""
        if self._off or self._open is not None or self._window_start is None:
            return
        if not self._outside_name_ok(name):
            return
        try:
            self._carry_data = []
            self._end_outside(name, self._window_start, self._clock.mark())
        except Exception as exc:
            self._fail("cannot record a phase outside the steps", exc)

    def _outside_name_ok(self, name: object) -> bool:
        """Whether ``name`` can name a phase outside the steps (a letter, then
        letters, digits or underscores); a ProfilerWarning once where not."""
        if isinstance(name, str) and eventfile.NAME.fullmatch(name):
            return True
        self._warn_once(f"phase {name}", f"phase {name!r} is not timed: a name outside a step is a letter, "
                                         "then letters, digits or underscores")
        return False

    def close(self) -> None:
        """Write the steps still waiting for the device and the end line, and
        close the files. Call it on every rank when training ends."""
        if self._off:
            return
        try:
            self._end_window()
            self._flush(wait=True)
            unattributed: dict[str, float] = {}
            for index, start, end in self._carry_phases:
                name = f"{PHASES[index]}_s"
                unattributed[name] = unattributed.get(name, 0.0) + self._clock.seconds(start, end)
            if self._carry_data:
                unattributed["data_s"] = unattributed.get("data_s", 0.0) + sum(e - s for s, e in self._carry_data)
            assert self._steps_file is not None
            self._steps_file.write(rankfile.end_line(self._index, unattributed, perf_counter() - self._host_origin))
        except Exception as exc:
            self._fail("cannot close", exc)
        finally:
            self._stop()

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------

    def _window(self) -> Any:
        """The start mark of the next step's window: the end of the last step
        (or of a failed one, or of a phase outside the steps after it), or now
        when nothing has been timed yet."""
        if self._window_start is None:
            self._window_start = self._clock.mark()
        return self._window_start

    def _range(self, name: str, recording: bool | None = None) -> Any:
        """A ``trainperf/<name>`` record_function range while a torch
        profiler records (``recording``; None: asked now), else a context
        manager that does nothing."""
        if recording is None:
            recording = self._recording()
        return self._record_function(f"trainperf/{name}") if recording else _NO_STEP

    def _begin_host_interval(self) -> float:
        self._window()
        return perf_counter()

    def _add_data(self, start: float, end: float) -> None:
        target = self._open.data if self._open is not None else self._carry_data
        target.append((start, end))

    def _add_phase(self, index: int, start: Any, end: Any) -> None:
        target = self._open.phases if self._open is not None else self._carry_phases
        target.append((index, start, end))

    def _end_outside(self, name: str, start: Any, end: Any) -> None:
        """A phase outside the steps ended: it waits to be written, and the
        next step's window starts at its end (the next step gives that mark
        back to the clock; written first, the phase reads it before)."""
        self._outside.append((name, start, end))
        if self._open is None:
            self._window_start = end
        self._flush(wait=False)

    def _counted(self, counter: StepFlopCounter, record: StepRecord) -> None:
        """Record the FLOPs of the counted step per sample (``flops_per_sample``)
        and count no more."""
        self._count_flops = False
        samples = float(record.samples) if record.samples is not None else 0.0
        if samples > 0 and counter.total > 0:
            self.update_config({"flops_per_sample": counter.total / samples})
        else:
            self._warn_once("count_flops", "no MFU: " + (
                f"the FLOP counter failed: {counter.error}" if counter.error else
                "the FLOPs of a step are counted per sample, and the first step gave no samples= to step()"
                if samples <= 0 else "the first step ran no operation the FLOP counter counts (matmul, convolution)"))

    def _end_step(self, record: StepRecord, failed: bool, error: BaseException | None = None) -> None:
        if self._open is not record:
            return
        self._open = None
        try:
            if failed:  # the user's code raised (``error``): the step did not complete
                self._window_start = self._clock.mark()
                if self._comm is not None:
                    self._comm.drain()
                if error is not None and out_of_memory(error):
                    self._record_out_of_memory(record)
                return
            record.tokens, record.samples, record.loss = (
                _on_host(record.tokens), _on_host(record.samples), _on_host(record.loss))
            if self._sampler is not None:
                self._sample(record)
            record.end = self._clock.mark()
            if self._comm is not None:
                record.comm = self._comm.drain()
            self._read_counters(record)
            self._window_start = record.end
            self._index += 1
            self._pending.append(record)
            if len(self._pending) >= self._write_every[0] or perf_counter() - self._written_at >= self._write_every[1]:
                self._flush(wait=len(self._pending) > MAX_PENDING_STEPS)
        except Exception as exc:
            self._fail("cannot record a step", exc)

    def _read_counters(self, record: StepRecord) -> None:
        """The step's memory and energy, read on the host (no synchronisation)."""
        record.memory = self._memory.read()
        record.host_memory_gb = self._host_memory()
        if self._energy is not None:
            record.energy_j = self._energy.read()

    def _record_out_of_memory(self, record: StepRecord) -> None:
        """Write the line of a step that ran out of memory now, while the job
        still runs: its window up to the error, its memory and energy, no work
        (the step did not complete). The step's index is not used up: a step
        that the user's code retries has the same one."""
        record.end = self._window_start
        record.tokens = record.samples = record.loss = None
        record.comm = []
        record.out_of_memory = True
        self._read_counters(record)
        record.memory = record.memory._replace(ooms=max(1, record.memory.ooms or 0))
        self._end_window()
        record.waiting, record.estimate = False, None
        self._pending.append(record)
        self._flush(wait=True)

    def _sample(self, record: StepRecord) -> None:
        """Before the step's end mark: under a sampling window, hold the step
        until the window ends, or end the window with its last step (so that
        reading the window costs a sampled step, not the next one); otherwise
        give the step the latest window's communication estimate."""
        assert self._sampler is not None
        if self._sampler.active:
            if self._sampler.last_of_window(record.index):
                record.estimate = self._end_window()
            else:
                record.waiting = True
        else:
            record.estimate = self._sampler.estimate

    def _end_window(self) -> tuple[float, float] | None:
        """Close an open sampling window, give its estimate to the steps held
        for it, and return it."""
        if self._sampler is None or not self._sampler.active:
            return None
        try:
            estimate = self._sampler.stop()
        except Exception as exc:  # sampling stops; the profiler goes on
            self._warn_once("sampling", f"communication is not sampled: {type(exc).__name__}: {exc}")
            try:
                self._sampler.cancel()
            except Exception:
                pass
            self._sampler, estimate = None, None
        for held in self._pending:
            if held.waiting:
                held.waiting, held.estimate = False, estimate
        return estimate

    def _write_at_exit(self) -> None:
        """The process ends without ``close()`` (exit, SIGTERM, SIGINT): write
        the steps whose marks are ready, unless a write is under way (the
        signal interrupted it) or profiling stopped. Never raises."""
        if self._off or self._writing:
            return
        try:
            self._flush(wait=False)
        except Exception:
            pass

    def _flush(self, wait: bool) -> None:
        """Resolve and write the phases outside the steps and the pending
        steps whose marks are ready (all of them when ``wait``: one
        synchronize for the lot), one write per file. Phases first: a step
        may give back the mark a phase ends at."""
        self._writing = True
        try:
            self._write_ready(wait)
        finally:
            self._writing = False
            self._written_at = perf_counter()

    def _write_ready(self, wait: bool) -> None:
        if wait and (self._pending or self._outside):
            self._clock.synchronize()
        while self._outside and self._clock.ready(self._outside[0][2]):
            name, start, end = self._outside.popleft()
            if self._events_file is None:
                self._events_file = LineFile(self.run_dir / eventfile.EVENTS_FILE.format(rank=self.rank))
                self._events_file.write(eventfile.header_line(self.rank))
            self._events_file.write(eventfile.phase_line(name, self._clock.seconds(self._origin, start),
                                                         self._clock.seconds(start, end)))
        steps, traces = [], []
        data_clock = "host" if self._cuda else "step"
        while self._pending and self._pending[0].ready(self._clock):
            record = self._pending.popleft()
            values, trace = resolve(record, self._clock, self._origin, self._host_origin)
            steps.append(rankfile.step_line(values))
            if self._trace_file is not None:
                traces.append(trace_line(*trace, data_clock=data_clock))
            self._clock.release(record.marks())
        if steps:
            assert self._steps_file is not None
            self._steps_file.write(b"".join(steps))
        if traces:
            assert self._trace_file is not None
            self._trace_file.write(b"".join(traces))

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"trainperf profiler: {message}", ProfilerWarning, stacklevel=3)

    def _fail(self, what: str, exc: BaseException) -> None:
        where = f" ({self.run_dir})" if isinstance(exc, OSError) else ""
        self._warn_once("failed", f"{what}{where}: {type(exc).__name__}: {exc}; "
                                  "profiling stopped, training goes on")
        self._stop()

    def _stop(self) -> None:
        self._off = True
        self._open = None
        if self._exit_flush is not None:
            self._exit_flush.remove()
            self._exit_flush = None
        if self._comm is not None:
            self._comm.stop()
            self._comm = None  # the model keeps its hook; the profiler lets go of the process group it calls
        if self._sampler is not None:
            try:
                self._sampler.cancel()
            except Exception:
                pass
        self._pending.clear()
        self._outside.clear()
        for file in (self._steps_file, self._trace_file, self._events_file):
            if file is not None:
                try:
                    file.close()
                except OSError:
                    pass
        self._steps_file = self._trace_file = self._events_file = None


def unix_ns_at(mark: float) -> int:
    """The Unix time (ns, ``time.time_ns``) at ``mark``, a ``perf_counter``
    reading: the rank's clock set against the wall clock, read back to back
    (the closest of three pairs, within a few µs)."""
    pairs = []
    for _ in range(3):
        before = perf_counter()
        wall = time.time_ns()
        pairs.append((perf_counter() - before, wall, before))
    _, wall, at = min(pairs)
    return wall - round((at - mark) * 1e9)


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out: torch's ``OutOfMemoryError``
    (CUDA, ROCm, XPU, MPS), or a ``RuntimeError`` saying ``out of memory``
    (older releases) or ``can't allocate memory`` (the CPU allocator)."""
    import torch

    if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def device_memory_gb(torch: Any, device: Any) -> float | None:
    """The memory of ``device`` (GiB): what the driver lets PyTorch use on a
    GPU, the host's physical memory on CPU (psutil); None where unknown."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory / GIB
        if device.type == "cpu":
            import psutil

            return psutil.virtual_memory().total / GIB
    except Exception:
        return None
    return None


def _on_host(value: Any) -> Any:
    """A CUDA tensor starts its copy to the host now (ordered before the
    step's end mark, so it is complete when the step is resolved); a host
    tensor is read now (no sync), so that the step kept for its batch holds
    no tensor and no autograd graph; anything else is kept as it is."""
    if getattr(value, "is_cuda", False):
        return value.detach().to("cpu", non_blocking=True)
    return number(value) if hasattr(value, "item") else value


class _Step:
    """The open step (returned by ``StepProfiler.step``), counting its FLOPs
    with ``counter`` where one is given."""

    __slots__ = ("_profiler", "_record", "_range", "_counter", "_given")

    def __init__(self, profiler: StepProfiler, record: StepRecord, trace_range: Any,
                 counter: StepFlopCounter | None = None) -> None:
        self._profiler = profiler
        self._record = record
        self._range = trace_range
        self._counter = counter
        self._given = (record.tokens is not None, record.samples is not None)  # step() counted the whole step
        trace_range.__enter__()
        if counter is not None:
            counter.__enter__()

    def __enter__(self) -> _Step:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            if exc_type is None:
                self._profiler._counted(self._counter, self._record)
        self._range.__exit__(None, None, None)
        self._profiler._end_step(self._record, exc_type is not None, exc if isinstance(exc, BaseException) else None)
        return False

    @property
    def loss(self) -> Any:
        return self._record.loss

    @loss.setter
    def loss(self, value: Any) -> None:
        self._record.loss = value

    def micro_step(self, tokens: Any = None, samples: Any = None) -> None:
        """Count one micro-batch of gradient accumulation and what it
        processed. Tokens (samples) given to ``step()`` are the whole step's:
        a micro-step's own are then not added, and a ``ProfilerWarning`` says
        so once."""
        record = self._record
        record.micro_steps += 1
        given_tokens, given_samples = self._given
        if tokens is not None and given_tokens or samples is not None and given_samples:
            self._profiler._warn_once("counted twice", "tokens or samples given both to step() and to its "
                                                       "micro_step() calls: step()'s count the whole step, "
                                                       "micro_step()'s are not added")
        if tokens is not None and not given_tokens:
            record.tokens = tokens if record.tokens is None else record.tokens + tokens
        if samples is not None and not given_samples:
            record.samples = samples if record.samples is None else record.samples + samples


class _Phase:
    """An open phase (returned by ``StepProfiler.phase``). The wait for data is
    timed on the host clock; every other phase on the step clock."""

    __slots__ = ("_profiler", "_index", "_start", "_range")

    def __init__(self, profiler: StepProfiler, index: int, trace_range: Any) -> None:
        self._profiler = profiler
        self._index = index
        self._range = trace_range

    def __enter__(self) -> _Phase:
        self._range.__enter__()
        self._start = perf_counter() if self._index == DATA else self._profiler._clock.mark()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        self._range.__exit__(None, None, None)
        profiler = self._profiler
        if profiler._off:
            return False
        if self._index == DATA:
            profiler._add_data(self._start, perf_counter())
        else:
            profiler._add_phase(self._index, self._start, profiler._clock.mark())
        return False


class _OutsidePhase:
    """An open phase outside the steps (returned by ``StepProfiler.phase``
    when no step is open), timed on the step clock."""

    __slots__ = ("_profiler", "_name", "_start", "_range")

    def __init__(self, profiler: StepProfiler, name: str) -> None:
        self._profiler = profiler
        self._name = name
        self._range = profiler._range(name)

    def __enter__(self) -> _OutsidePhase:
        self._range.__enter__()
        self._start = self._profiler._clock.mark()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        self._range.__exit__(None, None, None)
        profiler = self._profiler
        if not profiler._off:
            try:
                profiler._end_outside(self._name, self._start, profiler._clock.mark())
            except Exception as error:
                profiler._fail("cannot record a phase outside the steps", error)
        return False


class _NoStep:
    """What ``step`` and ``phase`` return when profiling is off: does nothing."""

    __slots__ = ()

    @property
    def loss(self) -> None:
        return None

    @loss.setter
    def loss(self, value: Any) -> None:
        return None

    def __enter__(self) -> _NoStep:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def micro_step(self, tokens: Any = None, samples: Any = None) -> None:
        return None


_NO_STEP = _NoStep()
