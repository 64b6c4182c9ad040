"""What a derived figure must satisfy to be shown: the rules, their tolerances and the note an emptied figure gets
(``<columns>: impossible, emptied: <why>``, :data:`EMPTIED`) are in README.md, "Figures that cannot be true";
checked where ``derive`` makes the columns, a scaling page recomputes a serial fraction and a CPU peak is measured.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

PLAUSIBLE_MFU = 0.75
"""MFU above this fraction of a datasheet's dense peak is possible but rare in training: noted, kept."""
EFFICIENCY_TOLERANCE = 0.10
"""How far above 1 a scaling efficiency may lie and still be shown outside strong scaling: repeats on a shared machine
differ by a few per cent and logs print rates rounded; 10 % above ideal is beyond both."""
PHASE_TOLERANCE = 0.01
"""How far the non-overlapping phases of a step may add up beyond the elapsed time: timers are read at
different instants and files round times to 1 µs (a relative allowance)."""
EMPTIED = "impossible, emptied"
"""The words after the columns of a note about an emptied figure: ``mfu, hfu: impossible, emptied: …``."""
SEQUENTIAL_PHASES = (("data_s", "h2d_s", "forward_s", "loss_s", "backward_s", "optimizer_s"),
                     ("comm_exposed_s", "wait_outside_s"))
"""Groups of phase columns that never overlap within a rank's step (``comm_s`` may overlap the backward pass)."""
PHASE_COLUMNS = (*(c for group in SEQUENTIAL_PHASES for c in group), "comm_s", "validation_s", "compute_s", "comm_overhead", "compute_comm_ratio")
"""What a run whose phases exceed its steps loses: every figure read from the phase timers."""
MFU_CAUSES = ("the FLOPs per token may not fit the model (n_params counting the embeddings, or the palm "
              "formula's attention term for a model without attention)",
              "gpus must count every device of the job", "the peak must be the dense one at the run's precision "
              "(a CPU's measured on a quiet machine)", "tokens and elapsed_s may cover different windows")
"""Why an MFU is doubtful, for every run alike."""


def check_runs(out: pd.DataFrame, notes: list[list[str]], *, datasheet_peak: np.ndarray) -> None:
    """Empty, in place, every figure of the derived runs table ``out`` that breaks an invariant (README.md, "Figures
    that cannot be true"), appending why to ``notes[position]``; note an MFU above :data:`PLAUSIBLE_MFU` of a
    datasheet peak (``datasheet_peak``: per row, whether its peak is a datasheet's, not one measured)."""
    _check_mfu(out, notes, datasheet_peak)
    check_scaling(out, notes)
    _check_phases(out, notes)


def _empty(out: pd.DataFrame, notes: list[list[str]], rows: np.ndarray, columns: tuple[str, ...], why: str) -> None:
    columns = tuple(c for c in columns if c in out)
    for i in np.flatnonzero(rows):
        notes[i].append(f"{', '.join(columns)}: {EMPTIED}: {why}")
    for column in columns:
        out[column] = out[column].mask(pd.Series(rows, index=out.index))


def _check_mfu(out: pd.DataFrame, notes: list[list[str]], datasheet: np.ndarray) -> None:
    mfu = out["mfu"].to_numpy(float)
    # without n_active_params, a mixture-of-experts model may be overcounted
    moe = out["n_active_params"].isna().to_numpy(bool) if "n_active_params" in out else np.ones(len(out), bool)
    above = mfu > 1
    for unknown in (True, False):
        # above a datasheet's peak the FLOP/s themselves cannot be true (a measured peak may be the one too low)
        for sheet in (True, False):
            _empty(out, notes, above & (moe == unknown) & (datasheet == sheet),
                   ("mfu", "hfu", *(("tflops_per_gpu", "tflops_total") if sheet else ())),
                   "mfu above 1, more FLOP/s than the device's peak: likely causes: " + _causes(unknown))
    _empty(out, notes, mfu <= 0, ("mfu", "hfu"), "mfu not above 0: no work measured")
    _empty(out, notes, out["hfu"].to_numpy(float) > 1, ("hfu",),
           "hfu above 1: activation recomputation counted on a run that already uses the peak")
    for i in np.flatnonzero((mfu > PLAUSIBLE_MFU) & ~above & datasheet):
        notes[i].append(f"mfu above {PLAUSIBLE_MFU:g} of the dense peak, which training rarely exceeds: likely "
                        f"causes: {_causes(moe[i])}")


