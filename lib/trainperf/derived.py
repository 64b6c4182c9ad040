"""``derive``: every derived metric of a runs table, from its inputs only, by the formulas of README.md, "Metrics"
(scaling per experiment: ``trainperf.scaling``). A value whose inputs are missing stays NaN and the row's ``notes``
says why (the inputs it lacks, :data:`NEEDS`, or a reason of its own); a figure that cannot be true is emptied and
noted by ``trainperf.invariants``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from trainperf import flops as flops_mod
from trainperf.errors import DataWarning
from trainperf.hardware import cpu_rows, dense_peak_tflops, device_memory, is_cpu
from trainperf.invariants import check_runs
from trainperf.scaling import SCALING_COLUMNS, add_scaling
from trainperf.schema import (APPROXIMATE_INPUTS, COMPUTE_PHASES, DERIVED_COLUMNS, INPUT_COLUMNS, STEP_TIME_ANOMALIES,
                              STEPS_SET_ASIDE)

SECONDS_PER_DAY = 86_400.0
JOULES_PER_KWH = 3.6e6
PARALLEL_DEGREES = ("tensor_parallel", "pipeline_parallel", "context_parallel")
"""Model-parallel degrees that divide the devices into data-parallel replicas."""
RATE_TOLERANCE = 0.02
"""Relative difference between a published and a recomputed rate that is noted."""
GIVEN_PEAK = "given in the run (peak_tflops_per_gpu)"
"""``peak_source`` of a peak given in the run (e.g. one measured on a CPU), not from the datasheet."""
NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "data_parallel": (("gpus",),),
    "global_batch_size": (("micro_batch_size", "grad_accum_steps", "data_parallel"),),
    "tokens_per_s": (("tokens", "elapsed_s"), ("samples_per_s", "seq_len")),
    "samples_per_s": (("samples", "elapsed_s"), ("global_batch_size", "step_time_s"), ("tokens_per_s", "seq_len")),
    "step_time_s": (("elapsed_s", "steps"), ("global_batch_size", "samples_per_s")),
    "tokens_per_s_per_gpu": (("tokens_per_s", "gpus"),),
    "samples_per_s_per_gpu": (("samples_per_s", "gpus"),),
    "tokens_per_day": (("tokens_per_s",),),
    "samples_per_day": (("samples_per_s",),),
    "flops_per_token": (("n_params",), ("n_active_params",)),
    "tflops_total": (("tokens_per_s", "flops_per_token"),),
    "tflops_per_gpu": (("tflops_total", "gpus"),),
    "peak_tflops_per_gpu": (("platform", "precision"),),
    "peak_source": (("peak_tflops_per_gpu",),),
    "mfu": (("tflops_per_gpu", "peak_tflops_per_gpu"),),
    "hfu": (("mfu", "activation_checkpointing"),),
    "comm_overhead": (("comm_s", "elapsed_s"),),
    "compute_comm_ratio": (("compute_s", "comm_s"),),
    "gpu_hours": (("gpus", "elapsed_s"),),
    "cost_usd": (("gpu_hours", "price_per_gpu_hour"),),
    "baseline_run_id": (("gpus",),),
    "scaling_basis": (("baseline_run_id",),),
    "scaling_multiplier": (("baseline_run_id",),),
    "scaling_efficiency": (("scaling_multiplier",),),
    "serial_fraction": (("scaling_multiplier",),),
    "cost_efficiency": (("scaling_efficiency", "price_per_gpu_hour"),),
    "scaling_type": (("gpus",),),
    "energy_j_per_token": (("energy_j", "tokens"),),
    "power_w_per_gpu": (("energy_j", "gpus", "elapsed_s"),),
    "energy_kwh": (("energy_j",),),
    "energy_cost_usd": (("energy_kwh", "price_per_kwh"),),
    "energy_cost_usd_per_million_tokens": (("energy_cost_usd", "tokens"),),
    "device_memory_gb": (("platform",),),
    "memory_headroom_gb": (("device_memory_gb", "peak_memory_gb"),),
}
"""Each derived column and what it is computed from: any one group of inputs, all present, gives it (derived inputs
followed). :func:`_note_empty` reads from it why a row leaves a column empty."""
NOTE_KEYS = {"scaling": ("baseline_run_id", "scaling_basis", "scaling_multiplier", "scaling_efficiency")}
"""Notes whose key (the text before ``: ``) is no column, and the columns their reasons cover."""
SCALING_NOTES = frozenset(("scaling", *SCALING_COLUMNS))
"""Keys of the notes about scaling (a report that shows none leaves them out)."""


def derive(runs: pd.DataFrame) -> pd.DataFrame:
    """A copy of the runs table ``runs`` with every derived column of ``trainperf.schema`` added."""
    out = runs.copy()
    for name, column in INPUT_COLUMNS.items():
        if name not in out:
            out[name] = pd.Series(pd.NA if column.kind in ("str", "bool") else np.nan, index=out.index,
                                  dtype={"str": "string", "bool": "boolean"}.get(column.kind, float))
    notes: list[list[str]] = [[] for _ in range(len(out))]
    if STEP_TIME_ANOMALIES in out:  # what a log's step times needed, and how many steps its throughput left out
        set_aside = out[STEPS_SET_ASIDE] if STEPS_SET_ASIDE in out else pd.Series(np.nan, index=out.index)
        for i, (text, count) in enumerate(zip(out[STEP_TIME_ANOMALIES], set_aside)):
            if pd.isna(text):
                continue
            if count > 0:
                notes[i].append(f"throughput: measured without {count:g} step(s) whose times could not be used "
                                f"({STEPS_SET_ASIDE})")
            notes[i].extend(f"step times: {sentence}" for sentence in str(text).split("; "))
    _add_batch_work_and_rates(out, notes)
    _add_flops(out, notes)
    summed = out[[f"{p}_s" for p in COMPUTE_PHASES]].sum(axis=1, min_count=1)
    out["compute_s"] = out["compute_s"].fillna(summed.where(out["forward_s"].notna() & out["backward_s"].notna()))
    comm = out["comm_exposed_s"].fillna(out["comm_s"])
    out["comm_overhead"] = comm / out["mean_rank_elapsed_s"].fillna(out["elapsed_s"])
    out["compute_comm_ratio"] = (out["compute_s"] / out["comm_s"]).replace(np.inf, np.nan)
    out["gpu_hours"] = out["gpus"] * out["elapsed_s"] / 3600.0
    out["cost_usd"] = out["gpu_hours"] * out["price_per_gpu_hour"]
    out["energy_j_per_token"] = out["energy_j"] / out["tokens"]
    out["power_w_per_gpu"] = out["energy_j"] / (out["gpus"] * out["elapsed_s"])
    out["energy_kwh"] = out["energy_j"] / JOULES_PER_KWH
    out["energy_cost_usd"] = out["energy_kwh"] * out["price_per_kwh"]
    out["energy_cost_usd_per_million_tokens"] = out["energy_cost_usd"] / out["tokens"] * 1e6
    _add_memory(out, notes)
    if APPROXIMATE_INPUTS in out:  # inputs a source printed rounded
        for i in np.flatnonzero(out[APPROXIMATE_INPUTS].notna().to_numpy(bool)):
            notes[i].append(f"approximate: {out[APPROXIMATE_INPUTS].iat[i]}")
    for i in np.flatnonzero(out["oversubscribed"].fillna(False).to_numpy(bool)):
        notes[i].append("oversubscribed: more busy threads than cores, or a loaded host, at the start: the run "
                        "measures contention for the CPU, not the training")
    out = add_scaling(out, notes)
    check_runs(out, notes, datasheet_peak=datasheet_peak(out))
    _note_empty(out, notes)
    out["notes"] = pd.Series(["; ".join(n) for n in notes], index=out.index, dtype="string").replace("", pd.NA)
    out.attrs = dict(runs.attrs)
    known = list(dict.fromkeys([*INPUT_COLUMNS, *DERIVED_COLUMNS]))  # inputs, derived, then reported_* / extra_*
    return out[[c for c in known if c in out] + [c for c in out if c not in known]]


def datasheet_peak(runs: pd.DataFrame) -> np.ndarray:
    """Whether each run's MFU divides by its device's datasheet dense peak, not one given in the run (measured on
    a CPU): MFUs of the two kinds do not compare."""
    return (runs["peak_source"].notna() & ~runs["peak_source"].astype("string").str.startswith(GIVEN_PEAK)
            ).fillna(False).to_numpy(bool)


def _note_empty(out: pd.DataFrame, notes: list[list[str]]) -> None:
    """Note why each column of :data:`NEEDS` a row leaves empty is empty, unless a note names it: the inputs it
    lacks (``tokens_per_s: not given, and no tokens, samples_per_s or seq_len``). Columns empty for the same lack,
    or only because of the columns of one note, share that note (``tokens_per_s, tokens_per_s_per_gpu, …: …``)."""
    used = list(dict.fromkeys([*NEEDS, *(name for groups in NEEDS.values() for group in groups for name in group)]))
    empty = out.reindex(columns=used).isna().to_numpy()
    at = {name: j for j, name in enumerate(used)}
    for i in range(len(out)):
        covered = set()
        for note in notes[i]:
            key = note.split(": ", 1)[0]
            covered.update(NOTE_KEYS.get(key, key.split(", ")))
        reason: dict[str, tuple[str, ...]] = {}
        shared: dict[tuple[str, ...], list[str]] = {}
        for column, groups in NEEDS.items():
            if not empty[i, at[column]]:
                continue
            if column in covered:
                reason[column] = (column,)
                continue
            lacking = tuple(dict.fromkeys(name for group in groups for name in group if empty[i, at[name]]))
            causes = {reason.get(name) for name in lacking}
            key = causes.pop() if len(causes) == 1 and None not in causes and lacking else lacking
            reason[column] = key
            shared.setdefault(key, []).append(column)
        for key, columns in shared.items():
            notes[i].append(f"{', '.join(columns)}: {_lack(columns[0], key)}")


def _lack(column: str, lacking: tuple[str, ...]) -> str:
    """Why ``column`` (and the columns noted with it) is empty: the inputs it ``lacks``."""
    if not lacking:
        return "its inputs give no value"
    names = lacking[0] if len(lacking) == 1 else f"{', '.join(lacking[:-1])} or {lacking[-1]}"
    return f"not given, and no {names}" if column in INPUT_COLUMNS else f"no {names}"


def _add_batch_work_and_rates(out: pd.DataFrame, notes: list[list[str]]) -> None:
    model_parallel = out[list(PARALLEL_DEGREES)].astype(float).fillna(1.0).prod(axis=1)
    out["data_parallel"] = out["gpus"] / model_parallel
    uneven = out["data_parallel"].notna() & (out["data_parallel"] % 1 != 0)
    for i in np.flatnonzero(uneven.to_numpy()):
        notes[i].append(f"data_parallel: gpus {out['gpus'].iat[i]:g} is not a multiple of tensor x pipeline x "
                        f"context parallel ({model_parallel.iat[i]:g}): check the degrees")
    out["data_parallel"] = out["data_parallel"].where(~uneven)
    from_micro = out["micro_batch_size"] * out["grad_accum_steps"] * out["data_parallel"]
    out["global_batch_size"] = _first_estimate("global_batch_size", notes, [
        ("the given size", out["global_batch_size"].astype(float)),
        ("micro_batch_size · grad_accum_steps · data_parallel", from_micro),
    ])
    accum = out["global_batch_size"] / (out["micro_batch_size"] * out["data_parallel"])
    whole = (accum >= 1) & (accum % 1 == 0)
    for i in np.flatnonzero((out["grad_accum_steps"].isna() & accum.notna() & ~whole).to_numpy(bool)):
        notes[i].append(f"grad_accum_steps: global_batch_size / (micro_batch_size · data_parallel) is "
                        f"{accum.iat[i]:g}, not a whole number: check the batch sizes and the parallel degrees")
    out["grad_accum_steps"] = out["grad_accum_steps"].fillna(accum.where(whole))
    from_steps = out["steps"] * out["global_batch_size"]
    out["tokens"] = _first_estimate("tokens", notes, [
        ("the given count", out["tokens"]),
        ("samples · seq_len", out["samples"] * out["seq_len"]),
        ("steps · global_batch_size · seq_len", from_steps * out["seq_len"]),
    ])
    out["samples"] = _first_estimate("samples", notes, [
        ("the given count", out["samples"]),
        ("steps · global_batch_size", from_steps),
        ("tokens / seq_len", out["tokens"] / out["seq_len"]),
    ])
    out["elapsed_s"] = out["elapsed_s"].fillna(out["steps"] * out["step_time_s"])
    out["tokens_per_s"] = _first_estimate("tokens_per_s", notes, [
        ("tokens / elapsed_s", out["tokens"] / out["elapsed_s"]),
        ("the given rate", out["tokens_per_s"]),
    ])
    out["samples_per_s"] = _first_estimate("samples_per_s", notes, [
        ("samples / elapsed_s", out["samples"] / out["elapsed_s"]),
        ("the given rate", out["samples_per_s"]),
        ("global_batch_size / step_time_s", out["global_batch_size"] / out["step_time_s"]),
    ])
    out["tokens_per_s"] = out["tokens_per_s"].fillna(out["samples_per_s"] * out["seq_len"])
    out["samples_per_s"] = out["samples_per_s"].fillna(out["tokens_per_s"] / out["seq_len"])
    out["step_time_s"] = _first_estimate("step_time_s", notes, [
        ("elapsed_s / steps", out["elapsed_s"] / out["steps"]),
        ("the given step time", out["step_time_s"]),
        ("global_batch_size / samples_per_s", out["global_batch_size"] / out["samples_per_s"]),
    ])
    for unit in ("tokens", "samples"):
        out[f"{unit}_per_s_per_gpu"] = out[f"{unit}_per_s"] / out["gpus"]
        out[f"{unit}_per_day"] = out[f"{unit}_per_s"] * SECONDS_PER_DAY


def _first_estimate(column: str, notes: list[list[str]], estimates: list[tuple[str, pd.Series]]) -> pd.Series:
    """The first available of several estimates of one quantity, in order of trust; every other estimate of the
    row that differs by more than :data:`RATE_TOLERANCE` is noted."""
    chosen = estimates[0][1]
    label = pd.Series(estimates[0][0], index=chosen.index, dtype=object).where(chosen.notna())
    for name, values in estimates[1:]:
        label = label.fillna(pd.Series(name, index=chosen.index, dtype=object).where(values.notna()))
        chosen = chosen.fillna(values)
    for name, values in estimates:
        relative = (values - chosen).abs() / chosen
        for i in np.flatnonzero((relative > RATE_TOLERANCE).to_numpy()):
            notes[i].append(f"{column}: {name} gives {values.iat[i]:,.6g}, {relative.iat[i] * 100:.1f} % off "
                            f"the {chosen.iat[i]:,.6g} from {label.iat[i]}, which is kept")
    return chosen


def _add_flops(out: pd.DataFrame, notes: list[list[str]]) -> None:
    rows = out.to_dict("records")
    found = [(*flops_mod.flops_per_token(row), *_peak(row)) for row in rows]
    per_token, used, peak, source, why = (list(c) for c in zip(*found)) if found else ([],) * 5
    for i, row in enumerate(rows):
        if math.isnan(per_token[i]):
            notes[i].append(f"flops_per_token: {used[i]} needs {', '.join(flops_mod.missing_inputs(row, used[i]))}")
        if why[i]:
            notes[i].append(f"peak_tflops_per_gpu: {why[i]}")
    for name in sorted({str(row["platform"]) for row, w in zip(rows, why) if w.startswith("platform")}):
        warnings.warn(f"platform {name!r} is not in the peak table: its runs get no MFU "
                      "(give peak_tflops_per_gpu to set the peak)", DataWarning, stacklevel=3)
    out["flops_per_token"] = np.array(per_token, dtype=float)
    out["flops_convention_used"] = pd.Series(used, index=out.index, dtype="string")
    counted = out["flops_convention_used"].eq("counted").fillna(False)  # a model without tokens: per sample
    per_sample = (out["samples_per_s"] * out["flops_per_sample"]).where(counted)
    out["tflops_total"] = (out["tokens_per_s"] * out["flops_per_token"]).fillna(per_sample) / 1e12
    out["tflops_per_gpu"] = out["tflops_total"] / out["gpus"]
    out["peak_tflops_per_gpu"] = np.array(peak, dtype=float)
    out["peak_source"] = pd.Series(source, index=out.index, dtype="string")
    out["mfu"] = out["tflops_per_gpu"] / out["peak_tflops_per_gpu"]
    checkpointing = out["activation_checkpointing"]
    factor = np.where(checkpointing.fillna(False).to_numpy(bool), flops_mod.RECOMPUTE_FACTOR, 1.0)
    out["hfu"] = (out["mfu"] * factor).where(checkpointing.notna())


def _peak(row: dict) -> tuple[float, object, str]:
    """Dense peak TFLOP/s of the row's device, its source, and why it is missing."""
    given = row.get("peak_tflops_per_gpu")
    if not pd.isna(given):  # pd.isna: None too
        method = row.get("peak_method")
        return float(given), GIVEN_PEAK if pd.isna(method) else f"{GIVEN_PEAK}: {method}", ""
    platform, precision = row.get("platform"), row.get("precision")
    if pd.isna(platform):
        return math.nan, pd.NA, "no platform"
    if pd.isna(precision):
        return math.nan, pd.NA, "no precision"
    peak = dense_peak_tflops(str(platform), str(precision))
    if peak is None:
        if is_cpu(str(platform)):
            return math.nan, pd.NA, "cpu runs need a measured peak_tflops_per_gpu (trainperf.profiler.peak_flops.measure_peak_flops)"
        return math.nan, pd.NA, f"platform {platform!r} at {precision} is not in the peak table"
    return peak.tflops, f"{peak.device} {peak.precision} dense: {peak.source}", ""


