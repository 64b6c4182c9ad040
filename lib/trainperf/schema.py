"""The canonical runs table and the step intervals: every column, its type, unit, meaning and bounds.

Units live in column names (``_s`` seconds, ``_gb`` gigabytes of 2**30 bytes, ``_per_s`` per second of wall clock,
``_usd`` US dollars). Besides the canonical names a runs table may hold ``reported_<column>`` (a figure the source
printed itself, fractions as fractions, compared with trainperf's own), ``extra_<name>`` (anything else a source
carries: kept, never used by the formulas) and ``outside_<name>_s`` (:data:`OUTSIDE_PREFIX`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from typing import Literal

import numpy as np

Kind = Literal["str", "int", "float", "bool"]
Check = Literal["", "positive", "nonnegative", "count"]

MOST_RANKS = 1 << 20
"""The most devices (ranks, processes) a job may have: 1,048,576, ten times the largest jobs run today. A world
size beyond it is a damaged or hostile value, refused before anything is built for each rank."""
LONGEST_INTERVAL_S = 30 * 86400.0
"""The longest a step interval may take (s): 30 days (a step time of 1e300 s is refused, not divided into)."""
LONGEST_RUN_S = 366 * 86400.0
"""The longest a run's measured window (or a phase's total over it) may take (s): a year."""


@dataclass(frozen=True)
class Column:
    """A canonical column: name, value kind, meaning (with unit) and bounds: ``check`` (the least a value may be),
    ``most`` (the largest that can be true, in its unit), a finite number, a whole one for ``int`` (every reader
    checks them: :func:`out_of_bounds`)."""

    name: str
    kind: Kind
    doc: str
    check: Check = ""
    most: float = math.inf


def _cols(kind: Kind, check: Check, specs: dict[str, str], most: float = math.inf) -> list[Column]:
    return [Column(name, kind, doc, check, most) for name, doc in specs.items()]


LEAST: dict[str, tuple[float, bool, str]] = {
    "positive": (0.0, False, "must be greater than 0"),
    "nonnegative": (0.0, True, "must not be negative"),
    "count": (1.0, True, "must be a count of at least 1"),
}
"""Each ``check``: the least value, whether it is allowed itself, and what a value below it is told."""


def _bounds(column: Column, x: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Each bound of ``column``, in the order a value is told of them: where the numbers ``x`` break it, and
    what a value that does is told (e.g. ``must be greater than 0``)."""
    least, allowed, text = LEAST.get(column.check, (-math.inf, True, ""))
    with np.errstate(invalid="ignore"):  # only the bounds the column has: a reader checks every value
        return [(~np.isfinite(x), "must be a finite number"),
                *([((x < least) if allowed else (x <= least), text)] if column.check else []),
                *([(x > column.most, f"is more than {column.most:,.0f}, the most that can be true")]
                  if math.isfinite(column.most) else []),
                *([(np.isfinite(x) & (np.mod(x, 1) != 0), "must be a whole number")] if column.kind == "int" else [])]


def out_of_bounds(column: Column, values: np.ndarray) -> np.ndarray:
    """Which of ``values`` (numbers; NaN, missing, never does) break ``column``'s bounds (:func:`bound_problem`)."""
    x = np.asarray(values, dtype=float)
    return ~np.isnan(x) & reduce(np.logical_or, (bad for bad, _ in _bounds(column, x)))


def bound_problem(column: Column, value: float) -> str:
    """Why ``value`` (a present number) breaks ``column``'s bounds (``must be greater than 0``); else ''."""
    return next((text for bad, text in _bounds(column, np.array([value], dtype=float)) if bad[0]), "")


PHASE_MEANINGS: dict[str, str] = {
    "data": "waiting for batches", "h2d": "copying batches to the device", "forward": "forward passes",
    "loss": "loss computation", "backward": "backward passes", "optimizer": "optimizer steps",
    "comm": "gradient communication (the collectives' total time)",
    "comm_exposed": "communication not hidden behind computation",
    "wait_outside": "waiting in the collectives for another rank's work outside the steps (an evaluation or a "
                    "checkpoint on one rank), taken out of comm_s and comm_exposed_s",
    "validation": "validation",
    "compute": "forward + loss + backward + optimizer, where a source reports only their sum",
}
"""What each phase column ``<phase>_s`` times, in the order of the step intervals' columns."""


