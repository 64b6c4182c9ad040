"""``StepProfiler``: turns a user's own training loop into a trainperf run folder.

How to use it, what it measures and what it writes: docs/profiler.md. The profiler never breaks the job
it measures: a failure of its own gives one :class:`ProfilerWarning`, and every call then does nothing
while training goes on; an exception of the user's code passes through untouched (a step that ran out of
memory is recorded as such first: :func:`~trainperf.profiler.memory.out_of_memory`).
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import suppress
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any

from trainperf.profiler import environment
from trainperf.profiler.clocks import Clock, CudaClock, HostClock, unix_ns_at
from trainperf.profiler.collectives import DEFAULT_EVERY, DEFAULT_STEPS, CollectiveSampler
from trainperf.profiler.comm import DdpCommTimer, strategy_of, watch_ddp
from trainperf.profiler.cpu_peak import cpu_peak
from trainperf.profiler.energy import energy_meter
from trainperf.profiler.flop_count import StepFlopCounter, needs_counting, parameter_counts
from trainperf.profiler.memory import CudaMemory, HostPeak, device_memory_gb, host_memory_reader, out_of_memory
from trainperf.profiler.record import CARRIED, DATA, PHASE_INDEX, StepRecord, on_host, unattributed
from trainperf.profiler.writing import (MAX_PENDING_STEPS, WRITE_EVERY_S, WRITE_EVERY_STEPS, ExitFlush, RankFiles,
                                        RunFolderInUse, claim)
from trainperf.runfolder import eventfile, rankfile
from trainperf.runfolder.manifest import MANIFEST_FILE, write_json
from trainperf.steady_state import RULES


class ProfilerWarning(UserWarning):
    """The profiler stopped profiling (training goes on), or ignored a call."""


DEFAULT_WARMUP_STEPS = 2
"""Steps flagged as warm-up where the user states none (MSER then finds the rest from the step times)."""


class StepProfiler:
    """Time the steps of a training loop on this rank and write them to ``run_dir``, in batches; every
    option, the warm-up rules and when a batch is written: docs/profiler.md ("Usage", "The run folder").
    Create it on every rank after the process group is initialized: it gathers every rank's host (a
    collective). ``run_dir`` must hold no other run (:class:`RunFolderInUse`, unless ``overwrite``)."""

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
        self._files: RankFiles | None = None
        self._comm: DdpCommTimer | None = None
        self._sampler: CollectiveSampler | None = None
        self._sampling = (comm_sample_every, comm_sample_steps)
        self._sample_comm = comm_sampling
        self._open: StepRecord | None = None
        self._carry_phases: list[tuple[int, Any, Any]] = []
        self._carry_data: list[tuple[float, float]] = []
        self._outside: deque[tuple[str, Any, Any]] = deque()
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
        device_name = torch.cuda.get_device_name(device) if self._cuda else "cpu"
        memory_gb = device_memory_gb(torch, device)
        backend = dist.get_backend() if environment.grouped(dist) else None
        place, places = environment.gather_places(dist)
        self.rank = place.rank
        self._energy, energy = energy_meter(torch, device, environment.first_on_host(place, places))
        claim(self.run_dir, overwrite, dist, place.rank, place.world_size)
        self._config = config
        self._strategy: str | None = None if place.world_size > 1 else "single"
        peak = None  # this machine's CPU peak, unless the config gives one
        if not self._cuda and self.rank == 0 and "peak_tflops_per_gpu" not in config:
            try:
                peak = cpu_peak(config.get("precision"))
            except Exception as exc:
                self._warn_once("peak", f"CPU peak not measured, MFU stays empty: {type(exc).__name__}: {exc}")
        self._manifest = partial(  # all but the configuration and the strategy, which change
            environment.manifest, places=places, device_name=device_name, backend=backend,
            warmup_steps=self.warmup_steps, warmup_rule=self.warmup, torch_version=torch.__version__, cpu_peak=peak,
            host=environment.host_load(torch.get_num_threads()), energy=energy, device_memory_gb=memory_gb)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_manifest()
        node = environment.node_names(places).get(place.rank, place.host)
        self._files = RankFiles(self.run_dir, place.rank, trace, "host" if self._cuda else "step")
        if self._sample_comm:
            self._start_sampling()
        self._origin = self._clock.mark()
        self._host_origin = perf_counter() if self._cuda else self._origin
        self._files.steps.write(rankfile.header_line(place.rank, place.host, place.node_rank, node,
                                                     unix_ns_at(self._host_origin)))
        self._exit_flush = ExitFlush(self._write_at_exit)

    def _write_manifest(self) -> None:
        if self.rank == 0:
            write_json(self.run_dir / MANIFEST_FILE, self._manifest(self._config, strategy=self._strategy))

    def _start_sampling(self) -> None:
        """Sample communication from now on, and say how in the manifest."""
        if self._sampler is None:
            self._sampler = CollectiveSampler(self._torch, self._cuda, self.warmup_steps, *self._sampling)
            self._config["comm_measurement"] = self._sampler.describe()
            self._write_manifest()

    def watch(self, model: Any, comm_hook: Any = None, comm_state: Any = None) -> Any:
        """Return ``model`` unchanged, its communication timed from the first backward on: under DDP a
        hook wrapping ``comm_hook(comm_state, bucket)`` (DDP takes one hook only, so pass yours here);
        under FSDP sampled windows. Records the parameter count and whether FLOPs must be counted."""
        if self._off:
            return model
        try:
            if (counts := parameter_counts(model)) is not None:
                self.update_config(counts)  # the configuration's own n_params wins
            if self._count_flops is None and needs_counting(model, self._config):
                self._count_flops = True
                self.update_config({"flops_convention": "counted"})
            # the DDP (or FSDP) module: ``model``, or the one Lightning Fabric's ``_FabricModule`` forwards to
            module = getattr(model, "_forward_module", model)
            strategy = strategy_of(module)
            if strategy == "ddp":
                self._comm = watch_ddp(module, self._clock, comm_hook, comm_state)
            elif strategy == "fsdp" and self._sample_comm is None:
                self._start_sampling()
            if strategy is not None and strategy != self._strategy:
                self._strategy = strategy
                self._write_manifest()
        except Exception as exc:
            self._warn_once("watch", f"communication is not timed: {type(exc).__name__}: {exc}")
        return model

    def update_config(self, values: dict[str, Any]) -> None:
        """Add run columns to the manifest's ``config`` (e.g. the sequence length, from the first
        batch); the values given when the profiler was created win."""
        if self._off:
            return
        try:
            if added := {k: v for k, v in values.items() if k not in self._config}:
                self._config.update(added)
                self._write_manifest()
        except Exception as exc:
            self._fail("cannot update the manifest", exc)

    # -- the loop ------------------------------------------------------------

    def batches(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield the items of ``iterable``, each wait for one timed as the ``data`` phase."""
        iterator = iter(iterable)
        while True:
            timed = not self._off
            if timed:
                self._window()  # the wait starts the window of the step it feeds, if nothing else did
                start = perf_counter()
            with (self._range("data") if timed else None) or _NO_STEP:
                item = next(iterator, _END)
            if item is _END:
                return
            if timed and not self._off:
                self._add_data(start, perf_counter())
            yield item

    def step(self, tokens: Any = None, samples: Any = None, loss: Any = None) -> _Step | _NoStep:
        """Context manager around one optimizer step. ``tokens`` and ``samples``: processed by this
        rank in the whole step (numbers or tensors), or each micro-batch's given to ``micro_step``.
        The returned object takes ``.loss`` (a number, or a tensor read without a sync)."""
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

    def phase(self, name: str) -> _Phase | _NoStep:
        """Context manager timing one phase: in a step, one of ``schema.PHASES`` (repeated ones add up);
        outside any step, ``data`` and ``h2d`` count in the next step, any other name is a phase outside."""
        if self._off:
            return _NO_STEP
        if self._open is None and name not in CARRIED:
            return _Phase(self, None, self._range(name), name) if self._outside_name_ok(name) else _NO_STEP
        index = PHASE_INDEX.get(name)
        if index is None:
            self._warn_once(f"phase {name}", f"unknown phase {name!r} in a step is not timed; phases of a step: "
                                             f"{', '.join(PHASE_INDEX)}")
            return _NO_STEP
        if self._open is None:
            self._window()
        return _Phase(self, index, self._range(name, self._step_ranges if self._open is not None else None))

    def outside_since_last(self, name: str) -> None:
        """Record the time since the last step or phase outside ended, waits for data included, as a phase
        ``name`` outside the steps (for hooks that fire when the work is done); not in a step or before one."""
        if self._off or self._open is not None or self._window_start is None:
            return
        if self._outside_name_ok(name):
            self._carry_data = []
            self._end_outside(name, self._window_start)

    def _outside_name_ok(self, name: object) -> bool:
        """Whether ``name`` can name a phase outside the steps; a ProfilerWarning once where not."""
        if isinstance(name, str) and eventfile.NAME.fullmatch(name):
            return True
        self._warn_once(f"phase {name}", f"phase {name!r} is not timed: a name outside a step is a letter, "
                                         "then letters, digits or underscores")
        return False

    def close(self) -> None:
        """Write what is left and the end line, and close the files: on every rank, when training ends."""
        if self._off:
            return
        try:
            self._end_window()
            self._flush(wait=True)
            assert self._files is not None
            self._files.steps.write(rankfile.end_line(
                self._index, unattributed(self._carry_phases, self._carry_data, self._clock),
                perf_counter() - self._host_origin))
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
        """The start mark of the next step's window: where the last step (failed or not) or phase outside
        the steps ended, or now when nothing has been timed yet."""
        if self._window_start is None:
            self._window_start = self._clock.mark()
        return self._window_start

    def _range(self, name: str, recording: bool | None = None) -> Any:
        """A ``trainperf/<name>`` range while a torch profiler records (``recording``; None: ask now)."""
        if recording is None:
            recording = self._recording()
        return self._record_function(f"trainperf/{name}") if recording else None

    def _add_data(self, start: float, end: float) -> None:
        (self._open.data if self._open is not None else self._carry_data).append((start, end))

    def _end_outside(self, name: str, start: Any) -> None:
        """A phase outside the steps ends now; the next step's window starts at its end."""
        try:
            end = self._clock.mark()
            self._outside.append((name, start, end))
            if self._open is None:
                self._window_start = end
            self._flush(wait=False)
        except Exception as exc:
            self._fail("cannot record a phase outside the steps", exc)

    def _sample(self, record: StepRecord) -> None:
        """Before the step's end mark: in a window, hold the step until the window ends, or end it with its
        last step (so that reading it costs a sampled step); otherwise give the step the latest estimate."""
        assert self._sampler is not None
        if self._sampler.active:
            if self._sampler.last_of_window(record.index):
                record.estimate = self._end_window()
            else:
                record.waiting = True
        else:
            record.estimate = self._sampler.estimate

    def _end_window(self) -> tuple[float, float] | None:
        """Close an open window, give its estimate to the steps held for it, and return it."""
        if self._sampler is None or not self._sampler.active:
            return None
        try:
            estimate = self._sampler.stop()
        except Exception as exc:  # sampling stops; the profiler goes on
            self._warn_once("sampling", f"communication is not sampled: {type(exc).__name__}: {exc}")
            self._sampler.cancel()
            self._sampler, estimate = None, None
        for held in self._pending:
            if held.waiting:
                held.waiting, held.estimate = False, estimate
        return estimate

    def _counted(self, counter: StepFlopCounter, record: StepRecord) -> None:
        """Record the counted step's ``flops_per_sample`` and count no more."""
        self._count_flops = False
        per_sample = counter.per_sample(record.samples)
        if isinstance(per_sample, str):
            self._warn_once("count_flops", f"no MFU: {per_sample}")
        else:
            self.update_config({"flops_per_sample": per_sample})

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
                on_host(record.tokens), on_host(record.samples), on_host(record.loss))
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
        """Write the line of a step that ran out of memory now: its window up to the error, memory and
        energy, no work; a retried step gets the same index."""
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

    def _write_at_exit(self) -> None:
        """At exit without ``close()``: write the steps whose marks are ready, unless a write is under
        way (a signal interrupted it) or profiling stopped. Never raises."""
        if self._off or self._writing:
            return
        with suppress(Exception):
            self._flush(wait=False)

    def _flush(self, wait: bool) -> None:
        self._writing = True
        try:
            self._files.write_ready(self._pending, self._outside, self._clock, self._origin,
                                    self._host_origin, wait)
        finally:
            self._writing = False
            self._written_at = perf_counter()

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
            self._sampler.cancel()
        self._pending.clear()
        self._outside.clear()
        if self._files is not None:
            self._files.close()
            self._files = None


