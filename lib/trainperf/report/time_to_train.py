"""Time to train the same work, over the training loop and in all, and the parts of a run's total time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainperf.report.run_labels import Unit
from trainperf.report.html import fmt_int
from trainperf.report.page import InputError
from trainperf.report.phases import training_loop_s, validation_s

TOTAL_TIME = ["wall_s", "extra_total_exec_s"]
"""Columns that give a run's total time, start-up included (s), in the order they are used: the profiler's wall
clock (from its start to close()), the script's execution time."""
TIMES = ("work", "training_loop_s", "total_s", "outside_loop_s")
"""Columns of :func:`run_times`."""
LOOP, VALIDATION, OUTSIDE = "training loop", "validation", "other outside the training loop"
NESTED = (("extra_epoch_s", "epoch outside training and validation"),
          ("extra_train_worker_s", "train worker outside the epoch"),
          ("extra_total_exec_s", "script outside the train worker"))
"""The nested timers of the timing-summary logs (script ⊃ train worker ⊃ epoch ⊃ training and validation),
innermost first, and the part each adds to the one inside it."""
PROFILED = (("startup_s", "start-up"), ("after_steps_s", "after the last step"))
"""Parts of the profiler's wall clock outside the training loop (:mod:`trainperf.goodput`) that are named."""
PARTS = (LOOP, VALIDATION, *(name for _, name in NESTED), *(name for _, name in PROFILED), OUTSIDE)
"""Every part :func:`total_parts` may name, in its order."""


def run_times(runs: pd.DataFrame, unit: Unit) -> pd.DataFrame:
    """Per run: ``work``, its tokens or samples (else rate × ``elapsed_s``), ``training_loop_s``, ``total_s``
    (:func:`total_s`) and ``outside_loop_s`` = total − training loop (s)."""
    work = runs[unit.name].astype(float) if unit.name in runs else pd.Series(np.nan, index=runs.index)
    work = work.fillna(runs[unit.rate].astype(float) * runs["elapsed_s"].astype(float))
    total, loop = total_s(runs), training_loop_s(runs)
    return pd.DataFrame({"work": work, "training_loop_s": loop, "total_s": total, "outside_loop_s": total - loop},
                        index=runs.index)


def total_s(runs: pd.DataFrame) -> pd.Series:
    """Per run, its total time with start-up (s): the first column of :data:`TOTAL_TIME` it has; NaN."""
    return runs.reindex(columns=TOTAL_TIME).astype(float).bfill(axis=1).iloc[:, 0].rename(None)


def total_parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run that recorded its total time (others: NaN), its parts (s; :data:`PARTS`), adding up to the total."""
    total = total_s(runs)
    parts = {LOOP: training_loop_s(runs), VALIDATION: validation_s(runs)}
    inner = parts[LOOP] + parts[VALIDATION]
    for column, name in NESTED:
        if column in runs and runs[column].notna().any():
            outer = runs[column].astype(float)
            parts[name] = outer - inner
            inner = outer.fillna(inner)
    parts.update({name: runs[column].astype(float) for column, name in PROFILED
                  if column in runs and runs[column].notna().any()})
    out = pd.DataFrame(parts, index=runs.index).where(total.notna())
    out[OUTSIDE] = total - out.sum(axis=1, min_count=1)
    return out[[c for c in out if c == LOOP or out[c].abs().gt(0.0005 * total).any()]]


def to_train(configurations: pd.DataFrame, train_work: float | None, unit: Unit) -> tuple[pd.Series, pd.Series, str]:
    """The time to train the same work (``train_work``, else the most any measured) on each of a sweep's
    ``configurations`` (with :func:`run_times`), s: over the training loop (work / rate) and in all (the time
    outside the loop taken as fixed: NaN without a total); and how the work was chosen."""
    work = configurations["work"]
    if train_work is not None:
        if not train_work > 0:
            raise InputError(f"train_tokens must be a number of tokens above 0, not {train_work!r}")
        work, how = float(train_work), f"{fmt_int(train_work)} {unit.name} (as asked)"
    elif not work.notna().any():
        raise InputError(f"no configuration has its {unit.name} or a rate and elapsed_s: no time to train")
    else:
        work, how = float(work.max()), f"{fmt_int(work.max())} {unit.name}, the most any configuration measured"
    loop = work / configurations[unit.rate].astype(float)
    return loop, loop + configurations["outside_loop_s"], how