def _phases(names: Iterable[str], where: str, most: float) -> list[Column]:
    """The phase columns ``<name>_s`` of ``names`` (s), their meaning followed by ``where`` they are timed."""
    return _cols("float", "nonnegative", {f"{p}_s": f"{PHASE_MEANINGS[p]}{where} (s)" for p in names}, most)


IDENTITY: list[Column] = [
    *_cols("str", "", {
        "run_id": "unique identifier of the run",
        "experiment": "group of runs compared together (one scaling study, one sweep)",
        "platform": "accelerator, e.g. 'NVIDIA H100 SXM', 'AMD MI300X', 'cpu'",
        "model": "model name",
        "precision": "bf16, fp16, fp32, tf32 or fp8",
        "strategy": "single, ddp, fsdp, ...",
        "flops_convention": "6n, palm, megatron (megatron-2024, megatron-2023: earlier releases' forms), "
                            "megatron-deepspeed, torchtitan (torchtitan-2024), llmc or counted (optional; default: "
                            "palm when layers, width and seq_len are known, else 6n; see trainperf.flops)",
        "source": "provenance: where the numbers come from",
        "baseline_run_id": "optional: the run this one's scaling is measured against (default: fewest devices in the experiment)",
        "scaling_type": "strong (the same total work per optimizer step at every device count) or weak (the same "
                        "work per device); derived where not given from what the runs of a study hold constant "
                        "(trainperf.scaling.scaling_studies); given, the runs' series is one study of that type",
        "known_error": "an error the source of this row is known to have (text): shown beside the row",
    }),
    *_cols("float", "count", {
        "n_params": "parameters of the model (count)",
        "n_active_params": "parameters used per token (count): differs from n_params for mixture-of-experts "
                           "models; FLOPs use it when given",
    }),
    *_cols("int", "count", {
        "n_layers": "transformer layers",
        "d_model": "hidden width",
        "n_heads": "attention heads",
        "vocab_size": "vocabulary size (tokens)",
        "seq_len": "sequence length (tokens per sample)",
    }),
    *_cols("int", "count", {
        "nodes": "machines in the job",
        "gpus": "devices (GPUs, or processes on CPU) in the job",
    }, MOST_RANKS),
    *_cols("int", "count", {
        "tensor_parallel": "tensor-parallel degree (default 1)",
        "pipeline_parallel": "pipeline-parallel degree (default 1)",
        "context_parallel": "context- (sequence-) parallel degree (default 1)",
        "expert_parallel": "expert-parallel degree (default 1; experts are spread over data-parallel ranks)",
        "micro_batch_size": "samples per device per forward pass",
        "grad_accum_steps": "micro-batches per optimizer step",
        "global_batch_size": "samples per optimizer step, all devices together",
        "steps": "optimizer steps in the measured window",
        "head_dim": "width of one attention head (query, key and value) (default d_model / n_heads; Megatron-LM's "
                    "kv_channels; megatron and torchtitan FLOPs count attention over n_heads x head_dim, which "
                    "differs from d_model in some models: Qwen3 2 x d_model)",
        "num_query_groups": "key/value heads under grouped-query attention (default: n_heads; megatron FLOPs)",
        "ffn_hidden_size": "width of the MLP's hidden layer (default 4 x d_model; megatron FLOPs)",
        "num_experts": "experts per mixture-of-experts layer (megatron FLOPs: every layer is one)",
        "moe_router_topk": "experts each token is routed to (Megatron-LM's default 2; megatron FLOPs)",
        "moe_ffn_hidden_size": "hidden width of one expert's MLP (default ffn_hidden_size; megatron FLOPs)",
    }),
    *_cols("bool", "", {
        "swiglu": "the MLP is a gated linear unit (SwiGLU: three matrices instead of two; megatron FLOPs)",
        "tied_embeddings": "the output head shares the token embedding's weights (torchtitan FLOPs then leave "
                           "nothing out of n_params; default false)",
        "activation_checkpointing": "activations recomputed in backward (HFU counts it)",
        "compiled": "the model ran compiled (torch.compile): runs that differ in it are no repeats",
        "measured": "false for a row its source projected or estimated instead of measuring: shown and marked, "
                    "never headlined, fitted or projected from (empty: measured)",
        "oversubscribed": "more busy threads than cores on a host of the run, or a load average above its core "
                          "count at start (recorded by the profiler): the run measures contention for the CPU; "
                          "shown and marked, never headlined, fitted or projected from",
    }),
    Column("price_per_gpu_hour", "float", "rental price of one device for one hour (USD)", "nonnegative"),
    Column("price_per_kwh", "float", "price of one kilowatt-hour of electricity (USD)", "nonnegative"),
    Column("device_memory_gb", "float", "memory of one device (GiB): what the profiler read (a GPU's memory as the "
                                        "driver offers it, the host's on CPU), else the datasheet's "
                                        "(trainperf.hardware)", "positive"),
    Column("flops_per_token", "float", "model FLOPs per token, forward + backward (override of the convention)", "positive"),
    Column("flops_per_sample", "float", "model FLOPs per sample, forward + backward, as counted by "
                                        "the StepProfiler in one step (the counted convention)", "positive"),
    Column("peak_tflops_per_gpu", "float",
           "dense peak TFLOP/s of one device at the run's precision (override; e.g. a measured CPU matmul peak)",
           "positive"),
]

