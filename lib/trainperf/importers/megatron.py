"""Megatron-LM and Megatron-DeepSpeed logs: ``training_log``'s ``iteration N/ M | key: value |`` lines and the
argument dump (docs/importers.md, "What each log says").
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import REPORTED_CONVENTION
from trainperf.importers.records import REPORTED
from trainperf.importers.generic import GenericParser, Stack
from trainperf.importers.text import NUMBER, number, rank_prefix

NAN = math.nan
MEGATRON = Stack(
    "megatron", "a Megatron-LM / Megatron-DeepSpeed log",
    keys={"consumed samples": "samples_total", "consumed tokens": "tokens_total",
          "elapsed time per iteration (ms)": "interval_mean_s", "elapsed time per iteration (s)": "interval_mean_s",
          "global batch size": "global_batch_size", "lm loss": "loss", "loss": "loss",
          "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu", "TFLOPs": "tflops_per_gpu",
          "samples per second": "samples_per_s", "tokens per gpu per second (tgs)": "tokens_per_s_per_gpu",
          "tokens per GPU (tokens/s/GPU)": "tokens_per_s_per_gpu", "energy per GPU (J/iter/GPU)": "energy_per_gpu_j",
          "power per GPU (W/GPU)": "power_w_per_gpu"},
    start=r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|", time="elapsed time per iteration (ms)",
    anchors=("iteration", " ...", "padded vocab", "memory (MB)", "lm loss value", "Total training energy"),
    sniff=r"iteration\s+\d+\s*/\s*\d+\s*\|", origin=None, first=1,
    time_source="iteration times printed by the log", val_loss=rf"lm loss value:\s*(?P<loss>{NUMBER})",
    separator=r":\s*", closes="|")
_ARG = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*) \.{3,} (.*?)\s*$")
_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_MEMORY = re.compile(rf"memory \(MB\) \| allocated: (?:{NUMBER}) \| max allocated: ({NUMBER})")
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


class _Run(records.Run):
    """A run with the peak memory of its ``memory (MB)`` lines (GiB) and its total energy (J; NaN until printed)."""

    def __init__(self, line: int, config: dict[str, Any]) -> None:
        super().__init__(line, config, REPORTED)
        self.memory_gb = NAN
        self.total_energy_j = NAN


class MegatronParser(GenericParser):
    """The :data:`MEGATRON` stack's reader, with the argument dump, memory and energy lines and the records
    widened over a lone first iteration."""

    record_line = "iteration line"

    def __init__(self, path: Path, stack: Stack = MEGATRON) -> None:
        super().__init__(path, stack)
        self.args: dict[str, str] = {}
        self.vocab: int | None = None
        self.convention = "megatron"

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        if "| TFLOPs:" in lines[i]:
            self.convention = "megatron-deepspeed"
        return super().handle(lines, i, number_)

    def configure(self, line: str, number_: int) -> None:
        run = self.run
        if "Total training energy" in line and (match := _TOTAL_ENERGY.search(line)) and isinstance(run, _Run):
            run.total_energy_j = records.finite(number(match.group(1)) * 1e6)
        elif "memory (MB)" in line:
            match = _MEMORY.search(line)
            megabytes = number(match.group(1)) if match else NAN
            if 0 <= megabytes < math.inf and isinstance(run, _Run):
                run.memory_gb = max(0.0 if math.isnan(run.memory_gb) else run.memory_gb, megabytes / 1024.0)
        elif "padded vocab" in line and (match := _VOCAB.search(line)):
            self.vocab = int(match.group(1))
        else:
            match = _ARG.match(rank_prefix(line)[1])
            if match and (match.group(1) in _INT_ARGS or match.group(1) in _OTHER_ARGS):
                self.args[match.group(1)] = match.group(2)

    def new_run(self, line: int) -> _Run:
        """A run with the runs columns of the argument dump seen so far."""
        config: dict[str, Any] = {column: int(value) for arg, column in _INT_ARGS.items()
                                  if (value := self.args.get(arg, "")).isdigit() and int(value) > 0}
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
        return _Run(line, {**self.config, **config})

    def finish(self, run: _Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:  # type: ignore[override]
        table = run.records.table()  # widened and its energy made the job's in place: a run is measured once
        _first_iteration_alone(table)
        table[:, records.COLUMN["energy_j"]] *= float(config.get("gpus") or NAN)
        measured, steps = super().finish(run, config)
        if "reported_tflops_per_gpu" in measured:
            measured[REPORTED_CONVENTION] = self.convention
        if math.isfinite(run.memory_gb):
            measured["peak_memory_gb"] = max(run.memory_gb, measured.get("peak_memory_gb", 0.0))
        if "energy_j" in measured or "reported_power_w_per_gpu" in measured:
            measured["energy_counter"] = ENERGY_COUNTER
        if math.isfinite(run.total_energy_j):
            measured["extra_total_training_energy_j"] = run.total_energy_j
        return measured, steps


def _first_iteration_alone(table: np.ndarray) -> None:
    """Where a rank's first line was iteration 1 logged on its own (docs/importers.md, "What each log says"),
    widen its second record (in place) over the first's iterations and leave the first out (``excluded`` = 2)."""
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
