"""Where the time goes on the scaling page: the time per step in each phase, the communication overhead, and
the "communication" of a run on one device."""

from __future__ import annotations

import pandas as pd

from trainperf.report.configs import labels
from trainperf.report.html import fmt_num, fmt_pct
from trainperf.report.phases import PHASE_LABELS, per_experiment, slowest_wait

def phases(runs: pd.DataFrame) -> pd.DataFrame:
    """Time per step in each phase of each configuration (:func:`trainperf.report.phases.long_form`)."""
    return per_experiment(runs, lambda group: labels(group, compact=True))


OVERHEAD = ["compute_s", "comm_s", "comm_exposed_s", "data_s", "slowest_wait_s", "comm_overhead", "compute_comm_ratio"]


def overhead(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run with phase times: elapsed, compute, communication (all and exposed) and data
    seconds, ``slowest_wait_s`` (:func:`trainperf.report.phases.slowest_wait`: the time the phases
    of a typical rank leave to waiting for the slowest), ``comm_overhead`` and ``compute_comm_ratio``
    (see :func:`trainperf.derive.derive`); columns no run has are left out."""
    have = runs[runs[[c for c in PHASE_LABELS if c in runs]].notna().any(axis=1)]
    have = have.assign(configuration=labels(have), slowest_wait_s=slowest_wait(have))
    present = [c for c in OVERHEAD if c in have and have[c].notna().any()]
    return have[["experiment", "configuration", "gpus", "elapsed_s", *present]].reset_index(drop=True)



SINGLE_DEVICE_COMM = 0.01
"""Share of its elapsed time from which a run on one device's communication is named."""


def single_device_comm(runs: pd.DataFrame) -> list[str]:
    """A sentence for each run on one device whose communication (``comm_s``) is :data:`SINGLE_DEVICE_COMM`
    of its elapsed time or more: one device exchanges no gradients, so the timer measures something else."""
    if "comm_s" not in runs:
        return []
    one = runs[runs["gpus"].eq(1).fillna(False).to_numpy(bool)
               & (runs["comm_s"] >= SINGLE_DEVICE_COMM * runs["elapsed_s"]).fillna(False).to_numpy(bool)]
    return [f"Run {r['run_id']}: {fmt_num(r['comm_s'])} s of “communication” on a single device "
            f"({fmt_pct(r['comm_s'] / r['elapsed_s'])} of its elapsed time), which has no other device to exchange "
            "gradients with: the timer measures something else as well (waiting for the device, a collective "
            "over one rank, work around it). Part of the communication of the runs on more devices may be the "
            "same, not an exchange." for r in one.to_dict("records")]