MEASUREMENTS: list[Column] = [
    Column("elapsed_s", "float", "wall clock of the measured window, slowest rank (s)", "positive", LONGEST_RUN_S),
    Column("tokens", "float", "tokens processed in the measured window, all devices", "nonnegative"),
    Column("samples", "float", "samples processed in the measured window, all devices", "nonnegative"),
    Column("tokens_per_s", "float", "published rate where no elapsed time is known (tokens/s, all devices)", "positive"),
    Column("samples_per_s", "float", "published rate where no elapsed time is known (samples/s, all devices)", "positive"),
    Column("step_time_s", "float", "published wall time of one optimizer step (s)", "positive", LONGEST_INTERVAL_S),
    *_phases(("data", "h2d", "forward", "loss", "backward", "optimizer", "compute", "comm", "comm_exposed",
              "wait_outside", "validation"), ", mean over ranks of each rank's total", LONGEST_RUN_S),
    *_cols("float", "nonnegative", {
        "peak_memory_gb": "peak device memory, the largest of any rank (GiB): the CUDA allocator's peak of "
                          "allocated memory on GPU, the peak resident set on CPU",
        "peak_memory_mean_gb": "mean over ranks of each rank's peak_memory_gb (GiB)",
        "reserved_memory_gb": "peak memory the GPU allocator reserved from the driver (its cache included), the "
                              "largest of any rank (GiB)",
        "reserved_memory_mean_gb": "mean over ranks of each rank's reserved_memory_gb (GiB)",
        "host_memory_gb": "resident set of a rank's process on its host, the largest of any rank (GiB)",
        "host_memory_mean_gb": "mean over ranks of each rank's largest host_memory_gb (GiB)",
        "energy_j": "energy the devices used in the measured window, all ranks (J): GPUs' NVML counters, or the "
                    "CPU packages of each host (RAPL)",
        "mean_rank_elapsed_s": "mean over ranks of each rank's elapsed time (s); elapsed_s is the slowest rank's",
    }),
    Column("peak_method", "str", "how a peak_tflops_per_gpu given in the run was got: a CPU's matmul rate measured "
                                 "on this machine, quiet or under load, cached or not (trainperf.profiler.cpu_peak)"),
    Column("wait_outside_for", "str", "whose work outside the steps wait_outside_s waited for: \"rank 0's "
                                      "validation\""),
    Column("train_loss", "float", "training loss at the end of the window"),
    Column("val_loss", "float", "validation loss at the end of the window"),
    Column("energy_counter", "str", "what measured energy_j (nvml, rapl, a log's own figures), or 'none: ' and why "
                                    "nothing did"),
    *_cols("int", "nonnegative", {
        "alloc_retries": "times a GPU allocator freed its cache to retry a failed allocation, all ranks and steps "
                         "(warm-up included): memory pressure",
        "ooms": "out-of-memory errors, all ranks and steps (warm-up included; those the training caught included)",
    }),
    Column("fits", "bool", "false: a step ran out of memory (the configuration does not fit the device); true: the "
                           "profiler watched every rank for it and none did; empty: not known"),
    Column("ranks", "int", "ranks that reported measurements", "count", MOST_RANKS),
    Column("slowest_rank", "int", "rank whose elapsed time is elapsed_s", "nonnegative"),
    Column("rank_imbalance", "float", "slowest rank's elapsed time / fastest rank's (1 = balanced)", "positive"),
    Column("complete", "bool", "every rank reported every step (False: a rank stopped early)"),
    Column("warmup_steps", "int", "steps excluded from the window as warm-up", "nonnegative"),
    Column("warmup_rule", "str", "how warmup_steps was chosen: mser (found from the job's step times, never fewer "
                                 "than the configured warm-up) or fixed (the configured warm-up: asked for, or too "
                                 "few steps to judge); given in a sidecar, the rule to use (trainperf.steady_state)"),
    Column("wall_s", "float", "wall clock from the profiler's start to close(), mean over ranks (s)", "positive"),
    Column("goodput", "float", "productive step time / wall clock, all ranks together (fraction; trainperf.goodput)",
           "nonnegative"),
    *_cols("float", "nonnegative", {
        "productive_s": "time of all steps but warmup_excess_s, mean over ranks (s)",
        "warmup_excess_s": "warm-up steps' time beyond as many steps at the measured mean step time, mean over "
                           "ranks (s)",
        "startup_s": "the profiler's start to the first step, phases outside the steps left out, mean over ranks (s)",
        "unaccounted_s": "between the first step's start and the last step's end, in no step and no phase outside "
                         "the steps (a step whose code raised), mean over ranks (s)",
        "after_steps_s": "the last step's end to close(), phases outside the steps left out, mean over ranks (s)",
    }),
]

