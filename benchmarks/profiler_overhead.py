"""Overhead benchmark: what ``StepProfiler`` adds to a training step.

The bench's small GPT (``trainperf.bench.model``) trains on random token
windows on the CPU, in three variants measured side by side in one process:

* ``plain``: the bare loop;
* ``trainperf``: the same loop instrumented as the docs show (``batches``,
  ``step`` with tokens and samples, every phase, the loss handed over), with
  the default trace file;
* ``torch.profiler``: the bare loop under ``torch.profiler.profile`` (CPU
  activities), as a reference point.

Blocks of steps of each variant alternate (A B C A B C ..., the order rotated
every round), so that the noise of a shared machine falls on all of them
alike; every step is timed from outside the loop body with
``time.perf_counter`` (wall) and ``time.process_time`` (CPU time of the
process, every thread's: the profiler's work, written batches included, and
any thread of torch's; unlike wall time it does not count the time other
processes of a shared machine take the core away). Reported:
median step time of each variant, wall and CPU, its ratio to ``plain`` with
a 95 % bootstrap interval, and the median of per-round ratios. The verdict is
taken on CPU time, the measure that the machine's other tenants do not move;
the wall-clock figures are printed beside it, with their noise. Then the profiler's own cost per step with empty phases
(the instrumentation alone, no training), which does not depend on the model.

Last, the whole run with sampled communication windows (``comm_sampling=True``:
``torch.profiler`` over ``comm_sample_steps`` steps every
``comm_sample_every`` steps or more, FSDP's default), whose cost medians
would hide: long blocks of the plain loop and of the profiled loop with
sampling alternate (``--run-rounds`` rounds of ``--run-block`` steps each,
the order swapped every round; a sampled block that ends inside a window
goes on until the window has ended), and the mean step time of each is
compared: the profiler's cost averaged over the run, windows included. The sampler's clocks
run only while its own variant trains, so it spaces its windows as it would
in a run of that variant alone (the plain blocks in between would otherwise
count as time since its last window).

What a window costs, before, during and after it: the sampled loop runs
alone for ``--window-steps`` steps; for each window (the first aside: it also
carries torch.profiler's one-time start-up) the CPU time beyond the typical
step of the steps before it, of its own steps and of the steps after it is set
beside the part of its cost that the sampler budgets. Then what the
profiler's step path costs right after a real training step, which has cooled
the processor's caches, and what single calls of its pieces cost there
(:func:`after_training`). Last, the step time from which the whole run stays
within 1 %: the per-step instrumentation (the largest of the paired CPU
difference, the empty-phase cost and the step path after a training step) over
what the windows' budget leaves of the 1 %.

    python benchmarks/profiler_overhead.py [--size small] [--batch 8] [--rounds 20] [--block 2]
                                           [--run-rounds 20] [--run-block 100] [--window-steps 3000]
                                           [--cold-blocks 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainperf import StepProfiler
from trainperf.bench.model import GPT, model_config
from trainperf.profiler import collectives, memory

TARGET = 0.01
"""Largest acceptable overhead on CPU: 1 % of the median step time."""
WINDOW_BEFORE = 5
"""Steps before a sampled window whose time is set against it."""
WINDOW_AFTER = 20
"""Steps after a sampled window whose time is set against it."""


def batches(n: int, batch: int, seq_len: int, vocab: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    for _ in range(n):
        tokens = torch.randint(vocab, (batch, seq_len + 1), generator=generator)
        yield tokens[:, :-1], tokens[:, 1:]


def now() -> tuple[float, float]:
    """Wall clock and this process's CPU time (s)."""
    return time.perf_counter(), time.process_time()


def lap(start: tuple[float, float], times: list[tuple[float, float]]) -> tuple[float, float]:
    end = now()
    times.append((end[0] - start[0], end[1] - start[1]))
    return end


def plain_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, data: Iterator,
                times: list[tuple[float, float]]) -> None:
    start = now()
    for x, y in data:
        x, y = x.to("cpu"), y.to("cpu")
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        start = lap(start, times)


def profiled_steps(prof: StepProfiler, sampled: list[int] | None = None) -> Callable[..., None]:
    """The instrumented loop; with ``sampled``, the index of every step taken
    under a sampled window is appended to it."""
    def run(model: torch.nn.Module, opt: torch.optim.Optimizer, data: Iterator,
            times: list[tuple[float, float]]) -> None:
        start = now()
        for x, y in prof.batches(data):
            with prof.step(tokens=x.numel(), samples=x.shape[0]) as step:
                if sampled is not None and torch.autograd.profiler._is_profiler_enabled:
                    sampled.append(len(times))
                with prof.phase("h2d"):
                    x, y = x.to("cpu"), y.to("cpu")
                with prof.phase("forward"):
                    logits = model(x)
                with prof.phase("loss"):
                    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                step.loss = loss
            start = lap(start, times)
    return run


