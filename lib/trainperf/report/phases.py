"""Where a run's time goes: its phase times, what is left over, and the wait
for the slowest rank, in seconds for the measured window or per optimizer step."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from trainperf.compare import exposed_within_phases
from trainperf.report.run_labels import by_experiment
from trainperf.report.html import count, first_of, fmt_sig

PHASE_LABELS = {
    "data_s": "data loading", "h2d_s": "host-to-device copy", "forward_s": "forward", "loss_s": "loss",
    "backward_s": "backward", "optimizer_s": "optimizer", "compute_s": "compute",
    "comm_s": "communication", "comm_exposed_s": "communication (exposed)",
    "wait_outside_s": "waiting for another rank's work outside the steps", "validation_s": "validation",
}
OTHER = "other / unattributed"
IMBALANCE = "waiting for the slowest rank"
COLUMNS = ["experiment", "run_id", "configuration", "gpus", "phase", "seconds", "share", "unit"]


COMPARE_ROWS = {"other": OTHER, "slowest_wait": IMBALANCE, "step_time": "step (the slowest rank's)"}
"""Labels of the rows of a ``trainperf compare`` phase table that are no phase of the step."""


def phase_label(name: str) -> str:
    """The label of a phase named as a steps table or ``trainperf compare`` names it (``comm_exposed``,
    ``comm_exposed_s``: ``communication (exposed)``); other names with spaces for underscores."""
    if name in COMPARE_ROWS:
        return COMPARE_ROWS[name]
    return PHASE_LABELS.get(name if name.endswith("_s") else f"{name}_s", name.replace("_", " "))


def has_phases(runs: pd.DataFrame) -> bool:
    """Whether any run reports a phase time."""
    return any(c in runs and runs[c].notna().any() for c in PHASE_LABELS)


def slowest_wait(runs: pd.DataFrame) -> pd.Series:
    """Per run, seconds its typical rank waits for the slowest (≥ 0; NaN where the mean over ranks is unknown)."""
    mean = runs["mean_rank_elapsed_s"] if "mean_rank_elapsed_s" in runs else pd.Series(np.nan, index=runs.index)
    return (runs["elapsed_s"] - mean).astype(float).clip(lower=0)


def typical_s(runs: pd.DataFrame) -> pd.Series:
    """Per run, a typical rank's measured window (s): ``mean_rank_elapsed_s``, else ``elapsed_s``."""
    typical = runs["elapsed_s"].astype(float)
    return runs["mean_rank_elapsed_s"].astype(float).fillna(typical) if "mean_rank_elapsed_s" in runs else typical