class _Step:
    """The open step (returned by ``StepProfiler.step``), counting its FLOPs with ``counter`` if given."""

    __slots__ = ("_profiler", "_record", "_range", "_counter", "_given")

    def __init__(self, profiler: StepProfiler, record: StepRecord, trace_range: Any,
                 counter: StepFlopCounter | None = None) -> None:
        self._profiler = profiler
        self._record = record
        self._range = trace_range
        self._counter = counter
        self._given = (record.tokens is not None, record.samples is not None)  # step() counted the whole step
        if trace_range is not None:
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
        if self._range is not None:
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
        """Count one micro-batch and what it processed (not added where ``step()`` was given the whole
        step's: a ``ProfilerWarning`` says so once)."""
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
    """An open phase: of a step (``index`` in ``schema.PHASES``; the wait for data on the host clock, any
    other on the step clock), or outside the steps (``index`` None, ``name``; on the step clock)."""

    __slots__ = ("_profiler", "_index", "_start", "_range", "_name")

    def __init__(self, profiler: StepProfiler, index: int | None, trace_range: Any, name: str = "") -> None:
        self._profiler = profiler
        self._index = index
        self._range = trace_range
        self._name = name

    def __enter__(self) -> _Phase:
        if self._range is not None:
            self._range.__enter__()
        self._start = perf_counter() if self._index == DATA else self._profiler._clock.mark()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        if self._range is not None:
            self._range.__exit__(None, None, None)
        profiler = self._profiler
        if profiler._off:
            return False
        if self._index is None:
            profiler._end_outside(self._name, self._start)
        elif self._index == DATA:
            profiler._add_data(self._start, perf_counter())
        else:
            phases = profiler._open.phases if profiler._open is not None else profiler._carry_phases
            phases.append((self._index, self._start, profiler._clock.mark()))
        return False


class _NoStep:
    """What ``step`` and ``phase`` return when profiling is off: does nothing."""

    __slots__ = ()
    loss = property(lambda self: None, lambda self, value: None)

    def __enter__(self) -> _NoStep:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def micro_step(self, tokens: Any = None, samples: Any = None) -> None:
        return None


_NO_STEP = _NoStep()
_END = object()  # what ``batches`` gets from an exhausted iterable