DERIVED: list[Column] = [
    *_cols("float", "", {
        "data_parallel": "data-parallel degree: gpus / (tensor_parallel x pipeline_parallel x context_parallel)",
        "global_batch_size": "samples per optimizer step: micro_batch_size x grad_accum_steps x data_parallel "
                             "where not given",
        "tokens_per_s": "throughput, all devices (tokens/s)",
        "tokens_per_s_per_gpu": "throughput per device (tokens/s)",
        "samples_per_s": "throughput, all devices (samples/s)",
        "samples_per_s_per_gpu": "throughput per device (samples/s)",
        "step_time_s": "wall time of one optimizer step (s)",
        "tokens_per_day": "tokens processed in 24 h at this throughput",
        "samples_per_day": "samples processed in 24 h at this throughput",
        "flops_per_token": "model FLOPs per token, forward + backward",
    }),
    Column("flops_convention_used", "str", "the formula behind flops_per_token (a trainperf.flops convention) or given"),
    *_cols("float", "", {
        "tflops_total": "achieved model TFLOP/s, all devices",
        "tflops_per_gpu": "achieved model TFLOP/s per device",
        "peak_tflops_per_gpu": "dense peak TFLOP/s of one device at the run's precision",
    }),
    Column("peak_source", "str", "where peak_tflops_per_gpu comes from"),
    *_cols("float", "", {
        "mfu": "model FLOPs utilisation: tflops_per_gpu / peak_tflops_per_gpu (fraction)",
        "hfu": "hardware FLOPs utilisation: mfu x 4/3 with activation recomputation (fraction)",
    }),
    *_cols("str", "", {
        "scaling_study": "the runs scaled together: the experiment, and where it holds several studies what its "
                         "runs hold constant and the settings that tell its series apart (e.g. 'sweep (global "
                         "batch 8)', 'sweep (8 per device)'); a run in two studies: the strong one, whose figures "
                         "the scaling columns give",
        "second_scaling_study": "the weak-scaling study a run is in besides its strong scaling_study (e.g. the "
                                "1-device baseline of both)",
        "baseline_run_id": "run this one's scaling is measured against (with its repeats: their mean)",
        "scaling_basis": "throughput, or elapsed (runs assumed to do equal work)",
    }),
    *_cols("float", "", {
        "scaling_multiplier": "throughput / baseline throughput (x)",
        "scaling_efficiency": "scaling_multiplier / (gpus / baseline gpus) (fraction)",
        "serial_fraction": "Karp-Flatt experimentally determined serial fraction",
        "comm_overhead": "exposed communication / elapsed (fraction of wall time)",
        "compute_comm_ratio": "compute time / communication time (x)",
        "gpu_hours": "device-hours of the measured window",
        "cost_usd": "gpu_hours x price_per_gpu_hour (USD)",
        "energy_j_per_token": "energy_j / tokens (J per token)",
        "power_w_per_gpu": "mean power of one device over the measured window: energy_j / (gpus x elapsed_s) (W)",
        "energy_kwh": "energy_j in kilowatt-hours",
        "energy_cost_usd": "energy_kwh x price_per_kwh (USD)",
        "energy_cost_usd_per_million_tokens": "energy_cost_usd per million tokens (USD)",
        "device_memory_gb": "memory of one device (GiB): as given or recorded, else the datasheet's",
        "memory_headroom_gb": "device_memory_gb - peak_memory_gb: memory left on the fullest device (GiB)",
        "cost_efficiency": "baseline cost per unit of work / this run's (fraction; = efficiency at equal price)",
    }),
    Column("notes", "str", "why derived values are empty or doubtful, '; '-separated"),
]