def validation_inside(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether its ``validation_s`` lies inside its ``elapsed_s``: so for runs measured from their
    steps (``ranks`` known), not for a runs-table row (docs/reports.md, "The phase breakdown")."""
    return runs["ranks"].notna() if "ranks" in runs else pd.Series(False, index=runs.index)


def validation_s(runs: pd.DataFrame) -> pd.Series:
    """Per run, seconds of validation it recorded (``validation_s``; 0 where it recorded none)."""
    given = runs["validation_s"] if "validation_s" in runs else pd.Series(0.0, index=runs.index)
    return given.astype(float).fillna(0.0)


def training_loop_s(runs: pd.DataFrame) -> pd.Series:
    """Per run, seconds of its training loop (the slowest rank's): ``elapsed_s`` less the validation inside it."""
    return runs["elapsed_s"].astype(float) - validation_s(runs) * validation_inside(runs).astype(float)


def breakdown(runs: pd.DataFrame, *, per_step: bool = True) -> tuple[pd.DataFrame, str]:
    """Seconds per phase (:data:`PHASE_LABELS`, in step order) of each of ``runs``, and their unit: ``s per step``
    when ``per_step`` and every step count is known, else ``s in the measured window`` (docs/reports.md)."""
    split = any(c in runs and runs[c].notna().any() for c in ("forward_s", "backward_s"))
    compute = ["forward_s", "loss_s", "backward_s", "optimizer_s"] if split else ["compute_s"]
    comm = "comm_exposed_s" if "comm_exposed_s" in runs and runs["comm_exposed_s"].notna().any() else "comm_s"
    present = [c for c in ["data_s", "h2d_s", *compute, comm, "wait_outside_s"] if c in runs and runs[c].notna().any()]
    seconds = pd.DataFrame({PHASE_LABELS[c]: runs[c].astype(float).fillna(0.0) for c in present}, index=runs.index)
    within = exposed_within_phases(runs)
    if comm == "comm_exposed_s" and within.any():
        if within.all():
            seconds = seconds.drop(columns=PHASE_LABELS[comm])
        else:
            seconds[PHASE_LABELS[comm]] = seconds[PHASE_LABELS[comm]].mask(within, 0.0)
    loop = typical_s(runs) - (runs["elapsed_s"].astype(float) - training_loop_s(runs))
    other = (loop - seconds.sum(axis=1)).clip(lower=0)
    if other.fillna(0).gt(0.005 * loop.fillna(np.inf)).any():
        seconds[OTHER] = other.fillna(0.0)
    if (wait := slowest_wait(runs).fillna(0.0)).gt(0).any():  # NaN where the mean over ranks is unknown
        seconds[IMBALANCE] = wait
    if "validation_s" in runs and runs["validation_s"].notna().any():
        seconds[PHASE_LABELS["validation_s"]] = validation_s(runs)
    steps = runs["steps"] if "steps" in runs else pd.Series(np.nan, index=runs.index)
    if {"samples", "global_batch_size"} <= set(runs.columns):
        steps = steps.fillna(runs["samples"] / runs["global_batch_size"])
    if per_step and steps.notna().all() and (steps.astype(float) > 0).all():
        return seconds.div(steps.astype(float), axis=0), "s per step"
    return seconds, "s in the measured window"


def overlap_notes(runs: pd.DataFrame) -> list[str]:
    """A sentence for the runs whose exposed communication lies inside their forward and backward
    (:func:`trainperf.compare.exposed_within_phases`), which :func:`breakdown` does not add to them."""
    if "comm_exposed_s" not in runs:
        return []
    shown = runs[exposed_within_phases(runs).to_numpy(bool) & runs["comm_exposed_s"].notna().to_numpy(bool)]
    return [] if shown.empty else [f"{first_of(shown['run_id'].astype(str).tolist(), 4)}: exposed communication was sampled by "
            "torch.profiler windows inside forward and backward (where the job waits for it): it is part of "
            "those phases, not stacked on top of them, so the phases add up to the step."]


def per_experiment(runs: pd.DataFrame, configuration: Callable[[pd.DataFrame], list[str]], *,
                   per_step: bool = True) -> pd.DataFrame:
    """The :func:`breakdown` of every experiment of ``runs`` with phase times (:data:`COLUMNS`), one row per
    configuration (runs ``configuration`` labels alike, averaged) and phase; ``share``: of its total."""
    parts = []
    for _, group in by_experiment(runs):
        if not has_phases(group):
            continue
        seconds, unit = breakdown(group, per_step=per_step)
        wide = seconds.assign(run_id=group["run_id"].astype(str), experiment=group["experiment"].astype(str),
                              configuration=configuration(group), gpus=group["gpus"])
        out = (wide.melt(id_vars=["experiment", "run_id", "configuration", "gpus"], var_name="phase",
                         value_name="seconds")
               .groupby(["experiment", "configuration", "phase"], sort=False, as_index=False)
               .agg(run_id=("run_id", "first"), gpus=("gpus", "first"), seconds=("seconds", "mean")))
        total = out.groupby(["experiment", "configuration"], sort=False)["seconds"].transform("sum")
        parts.append(out.assign(share=out["seconds"] / total, unit=unit)[COLUMNS])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def without_phases(runs: pd.DataFrame) -> list[str]:
    """A sentence for each experiment whose data holds no phase times, with its time per step where known."""
    out = []
    for name, group in by_experiment(runs):
        if not has_phases(group):
            known = group[group["step_time_s"].notna()]
            per_step = "; time per step: " + ", ".join(f"{fmt_sig(t)} s at {count(n, 'device')}" for n, t in
                                                       zip(known["gpus"], known["step_time_s"])) if len(known) else ""
            out.append(f"The data of {name} holds no phase times (compute, communication, data): no "
                       f"breakdown{per_step}.")
    return out
