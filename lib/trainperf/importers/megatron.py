"""Megatron-LM and Megatron-DeepSpeed logs: ``iteration N/ M | ...`` lines.

``training_log`` prints, every ``log_interval`` iterations, one line of
``key: value |`` fields::

     [2025-01-15 10:00:07.123456] iteration       20/    1000 | consumed samples:         2560 |
     elapsed time per iteration (ms): 1302.4 | throughput per GPU (TFLOP/s/GPU): 412.3 |
     learning rate: 2.997E-05 | global batch size:   128 | lm loss: 7.211433E+00 | loss scale: 1.0 |
     grad norm: 1.873 | number of skipped iterations:   0 | number of nan iterations:   0 |

(one line in the log). Megatron-DeepSpeed adds ``consumed tokens``, ``actual
seqlen``, ``samples per second``, ``tokens per gpu per second (tgs)`` and
``TFLOPs``; older forks print ``elapsed time per iteration (s)``.

Conversions:

* ``elapsed time per iteration`` is the mean over the iterations since the
  previous line (the ``interval-time`` timer divided by the iterations in the
  interval), so a line covers ``n = N - N_prev`` iterations and
  ``n · time`` seconds. The first line of a log covers unknown iterations
  (a resumed run counts on from its checkpoint) unless it is iteration 1.
* Recent Megatron-LM also logs iteration 1 alone without resetting its
  timers: the next line's mean then covers iterations 1..N. When the first
  line is iteration 1, or the gap to the second line differs from the next
  gap, the second line is taken to cover the first line's iterations too
  (and the first line, contained in it, is left out).
* ``samples`` of a line: the change in ``consumed samples`` (exact under
  batch-size ramp-up), else ``n · global batch size``; ``tokens``: the change
  in ``consumed tokens`` where printed.
* ``throughput per GPU (TFLOP/s/GPU)`` (Megatron-LM: model FLOPs from
  ``num_floating_point_operations``, the ``megatron`` convention) and
  ``TFLOPs`` (Megatron-DeepSpeed: eq. 3 of Narayanan et al. with the
  recomputation factor 4 under activation checkpointing, i.e. hardware FLOPs;
  the ``megatron-deepspeed`` convention) are kept as ``reported_tflops_per_gpu``
  with the convention in ``extra_reported_flops_convention``. Megatron-LM
  prints no release, and its formula changed between releases
  (``megatron-2024``, ``megatron-2023``): the figures are compared under the
  form that reproduces them (``trainperf.importers.reported``);
  ``samples per second`` as ``reported_samples_per_s``; ``tgs`` (or
  ``tokens per GPU (tokens/s/GPU)``) as ``reported_tokens_per_s_per_gpu``.
* AMD's Primus prints Megatron's line with ``current/average`` pairs
  (``elapsed time per iteration (ms): 13100.0/13240.9``: the interval's mean,
  then a running mean of the recent ones): the current is read.
* The argument dump (``  seq_length ........ 2048``) gives ``gpus``
  (``world_size``), the parallel degrees (``tensor_model_parallel_size``,
  ``pipeline_model_parallel_size``, ``context_parallel_size``,
  ``expert_model_parallel_size``), the shape the ``megatron`` FLOPs use
  (``kv_channels`` as ``head_dim``, ``ffn_hidden_size``, ``swiglu``, ``num_query_groups`` under
  ``group_query_attention``, ``num_experts``, ``moe_router_topk``,
  ``moe_ffn_hidden_size``), ``seq_len``, ``n_layers``, ``d_model``, ``n_heads``,
  ``micro_batch_size``, ``global_batch_size``, ``grad_accum_steps`` (global
  batch / (micro batch · data-parallel size); the data-parallel size printed,
  else ``world_size / (tensor · pipeline · context parallel)``; a sidecar's
  sizes give it through ``derive``), ``precision`` (``fp8``,
  ``bf16``, ``fp16``, else ``fp32``) and ``activation_checkpointing``
  (``recompute_granularity full`` or ``checkpoint_activations``); ``> padded
  vocab (... new size: V)`` gives ``vocab_size``; ``memory (MB) | ... max
  allocated: X`` gives ``peak_memory_gb = X / 1024``; ``lm loss value: X``
  (validation) gives ``val_loss``.
* With ``--log-energy`` (Megatron-LM's ``EnergyMonitor``, NVML's energy
  counters all-reduced over the GPUs), each line adds ``energy per GPU
  (J/iter/GPU): E |`` and ``power per GPU (W/GPU): P |``, where ``E`` is the
  job's energy since the previous line divided by its iterations and the
  world size: the line's interval used ``E · n · gpus`` joules, its
  ``energy_j``; ``P`` is kept as ``reported_power_w_per_gpu``. The run's
  closing ``Total training energy (GPU): X MJ`` (every iteration, the first
  ones too) is kept as ``extra_total_training_energy_j``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import REPORTED_CONVENTION, LineFormat, rate_from_reported
from trainperf.importers.text import NUMBER, LineError, field_number, number, rank_prefix, step_seconds, whole

NAN = math.nan
REPORTED = ("tflops_per_gpu", "samples_per_s", "tokens_per_s_per_gpu", "power_w_per_gpu")
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_FIELDS = re.compile(r"\| (consumed samples|consumed tokens|elapsed time per iteration \((?:ms|s)\)|"
                     r"global batch size|lm loss|loss|throughput per GPU \(TFLOP/s/GPU\)|TFLOPs|samples per second|"
                     r"tokens per gpu per second \(tgs\)|tokens per GPU \(tokens/s/GPU\)|energy per GPU \(J/iter/GPU\)|power per GPU \(W/GPU\)): "
                     r"([^|]*)(?=\|)")
"""The fields read from an iteration line (the others are ignored)."""
_ARG = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*) \.{3,} (.*?)\s*$")
_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_MEMORY = re.compile(rf"memory \(MB\) \| allocated: (?:{NUMBER}) \| max allocated: ({NUMBER})")
_VAL_LOSS = re.compile(rf"lm loss value:\s*({NUMBER})")
_TOTAL_ENERGY = re.compile(rf"Total training energy \(GPU\): ({NUMBER}) MJ")
ENERGY_COUNTER = "Megatron-LM's --log-energy (NVML energy counters of every GPU)"
"""``energy_counter`` of a run whose lines print its energy."""
_INT_ARGS = {"world_size": "gpus", "seq_length": "seq_len", "num_layers": "n_layers", "hidden_size": "d_model",
             "num_attention_heads": "n_heads", "kv_channels": "head_dim", "micro_batch_size": "micro_batch_size",
             "global_batch_size": "global_batch_size", "padded_vocab_size": "vocab_size",
             "tensor_model_parallel_size": "tensor_parallel", "pipeline_model_parallel_size": "pipeline_parallel",
             "context_parallel_size": "context_parallel", "expert_model_parallel_size": "expert_parallel",
             "ffn_hidden_size": "ffn_hidden_size", "num_experts": "num_experts",
             "moe_router_topk": "moe_router_topk", "moe_ffn_hidden_size": "moe_ffn_hidden_size"}
_OTHER_ARGS = ("bf16", "fp16", "fp8", "recompute_granularity", "checkpoint_activations", "data_parallel_size",
               "swiglu", "group_query_attention", "num_query_groups")


def parse_iteration(line: str) -> tuple[Any, ...]:
    """``(rank, iteration, seconds per iteration, consumed samples, consumed
    tokens, global batch size, loss, energy per GPU per iteration (J),
    tflops_per_gpu, samples_per_s, tokens_per_s_per_gpu, power_w_per_gpu)`` of
    an iteration line (NaN where absent; rank None without a launcher prefix)."""
    rank, body = rank_prefix(line)
    match = _ITERATION.search(body)
    if match is None:
        raise LineError("no 'iteration N/ M |' field")
    if _ITERATION.search(body, match.end()):
        raise LineError("two records on one line (interleaved output of several processes)")
    rest = body[match.end() - 1:].rstrip()
    fields = dict(_FIELDS.findall(rest))  # the fields a '|' ends: a last one without it may be cut, and is not read
    if "elapsed time per iteration (ms)" in fields:
        seconds = _number(fields, "elapsed time per iteration (ms)") / 1000.0
    else:
        seconds = _number(fields, "elapsed time per iteration (s)")
    if math.isnan(seconds):
        cut = "" if rest.endswith("|") else "truncated (no final '|'): "
        raise LineError(f"{cut}no 'elapsed time per iteration' field")
    step_seconds(seconds, "elapsed time per iteration")
    loss = _number(fields, "lm loss")
    tflops = _number(fields, "throughput per GPU (TFLOP/s/GPU)")
    return (rank, whole(match.group(1), "iteration"), seconds,
            _count(fields, "consumed samples"), _count(fields, "consumed tokens"),
            _count(fields, "global batch size"), loss if not math.isnan(loss) else _number(fields, "loss"),
            _number(fields, "energy per GPU (J/iter/GPU)"),
            tflops if not math.isnan(tflops) else _number(fields, "TFLOPs"), _number(fields, "samples per second"),
            _first(fields, "tokens per gpu per second (tgs)", "tokens per GPU (tokens/s/GPU)"),
            _number(fields, "power per GPU (W/GPU)"))


def _number(fields: dict[str, str], key: str) -> float:
    """The number of field ``key`` (NaN if absent)."""
    return field_number(key, fields.get(key))


def _first(fields: dict[str, str], *keys: str) -> float:
    """The number of the first of ``keys`` the line prints (NaN if none)."""
    return next((_number(fields, key) for key in keys if key in fields), NAN)


def _count(fields: dict[str, str], key: str) -> float:
    value = _number(fields, key)
    if not math.isnan(value) and not (math.isfinite(value) and value >= 0 and value.is_integer()):
        raise LineError(f"{key}: {value:g} is not a whole number")
    return value


class _Run(records.Run):
    """A run with the peak memory of its ``memory (MB)`` lines (NaN until
    one is printed), its total energy (J; NaN until printed), and whether its
    records have been widened and their energy made the job's."""

    def __init__(self, line: int, config: dict[str, Any]) -> None:
        super().__init__(line, config, REPORTED)
        self.memory_gb = NAN
        self.total_energy_j = NAN
        self.widened = False