def _add_memory(out: pd.DataFrame, notes: list[list[str]]) -> None:
    given = out["device_memory_gb"].astype(float)
    datasheet = [math.nan if not isinstance(p, str) or (found := device_memory(p)) is None else found[0]
                 for p in out["platform"].astype(object).where(given.isna())]
    out["device_memory_gb"] = given.fillna(pd.Series(datasheet, index=out.index, dtype=float))
    unknown = out["device_memory_gb"].isna() & out["platform"].notna() & ~cpu_rows(out["platform"])
    for i in np.flatnonzero(unknown.to_numpy(bool)):
        notes[i].append(f"device_memory_gb: no memory size for {out['platform'].iat[i]} in the hardware table "
                        "(name the part with its memory, e.g. 'NVIDIA A100 80GB', or give device_memory_gb)")
    out["memory_headroom_gb"] = out["device_memory_gb"] - out["peak_memory_gb"]
    for i in np.flatnonzero(out["fits"].eq(False).fillna(False).to_numpy(bool)):  # the runs that did not fit
        where = out["extra_out_of_memory"].iat[i] if "extra_out_of_memory" in out else None
        notes[i].append("out of memory: the configuration does not fit the device" +
                        (f" ({where})" if isinstance(where, str) else "") +
                        ("" if pd.notna(out["elapsed_s"].iat[i]) else "; no step was measured"))