def torch_profiled_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, data: Iterator,
                         times: list[tuple[float, float]]) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        plain_steps(model, opt, data, times)


class VariantClock:
    """A clock (``time.perf_counter``, ``time.thread_time``) that stands
    still while paused: the sampler's, running only while its own variant
    trains."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._paused_s = 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        now = self._clock()
        return now - self._paused_s - (now - self._since if self._since is not None else 0.0)

    def pause(self) -> None:
        if self._since is None:  # pausing a paused clock keeps the time it has stood still
            self._since = self._clock()

    def resume(self) -> None:
        if self._since is not None:
            self._paused_s += self._clock() - self._since
            self._since = None


def whole_run(model: torch.nn.Module, opt: torch.optim.Optimizer, args: argparse.Namespace, config: object,
              run_dir: Path) -> tuple[dict[str, list[tuple[float, float, int]]], list[int]]:
    """Per-round block totals (wall s, CPU s, steps) of the plain loop and of
    the profiled loop with sampled windows, and the steps sampled. A sampled
    block that ends inside a window goes on until the window has ended (a
    window spanning the next plain block would profile that block)."""
    # the sampler's schedule, on its variant's own wall and CPU time
    clocks = [VariantClock(time.perf_counter), VariantClock(time.thread_time)]
    collectives.perf_counter, collectives.thread_time = clocks
    prof = StepProfiler(run_dir, warmup_steps=0, comm_sampling=True)
    sampled: list[int] = []
    variants = {"plain": plain_steps, "sampled": profiled_steps(prof, sampled)}
    totals: dict[str, list[tuple[float, float, int]]] = {"plain": [], "sampled": []}
    # warm-up: the first window (steps 0-1, with torch.profiler's one-time start-up) is not measured
    variants["sampled"](model, opt, batches(collectives.DEFAULT_STEPS + 1, args.batch, config.seq_len,
                                            config.vocab_size), [])
    sampled.clear()
    for clock in clocks:
        clock.pause()
    for r in range(args.run_rounds):
        for name in (("plain", "sampled") if r % 2 else ("sampled", "plain")):
            data = batches(args.run_block, args.batch, config.seq_len, config.vocab_size)
            if name == "sampled":
                for clock in clocks:
                    clock.resume()
            times: list[tuple[float, float]] = []
            variants[name](model, opt, data, times)
            while name == "sampled" and torch.autograd.profiler._is_profiler_enabled:
                variants[name](model, opt, batches(1, args.batch, config.seq_len, config.vocab_size), times)
            for clock in clocks:
                clock.pause()
            totals[name].append((sum(t[0] for t in times), sum(t[1] for t in times), len(times)))
    prof.close()
    collectives.perf_counter, collectives.thread_time = time.perf_counter, time.thread_time
    return totals, sampled


def window_costs(model: torch.nn.Module, opt: torch.optim.Optimizer, args: argparse.Namespace, config: object,
                 run_dir: Path) -> tuple[list[tuple[float, float]], list[int], list[tuple[float, float]]]:
    """The sampled loop alone for ``--window-steps`` steps: every step's
    (wall s, CPU s), the steps sampled, and each window's host time as the
    sampler budgets it (wall s, CPU s), to set beside what the steps before,
    during and after each window really took."""
    budgeted: list[tuple[float, float]] = []
    stop = collectives.CollectiveSampler.stop

    def recorded_stop(sampler: collectives.CollectiveSampler) -> tuple[float, float]:
        estimate = stop(sampler)
        budgeted.append(sampler.window_s)
        return estimate

    collectives.CollectiveSampler.stop = recorded_stop
    try:
        prof = StepProfiler(run_dir, warmup_steps=0, comm_sampling=True)
        sampled: list[int] = []
        times: list[tuple[float, float]] = []
        profiled_steps(prof, sampled)(model, opt, batches(args.window_steps, args.batch, config.seq_len,
                                                          config.vocab_size), times)
        prof.close()
    finally:
        collectives.CollectiveSampler.stop = stop
    return times, sampled, budgeted


def window_table(times: list[tuple[float, float]], sampled: list[int],
                 budgeted: list[tuple[float, float]]) -> tuple[list[dict[str, float]], float]:
    """Per window after the first (whose steps also carry torch.profiler's
    one-time start-up): the CPU time (s) beyond the typical step of the
    ``WINDOW_BEFORE`` steps before it, of its own steps, and of the
    ``WINDOW_AFTER`` steps after it, beside the part of its cost the sampler
    budgets (its host time less as many typical steps); and the typical step
    (s): the median CPU time of the steps at least ``WINDOW_AFTER`` steps
    away from any window."""
    cpu = np.array([t[1] for t in times])
    starts = [s for s in sampled if s - 1 not in sampled]
    steps = collectives.DEFAULT_STEPS
    near = np.zeros(len(cpu), dtype=bool)
    for s in starts:
        near[max(s - WINDOW_AFTER, 0):s + steps + WINDOW_AFTER] = True
    typical = float(np.median(cpu[~near])) if (~near).any() else float(np.median(cpu))

    def extra(a: int, b: int) -> float:
        part = cpu[max(a, 0):b]
        return float(part.sum() - len(part) * typical)

    rows = [{"step": s, "before": extra(s - WINDOW_BEFORE, s), "during": extra(s, s + steps),
             "after": extra(s + steps, s + steps + WINDOW_AFTER), "budgeted": cpu_s - steps * typical}
            for s, (_, cpu_s) in zip(starts[1:], budgeted[1:])]
    return rows, typical


def empty_step_cost(prof: StepProfiler, steps: int) -> float:
    """CPU seconds per step of the instrumentation alone (empty phases; the
    mean over ``steps``, the batches written included)."""
    start = time.process_time()
    for i in prof.batches(range(steps)):
        with prof.step(tokens=1024, samples=8) as step:
            for name in ("h2d", "forward", "loss", "backward", "optimizer"):
                with prof.phase(name):
                    pass
            step.loss = 1.0
    return (time.process_time() - start) / steps


def empty_loop_cost(steps: int) -> float:
    """CPU seconds per step of the same loop without the profiler."""
    start = time.process_time()
    for _ in range(steps):
        for _name in ("h2d", "forward", "loss", "backward", "optimizer"):
            pass
    return (time.process_time() - start) / steps


def after_training(model: torch.nn.Module, opt: torch.optim.Optimizer, data: Iterator, run_dir: Path,
                   blocks: int) -> dict[str, float]:
    """What the profiler adds right after a real training step, which cools the
    processor's caches: ``step path``, the instrumented loop's time per step outside the training work
    (``batches``, ``step``, five phases, the loss, sampled communication on) less the bare loop's; then
    single calls of its pieces made just after the work: the two host memory counters and a clock read.
    µs, the lower quartile of ``blocks`` blocks of 50 steps each: the steps that write a batch or carry a
    sampled window, and those another process took the core from, are left out."""
    prof = StepProfiler(run_dir, warmup_steps=0, comm_sampling=True)
    ns, peak, resident = time.perf_counter_ns, memory.HostPeak().read, memory.host_memory_reader()
    pieces: dict[str, Callable[[], object]] = {"peak_memory_gb (getrusage)": peak,
                                               "host_memory_gb (/proc/self/statm)": resident,
                                               "clock read (perf_counter)": time.perf_counter}
    spent: dict[str, list[int]] = {name: [] for name in ("profiled", "bare", *pieces)}

    def train(x: torch.Tensor, y: torch.Tensor) -> int:
        """One training step; its own time (ns)."""
        start = ns()
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return ns() - start

    for _ in range(blocks):
        last, work = ns(), 0
        for x, y in prof.batches(next(data) for _ in range(50)):
            with prof.step(tokens=x.numel(), samples=x.shape[0]) as step:
                for name in ("h2d", "forward", "loss", "backward", "optimizer"):
                    with prof.phase(name):
                        work = train(x, y) if name == "forward" else work
                step.loss = 1.0
            now = ns()
            spent["profiled"].append(now - last - work)
            last = now
        last = ns()
        for x, y in (next(data) for _ in range(50)):
            work = train(x, y)
            now = ns()
            spent["bare"].append(now - last - work)
            last = now
        for name, call in pieces.items():
            for x, y in (next(data) for _ in range(50)):
                train(x, y)
                start = ns()
                call()
                spent[name].append(ns() - start)
    prof.close()
    low = {name: statistics.quantiles(values, n=4)[0] / 1e3 for name, values in spent.items()}
    return {"step path": low.pop("profiled") - low.pop("bare"), **low}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", help="bench model size (tiny, small, medium, large)")
    parser.add_argument("--batch", type=int, default=8, help="samples per step")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of A B C blocks")
    parser.add_argument("--block", type=int, default=2, help="steps per block")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--run-rounds", type=int, default=20, help="rounds of the whole-run comparison")
    parser.add_argument("--run-block", type=int, default=100, help="steps per block in the whole-run comparison")
    parser.add_argument("--window-steps", type=int, default=3000,
                        help="steps of the sampled loop run alone to see what each window costs")
    parser.add_argument("--cold-blocks", type=int, default=20,
                        help="blocks of 50 steps measuring the step path and its pieces after a training step")
    args = parser.parse_args()
    if min(args.rounds, args.block, args.run_rounds, args.run_block) < 1:
        parser.error("--rounds, --block, --run-rounds and --run-block must be at least 1 (the verdict is the "
                     "whole run's)")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = model_config(args.size)
    model = GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with tempfile.TemporaryDirectory() as tmp:
        prof = StepProfiler(Path(tmp) / "overhead", config={"model": f"gpt-{args.size}"}, warmup_steps=0)
        variants = {"plain": plain_steps, "trainperf": profiled_steps(prof), "torch.profiler": torch_profiled_steps}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for name, run in variants.items():  # warm-up: allocator, first-call costs
            run(model, opt, batches(3, args.batch, config.seq_len, config.vocab_size), [])
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % 3:] + names[:r % 3]:
                data = batches(args.block, args.batch, config.seq_len, config.vocab_size)
                variants[name](model, opt, data, times[name])
        empty = 20_000
        cost = min(empty_step_cost(prof, empty) - empty_loop_cost(empty) for _ in range(5))
        prof.close()
        run_totals, sampled = whole_run(model, opt, args, config, Path(tmp) / "sampled")
        windows, typical = window_table(*window_costs(model, opt, args, config, Path(tmp) / "windows"))
        cold = after_training(model, opt, batches(10**9, args.batch, config.seq_len, config.vocab_size),
                              Path(tmp) / "cold", args.cold_blocks)
    print(f"GPT {args.size}: {config.n_params / 1e6:.2f} M parameters, batch {args.batch} x {config.seq_len} "
          f"tokens, {args.threads} thread(s); {args.rounds} rounds x {args.block} steps per variant, interleaved\n")
    print(f"{'variant':<16} {'steps':>6} {'wall ms':>9} {'IQR':>7} {'vs plain':>9} {'paired':>8}"
          f" {'CPU ms':>9} {'IQR':>7} {'vs plain':>9} {'paired':>8}")
    overheads = {}
    for name, values in times.items():
        cells = []
        for k in (0, 1):  # wall, CPU
            column = [t[k] for t in values]
            median, base = statistics.median(column), statistics.median(t[k] for t in times["plain"])
            q1, _, q3 = statistics.quantiles(column, n=4)
            paired = paired_ratio(times[name], times["plain"], k, args.block) - 1
            overheads[name, k] = (median / base - 1, paired)
            cells.append(f"{median * 1e3:>9.2f} {(q3 - q1) / median:>7.1%} {median / base - 1:>+9.2%} {paired:>+8.2%}")
        print(f"{name:<16} {len(values):>6} {cells[0]} {cells[1]}")
    plain = statistics.median(t[0] for t in times["plain"])
    print("\nIQR: interquartile range / median (the machine's noise). paired: median over rounds of the "
          "variant's block median / the plain block median of the same round.")
    print(f"profiler cost per step, empty phases (5 phases + batches + step + loss + lines written): "
          f"{cost * 1e6:.1f} us = {cost / plain:.3%} of the median plain step")
    for k, clock in ((0, "wall"), (1, "CPU")):
        low, high = bootstrap_interval([t[k] for t in times["trainperf"]], [t[k] for t in times["plain"]])
        ratio, paired = overheads["trainperf", k]
        print(f"trainperf overhead, {clock}: {ratio:+.2%} (paired {paired:+.2%}; 95 % interval "
              f"{low:+.2%} .. {high:+.2%})")
    print(f"\nwhole run with sampled communication windows: {args.run_rounds} rounds x {args.run_block} steps per "
          f"variant (sampled: {sum(t[2] for t in run_totals['sampled'])} steps, a block ends with its window), "
          f"interleaved; {len(sampled)} steps sampled ({len(sampled) // collectives.DEFAULT_STEPS} "
          f"windows of {collectives.DEFAULT_STEPS} steps, every {collectives.DEFAULT_EVERY} steps or more, "
          f"at most {collectives.BUDGET:.2%} of the time between windows)")
    print(f"{'clock':<6} {'plain ms':>9} {'sampled ms':>11} {'overhead':>9} {'95 % interval':>20} {'per step us':>12}")
    whole = {}
    for k, clock in ((0, "wall"), (1, "CPU")):
        plain_mean, sampled_mean = (mean_step([(t[k], t[2]) for t in run_totals[n]]) for n in ("plain", "sampled"))
        whole[clock] = overhead = sampled_mean / plain_mean - 1
        low, high = mean_ratio_interval([(t[k], t[2]) for t in run_totals["sampled"]],
                                        [(t[k], t[2]) for t in run_totals["plain"]])
        print(f"{clock:<6} {plain_mean * 1e3:>9.2f} {sampled_mean * 1e3:>11.2f} {overhead:>+9.2%} {low:>+9.2%} .. "
              f"{high:>+7.2%} {(sampled_mean - plain_mean) * 1e6:>12.1f}")
    print(f"\nwhat each window costs: the sampled loop alone for {args.window_steps} steps, CPU ms beyond the typical "
          f"step ({typical * 1e3:.2f} ms, the median of the steps {WINDOW_AFTER} or more away from a window)")
    print(f"{'window at step':>14} {'before':>8} {'during':>8} {'after':>8} {'total':>8} {'budgeted':>9}")
    for row in windows:
        total = row["before"] + row["during"] + row["after"]
        print(f"{row['step']:>14} {row['before'] * 1e3:>8.1f} {row['during'] * 1e3:>8.1f} {row['after'] * 1e3:>8.1f} "
              f"{total * 1e3:>8.1f} {row['budgeted'] * 1e3:>9.1f}")
    print(f"before: the {WINDOW_BEFORE} steps before it; during: its {collectives.DEFAULT_STEPS} steps (torch.profiler "
          f"started, records read); after: the {WINDOW_AFTER} steps after it; budgeted: its host time less "
          f"{collectives.DEFAULT_STEPS} typical steps, which the sampler holds to {collectives.BUDGET:.2%} of the "
          f"time since the last window")
    print(f"\nafter a training step, lower quartiles of {args.cold_blocks * 50} steps each (us): "
          + ", ".join(f"{name} {us:.1f}" for name, us in cold.items()))
    paired = overheads["trainperf", 1][1] * statistics.median(t[1] for t in times["plain"])
    per_step = max(paired, cost, cold["step path"] / 1e6)  # the empty-phase cost is the least it can cost
    floor = per_step / (TARGET - collectives.BUDGET)
    print(f"\nper-step instrumentation: {per_step * 1e6:.0f} us a step (the largest of the paired difference, "
          f"{paired * 1e6:.0f} us CPU, the empty-phase cost and the step path after a training step); with windows "
          f"held to {collectives.BUDGET:.2%}, the whole run stays within {TARGET:.0%} for steps of {floor * 1e3:.1f} ms "
          "or more")
    ok = whole["CPU"] <= TARGET
    print(f"verdict on CPU time, whole run with sampled windows (target <= {TARGET:.0%}): {whole['CPU']:+.2%} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def mean_step(blocks: list[tuple[float, int]]) -> float:
    """Mean step time (s) of blocks given as (total s, steps)."""
    return sum(t for t, _ in blocks) / sum(n for _, n in blocks)


def mean_ratio_interval(variant: list[tuple[float, int]], plain: list[tuple[float, int]],
                        resamples: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of the ratio of mean step times - 1, from
    blocks (total s, steps), resampling rounds (each round's pair of blocks
    together)."""
    rng = np.random.default_rng(0)
    (a, na), (b, nb) = (np.asarray(blocks, dtype=float).T for blocks in (variant, plain))
    rounds = rng.integers(0, len(a), (resamples, len(a)))
    ratios = (a[rounds].sum(axis=1) / na[rounds].sum(axis=1)) / (b[rounds].sum(axis=1) / nb[rounds].sum(axis=1)) - 1
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def bootstrap_interval(variant: list[float], plain: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of median(variant) / median(plain) - 1."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(variant), np.asarray(plain)
    ratios = (np.median(rng.choice(a, (resamples, len(a))), axis=1)
              / np.median(rng.choice(b, (resamples, len(b))), axis=1)) - 1
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def paired_ratio(variant: list[tuple[float, float]], plain: list[tuple[float, float]], k: int, block: int) -> float:
    """Median over rounds of (variant's median step in the round / plain's)."""
    rounds = len(plain) // block
    return statistics.median(
        statistics.median(t[k] for t in variant[r * block:(r + 1) * block])
        / statistics.median(t[k] for t in plain[r * block:(r + 1) * block]) for r in range(rounds))


if __name__ == "__main__":
    sys.exit(main())