class MegatronParser(records.IntervalParser[_Run]):
    anchors = ("iteration", " ...", "padded vocab", "memory (MB)", "lm loss value", "Total training energy")
    start = _ITERATION

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.args: dict[str, str] = {}
        self.vocab: int | None = None
        self.convention = "megatron"

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if "iteration" in line and _ITERATION.search(line):
            if "| TFLOPs:" in line:
                self.convention = "megatron-deepspeed"
            return self.read_record(lines, i, number_, parse_iteration, "iteration line")
        if "Total training energy" in line:
            match = _TOTAL_ENERGY.search(line)
            if match and self.run is not None:
                self.run.total_energy_j = records.finite(number(match.group(1)) * 1e6)
        elif "lm loss value" in line:
            match = _VAL_LOSS.search(line)
            if match and self.run is not None:
                self.run.val_loss = records.finite(number(match.group(1)))
        elif "memory (MB)" in line:
            match = _MEMORY.search(line)
            megabytes = number(match.group(1)) if match else NAN
            if 0 <= megabytes < math.inf and self.run is not None:
                self.run.memory_gb = max(_nan_to(self.run.memory_gb, 0.0), megabytes / 1024.0)
        elif "padded vocab" in line:
            match = _VOCAB.search(line)
            if match:
                self.vocab = int(match.group(1))
        else:
            match = _ARG.match(rank_prefix(line)[1])
            if match and (match.group(1) in _INT_ARGS or match.group(1) in _OTHER_ARGS):
                self.args[match.group(1)] = match.group(2)
        return 1

    def new_run(self, line: int) -> _Run:
        return _Run(line, self._config())

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, iteration, seconds, consumed, consumed_tokens, batch, loss, energy, *reported = parsed
        rank = self.rank_of(label, iteration)
        run = self.run_at(line, rank, iteration)
        previous = run.previous.get(rank)
        if previous is records.BROKEN:
            n = samples = tokens = NAN
        elif previous is None:  # only a first line at iteration 1 says where its interval starts
            n = 1.0 if iteration == 1 else NAN
            samples = consumed if iteration == 1 else NAN
            tokens = consumed_tokens if iteration == 1 else NAN
        else:
            n = float(iteration - previous[0])
            samples = consumed - previous[1] if math.isfinite(consumed - previous[1]) else n * batch
            tokens = consumed_tokens - previous[2]
            if samples < 0 or tokens < 0:
                run.previous[rank] = records.BROKEN
                return "consumed samples or tokens went down since the previous line"
        run.previous[rank] = (iteration, consumed, consumed_tokens)
        if math.isfinite(batch):
            run.config["global_batch_size"] = int(batch)
        duration = n * seconds
        # energy per GPU over the line's iterations; the job's once the GPUs are known (finish)
        run.records.add((rank, iteration, n, duration, duration, samples, tokens, loss, NAN, 0.0, energy * n,
                         *reported))
        return ""

    def _config(self) -> dict[str, Any]:
        """Runs columns from the argument dump seen so far."""
        config: dict[str, Any] = {}
        for arg, column in _INT_ARGS.items():
            value = self.args.get(arg)
            if value is not None and value.isdigit() and int(value) > 0:
                config[column] = int(value)
        if self.vocab is not None:
            config["vocab_size"] = self.vocab
        args = self.args
        if args.get("fp8", "None") not in ("None", "False"):
            config["precision"] = "fp8"
        elif args.get("bf16") == "True":
            config["precision"] = "bf16"
        elif args.get("fp16") == "True":
            config["precision"] = "fp16"
        elif "bf16" in args and "fp16" in args:
            config["precision"] = "fp32"
        granularity = args.get("recompute_granularity")
        if granularity not in (None, "None"):
            config["extra_recompute_granularity"] = granularity
        if args.get("swiglu") in ("True", "False"):
            config["swiglu"] = args["swiglu"] == "True"
        groups = args.get("num_query_groups", "")
        if args.get("group_query_attention") == "True" and groups.isdigit() and int(groups) > 0:
            config["num_query_groups"] = int(groups)
        if "recompute_granularity" in args or "checkpoint_activations" in args:
            config["activation_checkpointing"] = (granularity == "full"
                                                  or args.get("checkpoint_activations") == "True")
        dp_text = args.get("data_parallel_size", "")
        model_parallel = math.prod(config.get(k, 1) for k in ("tensor_parallel", "pipeline_parallel",
                                                              "context_parallel"))
        world = config.get("gpus", 0)
        dp = int(dp_text) if dp_text.isdigit() else world // model_parallel if world % model_parallel == 0 else 0
        micro, batch = config.get("micro_batch_size"), config.get("global_batch_size")
        if dp and micro and batch and batch % (dp * micro) == 0:
            config["grad_accum_steps"] = batch // (dp * micro)
        return config

    def finish(self, run: _Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        if not run.widened:
            table = run.records.table()
            _first_iteration_alone(table)
            table[:, records.COLUMN["energy_j"]] *= float(config.get("gpus") or NAN)
            run.widened = True
        measured, steps = records.aggregate(run.records, config)
        measured["extra_time_source"] = "iteration times printed by the log"
        if "reported_tflops_per_gpu" in measured:
            measured[REPORTED_CONVENTION] = self.convention
        if math.isfinite(run.memory_gb):
            measured["peak_memory_gb"] = max(run.memory_gb, measured.get("peak_memory_gb", 0.0))
        if math.isfinite(run.val_loss):
            measured["val_loss"] = run.val_loss
        if "energy_j" in measured or "reported_power_w_per_gpu" in measured:
            measured["energy_counter"] = ENERGY_COUNTER
        if math.isfinite(run.total_energy_j):
            measured["extra_total_training_energy_j"] = run.total_energy_j
        rate_from_reported(measured, config)
        return measured, steps


def _first_iteration_alone(table: np.ndarray) -> None:
    """Where a rank's first line was iteration 1 logged on its own (recent
    Megatron-LM), its second line's mean covers the first line's iterations
    too: widen that record (in place) and leave the first out (``excluded`` = 2)."""
    c = records.COLUMN
    for rank in np.unique(table[:, c["rank"]]):
        rows = np.flatnonzero(table[:, c["rank"]] == rank)
        if len(rows) < 2:
            continue
        first, second = table[rows[0]], table[rows[1]]
        gap = second[c["step"]] - first[c["step"]]
        if not (first[c["step"]] == 1 or (len(rows) > 2 and table[rows[2], c["step"]] - second[c["step"]] != gap)):
            continue
        per_iteration = second[c["seconds"]] / second[c["n_steps"]]
        joules_per_iteration = second[c["energy_j"]] / second[c["n_steps"]]
        second[c["n_steps"]] += first[c["n_steps"]]
        second[c["seconds"]] = second[c["weight"]] = second[c["n_steps"]] * per_iteration
        second[c["energy_j"]] = second[c["n_steps"]] * joules_per_iteration
        second[c["samples"]] += first[c["samples"]]
        second[c["tokens"]] += first[c["tokens"]]
        first[c["excluded"]] = 2.0


def _nan_to(value: float, default: float) -> float:
    return default if math.isnan(value) else value


class Megatron(LineFormat):
    name = "megatron"
    title = "a Megatron-LM / Megatron-DeepSpeed log"
    patterns = (_ITERATION,)
    parser_class = MegatronParser