def _causes(moe: bool) -> str:
    """The likely causes of a doubtful MFU, with the mixture-of-experts one where ``moe``."""
    extra = ["a mixture-of-experts model counts only the parameters each token uses (give n_active_params)"]
    return ", or ".join([MFU_CAUSES[0], *(extra if moe else []), *MFU_CAUSES[1:]])


def check_scaling(out: pd.DataFrame, notes: list[list[str]]) -> None:
    """The scaling invariants of :func:`check_runs` alone (rows in a second scaling study are checked again)."""
    efficiency = out["scaling_efficiency"].to_numpy(float)
    strong = out["scaling_type"].eq("strong").fillna(False).to_numpy(bool)
    more_devices = out["scaling_multiplier"].to_numpy(float) / efficiency > 1  # on the baseline's count: no scaling
    super_linear = (efficiency > 1 + EFFICIENCY_TOLERANCE) & more_devices
    _empty(out, notes, super_linear & ~strong, ("scaling_multiplier", "scaling_efficiency", "serial_fraction",
                                                "cost_efficiency"),
           f"scaling efficiency more than {EFFICIENCY_TOLERANCE:.0%} above 1 outside strong scaling; the runs did "
           "not do comparable work, or the baseline was slowed (a loaded machine)")
    for i in np.flatnonzero(super_linear & strong):
        notes[i].append("scaling_efficiency: super-linear under strong scaling: each device's share of the "
                        "global batch shrank and may fit a faster memory; check that the baseline ran on a quiet "
                        "machine")
    serial = out["serial_fraction"].to_numpy(float)
    _empty(out, notes, serial < 0, ("serial_fraction",),
           "Karp–Flatt below 0: the speedup is super-linear, and a serial share of the work cannot be negative")
    _empty(out, notes, serial > 1, ("serial_fraction",),
           "Karp–Flatt above 1: more devices were slower than the baseline, beyond what serial work explains")


def serial_fraction_possible(values: np.ndarray) -> np.ndarray:
    """Per Karp–Flatt value, whether it lies in [0, 1] (NaN: no)."""
    values = np.asarray(values, dtype=float)
    return (values >= 0) & (values <= 1)


def _check_phases(out: pd.DataFrame, notes: list[list[str]]) -> None:
    """Empty the phase columns of a row whose phases that never overlap add up to more than its elapsed time (the
    mean rank's, s, with :data:`PHASE_TOLERANCE`)."""
    elapsed = out["mean_rank_elapsed_s"].fillna(out["elapsed_s"]).to_numpy(float) * (1 + PHASE_TOLERANCE)
    longer = np.zeros(len(out), dtype=bool)
    for group in SEQUENTIAL_PHASES:
        longer |= out[[c for c in group if c in out]].sum(axis=1, min_count=1).to_numpy(float) > elapsed
    _empty(out, notes, longer, PHASE_COLUMNS,
           "phases that never overlap (data, h2d, forward, loss, backward, optimizer; exposed communication and "
           "waits outside) add up to more than the elapsed time: the timers or the window they cover are wrong")


def peaks_consistent(peaks: Mapping[int, float]) -> bool:
    """Whether CPU peaks measured by thread count (``{threads: TFLOP/s}``) are possible: none at n threads
    below the one at 1 thread (true where the 1-thread peak is not among them)."""
    one = peaks.get(1)
    return one is None or all(value >= one for value in peaks.values())


def violations(runs: pd.DataFrame) -> pd.DataFrame:
    """The emptied figures of a derived runs table: a row ``run_id, figures, why`` per :data:`EMPTIED` note."""
    rows = []
    for run_id, text in zip(runs["run_id"], runs.get("notes", pd.Series(pd.NA, index=runs.index))):
        for note in ([] if pd.isna(text) else str(text).split("; ")):
            columns, _, rest = note.partition(f": {EMPTIED}: ")
            if rest:
                rows.append((run_id, columns, rest))
    return pd.DataFrame(rows, columns=["run_id", "figures", "why"])