STEP_INTERVALS: list[Column] = [
    Column("run_id", "str", "the run the interval belongs to"),
    Column("rank", "int", "global rank that recorded the interval", "nonnegative"),
    Column("step", "int", "last optimizer step the interval covers, numbered as its source numbers them"),
    Column("n_steps", "float", "optimizer steps the interval covers: 1 for a profiler step, N for a log line that "
                               "reports every N steps; NaN where unknown (the first line of an excerpt)", "positive"),
    Column("node", "str", "host the rank ran on (empty where unknown)"),
    Column("warmup", "bool", "the interval belongs to the warm-up, not to the measured window"),
    Column("includes_evaluation", "bool", "the interval's time includes an evaluation its source did not time on "
                                          "its own: left out of the measured window"),
    Column("start_s", "float", "start of the interval (s since the rank's clock started: the profiler's creation, "
                               "or a log's first timed step); NaN where unknown"),
    Column("step_s", "float", "wall time of the interval, all its n_steps steps (s)", "positive", LONGEST_INTERVAL_S),
    *_phases(PHASE_MEANINGS, " in the interval", LONGEST_INTERVAL_S),
    Column("tokens", "float", "tokens this rank processed in the interval, every micro-step counted (a log that "
                              "prints the job's gives each printing rank its share)", "nonnegative"),
    Column("samples", "float", "samples this rank processed in the interval (as tokens)", "nonnegative"),
    Column("micro_steps", "float", "micro-batches per optimizer step (gradient accumulation)", "count"),
    Column("loss", "float", "training loss at the end of the interval"),
    Column("peak_memory_gb", "float", "peak device memory at the end of the interval (GiB): on GPU the allocator's "
                                      "peak so far (or the interval's own, with StepProfiler(reset_peak_memory=True)); "
                                      "on CPU the peak resident set so far", "nonnegative"),
    Column("reserved_memory_gb", "float", "peak memory the GPU allocator held from the driver, as peak_memory_gb "
                                          "(GiB)", "nonnegative"),
    Column("host_memory_gb", "float", "resident set of the rank's process at the end of the interval (GiB)",
           "nonnegative"),
    Column("alloc_retries", "float", "times the GPU allocator freed its cache to retry a failed allocation in the "
                                     "interval", "nonnegative"),
    Column("ooms", "float", "out-of-memory errors the GPU allocator raised in the interval (those caught "
                            "included)", "nonnegative"),
    Column("energy_j", "float", "energy the rank's device used in the interval (J): its GPU's NVML counter, or "
                                "the CPU packages of its host (RAPL, on the host's first rank only)", "nonnegative"),
]
"""The step-intervals table, the one shape every per-step input is read into: a row per interval of training one rank
recorded (a profiler step: one optimizer step; a log line that reports every N steps: N; a per-rank table of epoch
totals: an epoch)."""

