"""Import speed: generate mixed training-log text, time ``trainperf.importers``.

Writes Megatron-LM, torchtitan (two ranks, colours, ``[rankN]:`` prefixes,
timestamps), nanoGPT, epoch-timing, llm.c, Hugging Face Trainer, MaxText, NeMo,
DeepSpeed (``srun -l`` labels), Composer logs and a Lightning ``metrics.csv``,
each interleaved with the noise real logs carry (NCCL and warning lines), into a temporary folder, then
imports every file, first one after another in this process, then with a
pool of ``--jobs`` processes (as ``trainperf import --jobs``), and prints a
table. Usage::

    python benchmarks/import_speed.py              # about 1 GB (the target: under 60 s on 2 cores)
    python benchmarks/import_speed.py --size-mb 100
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from trainperf.importers import import_path

SHARES = {"megatron": 0.22, "torchtitan": 0.2, "nanogpt": 0.1, "epoch-timing": 0.05, "llmc": 0.07,
          "hf_trainer": 0.07, "maxtext": 0.07, "nemo": 0.07, "deepspeed": 0.07, "composer": 0.05,
          "lightning_csv": 0.03}
FILE_MB = 64
NOISE = ("NCCL INFO Channel 03/32 :    0   1   2   3   4   5   6   7",
         "/usr/lib/python3/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have "
         "requires_grad=True. Gradients will be None",
         "[2025-01-15 10:00:00,000] torch.distributed.elastic: heartbeat ok")


def megatron_lines(step: int) -> list[str]:
    return [f" [2025-01-15 10:{step // 3600 % 60:02d}:{step // 60 % 60:02d}.{step % 1000000:06d}] iteration "
            f"{step:8d}/{10 ** 8:8d} | consumed samples: {step * 512:12d} | elapsed time per iteration (ms): "
            f"{1000 + step % 7:.1f} | throughput per GPU (TFLOP/s/GPU): {400 + step % 5:.1f} | learning rate: "
            f"3.000000E-04 | global batch size:   512 | lm loss: {2 + 1 / step:.6E} | loss scale: 1.0 | "
            "grad norm: 0.873 | number of skipped iterations:   0 | number of nan iterations:   0 |",
            NOISE[step % 3]]


START = datetime.datetime(2025, 1, 15)


def torchtitan_lines(step: int) -> list[str]:
    moment = START + datetime.timedelta(seconds=step)  # one step a second, date advancing past midnight
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"
    return [f"[rank{rank}]:[titan] {stamp} - root - INFO - \x1b[31mstep: {step:2}  \x1b[32mloss: {2 + 1 / step:7.4f}"
            f"  \x1b[38;2;54;234;195mmemory: 35.18GiB(44.47%)  \x1b[34mtps: {8000 + step % 300:,}  "
            f"\x1b[36mtflops: 400.12  \x1b[35mmfu: 40.46%\x1b[39m" for rank in (0, 1)] + [NOISE[step % 3]]


def nanogpt_lines(step: int) -> list[str]:
    return [f"iter {step}: loss {2 + 1 / step:.4f}, time {400 + step % 9:.2f}ms, mfu {38 + step % 3:.2f}%",
            NOISE[step % 3]]


def epoch_lines(step: int) -> list[str]:
    block = [f"2024-12-11 16:14:45,135 - Rank {step % 4} -", f"    Rank {step % 4} Epoch {step // 4} timing breakdown:"]
    block += [f"        {name}: {value:.2f} seconds" for name, value in (
        ("Total epoch time", 800 + step % 13), ("Data loading time", 5.0), ("Data movement time", 1.5),
        ("Training compute time", 770.0), ("Training communication time", 40.0))]
    return block + [NOISE[step % 3]]


def llmc_lines(step: int) -> list[str]:
    return [f"step {step:4d}/{10 ** 8} | loss {2 + 1 / step:.6f} (+0.01z)| norm 0.2776 (+0.10z)| lr 6.00e-04 | "
            f"{2749.0 + step % 7:.2f} ms | 47.3% bf16 MFU | {381369 + step % 11:.0f} tok/s", NOISE[step % 3]]


def hf_trainer_lines(step: int) -> list[str]:
    lines = [f"{{'loss': {2 + 1 / step:.4f}, 'grad_norm': 0.51, 'learning_rate': 2e-05, 'epoch': {step / 1e5:.4f}}}",
             NOISE[step % 3]]
    if step % 1000 == 0:  # final metrics as Trainer prints them; the last ones count
        lines.append(f"{{'train_runtime': {step * 0.5:.4f}, 'train_samples_per_second': 64.0, "
                     f"'train_steps_per_second': 2.0, 'train_loss': 2.1, 'epoch': {step / 1e5:.4f}}}")
    return lines


def maxtext_lines(step: int) -> list[str]:
    return [f"I0115 10:00:00.000000 140 metric_logger.py:196] completed step: {step}, seconds: {8.982 + step % 5 / 1000}, "
            f"TFLOP/s/device: 302.566, Tokens/s/device: 3648.273, total_weights: 8388608, loss: {1 / step:.3f}",
            NOISE[step % 3]]


def nemo_lines(step: int) -> list[str]:
    return [f"Training epoch 0, iteration {step}/{10 ** 8} | lr: 1.961e-06 | global_batch_size: 256 | "
            f"global_step: {step} | reduced_train_loss: {2 + 1 / step:.3f} | train_step_timing in s: "
            f"{3.13 + step % 3 / 100:.3f} | consumed_samples: {256 * (step + 1)}", NOISE[step % 3]]


def deepspeed_lines(step: int) -> list[str]:
    moment = START + datetime.timedelta(seconds=2.5 * step)
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"
    return [f"0: [{stamp}] [INFO] [timer.py:260:stop] epoch=0/micro_step={4 * step}/global_step={step}, "
            f"RunningAvgSamplesPerSec=25.72280894083983, CurrSamplesPerSec={25.7 + step % 3 / 10}, "
            "MemAllocated=4.32GB, MaxMemAllocated=38.49GB",
            f"0: [Rank 0] time (ms) | fwd: 612.31 | bwd: 1201.77 | bwd_inner: 1150.02 | bwd_allreduce: 51.70 | "
            f"step: {88.4 + step % 5:.2f}", NOISE[step % 3]]


def composer_lines(step: int) -> list[str]:
    return [f"[batch={step}/{10 ** 8}]:", f"\t Train time/batch: {step - 1}", f"\t Train time/sample: {(step - 1) * 1024}",
            f"\t Train time/token: {(step - 1) * 1024 * 8192}", f"\t Train loss/train/total: {2 + 1 / step:.4f}",
            "\t Train throughput/tokens_per_sec: 20082.8418", f"\t Train time/train: {step / 100:.4f}",
            NOISE[step % 3]]


def lightning_lines(step: int) -> list[str]:
    return [f"0,{step * 5 - 1},{step * 5},48.2,25087.7,385.9,{step * 2600},{step * 40},{step * 0.12:.6f},",
            f"0,{step * 5 - 1},,,,,,,,{5 + 1 / step:.6f}"]


HEADERS = {"lightning_csv": "epoch,step,train/batches,train/device/batches_per_sec,train/device/items_per_sec,"
                            "train/device/samples_per_sec,train/lengths,train/samples,train/time,train_loss\n"}
"""First lines of the formats that have a header."""
SUFFIXES = {"lightning_csv": ".csv"}

GENERATORS = {"megatron": megatron_lines, "torchtitan": torchtitan_lines, "nanogpt": nanogpt_lines,
              "epoch-timing": epoch_lines, "llmc": llmc_lines, "hf_trainer": hf_trainer_lines,
              "maxtext": maxtext_lines, "nemo": nemo_lines, "deepspeed": deepspeed_lines,
              "composer": composer_lines, "lightning_csv": lightning_lines}


def write_logs(folder: Path, total_mb: float) -> list[Path]:
    """Log files of about ``total_mb`` MB in all, at most FILE_MB each."""
    paths = []
    for name, share in SHARES.items():
        remaining = int(total_mb * share * 2 ** 20)
        index = 0
        while remaining > 0:
            size = min(remaining, FILE_MB * 2 ** 20)
            path = folder / f"{name}-{index}{SUFFIXES.get(name, '.log')}"
            with open(path, "w") as handle:
                handle.write(HEADERS.get(name, ""))
                written, step, lines = 0, 1, []
                while written < size:
                    text = "\n".join(GENERATORS[name](step)) + "\n"
                    lines.append(text)
                    written += len(text)
                    step += 1
                    if len(lines) == 10_000:
                        handle.write("".join(lines))
                        lines = []
                handle.write("".join(lines))
            paths.append(path)
            remaining -= size
            index += 1
    return paths


def _timed_import(path: Path) -> tuple[str, float, float, int, int]:
    """Format, wall seconds, CPU seconds of this process, lines, unreadable lines."""
    start, cpu = time.perf_counter(), time.process_time()
    result = import_path(path)
    return (result.format, time.perf_counter() - start, time.process_time() - cpu, result.lines,
            result.skipped_total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024.0, help="log text to generate (default 1024)")
    parser.add_argument("--jobs", type=int, default=2, help="processes for the parallel pass (default 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        paths = write_logs(folder, args.size_mb)
        total = sum(p.stat().st_size for p in paths)
        print(f"generated {total / 2**20:,.0f} MiB in {len(paths)} files ({time.perf_counter() - started:.0f} s); "
              f"{os.cpu_count()} CPUs")
        rows: dict[str, list[float]] = {}
        serial_start = time.perf_counter()
        for path in paths:
            fmt, seconds, cpu, lines, skipped = _timed_import(path)
            row = rows.setdefault(fmt, [0, 0.0, 0.0, 0.0, 0, 0])
            for i, value in enumerate((1, path.stat().st_size / 2 ** 20, seconds, cpu, lines, skipped)):
                row[i] += value
        serial = time.perf_counter() - serial_start
        parallel_start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            parallel_cpu = sum(r[2] for r in pool.map(_timed_import, paths))
        parallel = time.perf_counter() - parallel_start
    mib = total / 2 ** 20
    print(f"{'format':<14}{'files':>6}{'MiB':>7}{'lines':>12}{'skipped':>8}{'wall s':>8}{'CPU s':>7}{'MiB/CPU s':>10}")
    for fmt, (files, size, seconds, cpu, lines, skipped) in rows.items():
        print(f"{fmt:<14}{files:>6}{size:>7,.0f}{lines:>12,}{skipped:>8}{seconds:>8.1f}{cpu:>7.1f}{size / cpu:>10.1f}")
    cpu = sum(r[3] for r in rows.values())
    print(f"{'all, 1 process':<20}{mib:>7,.0f}{'':>20}{serial:>8.1f}{cpu:>7.1f}{mib / cpu:>10.1f}")
    print(f"{f'all, {args.jobs} processes':<20}{mib:>7,.0f}{'':>20}{parallel:>8.1f}{parallel_cpu:>7.1f}")
    print(f"1 GiB: {1024 * parallel / mib:.0f} s measured with {args.jobs} processes on this machine "
          f"(load average {os.getloadavg()[0]:.1f}); {1024 * cpu / mib / args.jobs:.0f} s of CPU per core "
          f"when {args.jobs} cores are free (target: 60 s)")


if __name__ == "__main__":
    main()
