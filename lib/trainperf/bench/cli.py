"""``trainperf bench``: measure the reference workload's sweeps on this machine."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from trainperf.bench.sweeps import CPU_DEFAULTS, GPU_DEFAULTS, SWEEPS, Settings
from trainperf.errors import DataError

DEFAULT_OUT = "data/runs"


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``bench``."""
    parser = subparsers.add_parser(
        "bench", help="measure the bench sweeps on this machine into data/runs/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train the bench model (a GPT-style byte-level transformer on the CPython\n"
                    "documentation text that ships with Python) under torchrun, one profiler run\n"
                    "folder per configuration in <out>/<experiment>/<run_id>.\n\n"
                    "sweeps:\n"
                    "  batch-size  one process; micro-batch x accumulation steps at a constant\n"
                    "              global batch\n"
                    "  scaling     1, 2, 4 processes with DDP: weak (per-process batch fixed) and\n"
                    "              strong (global batch fixed)\n"
                    "  strategy    DDP against FSDP at the same process count and batch\n\n"
                    "Uses the GPUs (NCCL, one process per GPU) when CUDA is available, else the\n"
                    "CPU (gloo). Defaults are shown as CPU / GPU.",
        epilog="On CPU the matmul peak is measured first and recorded in every run as its MFU\n"
               "reference. CPU runs with more processes than cores are flagged: their scaling\n"
               "figures measure oversubscription, not the hardware.")
    parser.add_argument("--sweep", action="append", choices=SWEEPS, dest="sweeps",
                        help="a sweep to run; repeat for several (default: all three)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"root of the run folders (default: {DEFAULT_OUT})")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="cuda: the GPUs; cpu: the CPU; auto: the GPUs when CUDA is available (default)")
    for name, (kind, text) in SETTINGS.items():
        shown = [_shown(getattr(defaults, name)) for defaults in (CPU_DEFAULTS, GPU_DEFAULTS)]
        default = "" if "default:" in text else f" (default: {shown[0]} / {shown[1]})"
        parser.add_argument("--" + name.replace("_", "-"), **kind, help=text + default)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one run may take before it is killed and reported as failed (default: 900)")
    parser.add_argument("--dry-run", action="store_true", help="print the runs the sweeps would make and exit")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=_run)


def settings_from(args: argparse.Namespace, defaults: Settings) -> Settings:
    """``defaults`` with every option the user gave; a new model size brings its own context length."""
    from trainperf.bench.model import model_config

    chosen = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    if "model" in chosen and "seq_len" not in chosen:
        chosen["seq_len"] = model_config(chosen["model"]).seq_len
    return replace(defaults, **chosen)


def _run(args: argparse.Namespace) -> int:
    from trainperf.bench.runner import describe, run_sweeps
    from trainperf.bench.sweeps import default_settings, detect_machine, plan

    try:
        machine = detect_machine(args.device)
        settings = settings_from(args, default_settings(machine))
        sweep_plan = plan(settings, machine, tuple(dict.fromkeys(args.sweeps or SWEEPS)), args.out)
    except ValueError as exc:
        print(f"trainperf bench: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for line in describe(settings, machine, sweep_plan):
            print(line)
        for spec in sweep_plan.runs:
            print(f"  {spec.run_id}: {spec.strategy}, {spec.nprocs} process(es) x {spec.threads_per_process} "
                  f"thread(s), micro-batch {spec.micro_batch_size} x {spec.grad_accum_steps} accumulation, "
                  f"global batch {spec.global_batch_size}")
        return 0
    outcome = run_sweeps(sweep_plan, settings, machine, progress=not args.no_progress, timeout_s=args.timeout)
    if outcome.finished or outcome.too_big:
        from trainperf.reading.loading import load_runs
        from trainperf.summarize_cli import render, summarize

        try:  # the measured runs with their derived throughput and MFU
            runs = load_runs(*[str(spec.run_dir) for spec in outcome.finished + [s for s, _ in outcome.too_big]])
            print(render(summarize(runs), "markdown"))
        except DataError as exc:  # e.g. a failed run was another's baseline
            print(f"no summary of the runs: {exc}", file=sys.stderr)
    print(f"{len(outcome.finished)} runs written under {args.out}/ in {outcome.wall_s / 60:.1f} min"
          + (f"; {len(outcome.too_big)} did not fit in memory" if outcome.too_big else "")
          + (f"; {len(outcome.skipped)} skipped" if outcome.skipped else ""))
    for spec, error in outcome.failed:
        print(f"failed: {spec.run_id}: {error.splitlines()[0]}", file=sys.stderr)
    return 1 if outcome.failed else 0


def _shown(value: object) -> str:
    """A default as the option takes it: a tuple comma-separated."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _nonnegative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(part) for part in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from exc


SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "model": ({"choices": ("tiny", "small", "medium", "large")},
              "model size: tiny 0.1 M, small 3.2 M, medium 25 M, large 86 M parameters"),
    "seq_len": ({"type": _positive}, "context length in tokens (bytes) (default: the size's own: tiny 64, small 128, "
                                     "medium 256, large 512)"),
    "precision": ({"choices": ("fp32", "bf16")}, "fp32, or bf16 autocast"),
    "steps": ({"type": _positive}, "measured optimizer steps per run"),
    "warmup_steps": ({"type": _nonnegative}, "warm-up steps before them, excluded from the measurements"),
    "global_batch": ({"type": _positive}, "samples per optimizer step in the batch-size sweep and strong scaling"),
    "micro_batches": ({"type": _positive_list}, "comma-separated micro-batch sizes of the batch-size sweep, each "
                                                "dividing the global batch"),
    "per_process_batch": ({"type": _positive}, "micro-batch per process in weak scaling and the strategy sweep"),
    "processes": ({"type": _positive_list}, "comma-separated process counts of the scaling sweep (on GPU, runs "
                                            "needing more GPUs than present are skipped)"),
    "strategy_processes": ({"type": _positive}, "process count of the strategy sweep"),
    "threads": ({"type": _positive}, "intra-op (OpenMP) threads per process (default: 1 on CPU, where one process on "
                                     "one core stands for one device; on GPU the cores shared out among the processes)"),
    "repeats": ({"type": _positive}, "runs of each configuration, recorded as repeats of it (extra_repeat, "
                                     "extra_configuration) so that comparisons see run-to-run variance"),
    "learning_rate": ({"type": float}, "AdamW learning rate"),
    "seed": ({"type": int}, "seed of weights and data order"),
}
"""The options that set a field of :class:`~trainperf.bench.sweeps.Settings`: how argparse reads each, and its help
(the CPU and GPU defaults are added where it names none)."""