STEP_INTERVAL_COLUMNS: tuple[str, ...] = tuple(c.name for c in STEP_INTERVALS)

STEP_PHASE_COLUMNS: tuple[str, ...] = tuple(c.name for c in STEP_INTERVALS
                                            if c.name.endswith("_s") and c.name not in ("start_s", "step_s"))
"""Phase seconds of an interval: the runs columns of the same names hold the mean over ranks of each rank's total."""

INPUT_COLUMNS: dict[str, Column] = {c.name: c for c in IDENTITY + MEASUREMENTS}
DERIVED_COLUMNS: dict[str, Column] = {c.name: c for c in DERIVED}

REQUIRED: tuple[str, ...] = ("run_id", "gpus")
"""Columns every runs table must have. A row also needs a measure of speed unless ``fits`` is false: elapsed_s with
tokens or samples (or steps and global_batch_size), a published tokens_per_s, samples_per_s or step_time_s, or
elapsed_s alone (the runs of its experiment then compared as doing equal work)."""

PHASES: tuple[str, ...] = ("data", "h2d", "forward", "loss", "backward", "optimizer", "comm", "validation")
"""Phases of a training step, in order; the column of phase P is ``P_s``."""

COMPUTE_PHASES: tuple[str, ...] = ("forward", "loss", "backward", "optimizer")

SCALING_TYPES = ("strong", "weak")

SIDECAR_SUFFIX = ".trainperf.yaml"
"""``train.log``'s sidecar is ``train.log.trainperf.yaml``: what the file does not say, or its columns' mapping."""
OUTSIDE_PREFIX = "outside_"
"""``outside_<name>_s``: seconds of the phase ``name`` timed outside the steps (a checkpoint, a validation run),
mean over ranks; part of a run's goodput breakdown (trainperf.goodput)."""
PREFIXES: tuple[str, ...] = ("reported_", "extra_", OUTSIDE_PREFIX)

STEP_TIME_ANOMALIES = "extra_step_time_anomalies"
"""Column of the sentences (``; ``-separated) on a log's step times joined, set aside or far out
(``trainperf.importers.records``); ``derive`` notes each."""
APPROXIMATE_INPUTS = "extra_approximate"
"""Column of what a source gave only rounded, in words (``n_params from the printed 0.12M, rounded: up to
4.2 % off``, ``trainperf.importers``); ``derive`` notes it as approximate."""
STEPS_SET_ASIDE = "extra_steps_set_aside"
"""Column of how many of a log's steps had a time that could not be used (negative or zero, with nothing to join it
with), left out of its throughput; set with :data:`STEP_TIME_ANOMALIES`."""

UNITS: dict[str, str] = {"_per_s": "", "_s": "s", "_gb": "GiB"}
"""The unit each column-name suffix declares, longest suffix first (a rate, ``_per_s``, names its unit in words)."""


def unit(name: str) -> str:
    """The unit ``name``'s suffix declares (:data:`UNITS`: ``s``, ``GiB``); "" for none."""
    return next((shown for suffix, shown in UNITS.items() if name.endswith(suffix)), "")


PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")


CLAIMS_COLUMNS: tuple[str, ...] = ("report", "claim", "source", "kind", "run_id", "reference_run_id", "metric",
                                   "printed")
"""Columns of a claims file (what a hand-written report concluded, checked by :mod:`trainperf.report.claims`), which
a data folder may hold beside its runs tables: it is not read as runs."""
