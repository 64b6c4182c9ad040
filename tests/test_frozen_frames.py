"""Every dataset of the project reads into the frames frozen in
``tests/frozen/data`` (``tests/frozen/freeze.py`` wrote them with the data
layer before step intervals, the Parquet store and Dask; those of data/runs
again when the warm-up came to be found from the step times): the same runs,
derived metrics, steps, notes and warnings, to 1e-9 relative."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).with_name("frozen")))
from frames import FROZEN, as_text_columns, frames, inputs, name  # noqa: E402

KINDS = ("runs", "derived", "steps", "log_steps")
STEP_KINDS = ("steps", "log_steps")
NEW_STEP_COLUMNS = ("n_steps", "includes_evaluation", "reserved_memory_gb", "host_memory_gb", "alloc_retries",
                    "ooms", "energy_j", "wait_outside_s")
"""Step intervals have these columns besides the steps table's: the steps an
interval covers, whether its time includes an evaluation, and the memory and
energy the profiler reads since, and the wait for another rank's work outside the steps (empty in every
frozen input)."""


NEW_RUN_COLUMNS = ("measured", "oversubscribed", "head_dim", "tied_embeddings", "known_error", "compiled",
                   "price_per_kwh", "device_memory_gb", "peak_memory_mean_gb", "reserved_memory_gb",
                   "reserved_memory_mean_gb", "host_memory_gb", "host_memory_mean_gb", "energy_j", "energy_counter",
                   "alloc_retries", "ooms", "fits", "energy_j_per_token", "power_w_per_gpu", "energy_kwh",
                   "energy_cost_usd", "energy_cost_usd_per_million_tokens", "memory_headroom_gb", "warmup_rule",
                   "wall_s", "goodput", "productive_s", "warmup_excess_s", "startup_s", "unaccounted_s",
                   "after_steps_s", "wait_outside_s", "wait_outside_for", "peak_method")
"""Runs columns added since: whether the source measured the row (the reference data says where it did not),
whether the run competed for its host's CPU (the bench's ``extra_oversubscribed``, and the profiler's record),
the width of an attention head and whether the output head shares the token embedding (FLOPs conventions),
an error the row's source is known to have (the reference data's README lists them), whether the model ran
compiled (a setting repeats share), memory and energy (the profiler's runs of the embedded data are of
steps-file version 1, which recorded only the peak: these are empty there; device_memory_gb and
memory_headroom_gb come from the datasheet), how the warm-up was chosen (trainperf.steady_state: the frames of
data/runs were frozen again with it, the others keep the warm-up they had) and the goodput breakdown
(trainperf.goodput: no frozen input has a wall clock), the wait for another rank's work outside the steps
(no frozen input has an events file) and how a given peak was got."""
SCALING = ["baseline_run_id", "scaling_basis", "scaling_multiplier", "scaling_efficiency", "serial_fraction",
           "cost_efficiency", "notes"]
TIED = "scaling: several runs share the fewest devices: set baseline_run_id"
"""The note of the runs that had no scaling. Since scaling series, runs on one
device count that differ in a setting are scaled apart (a baseline named for the
experiment anchors only its own series) and runs alike there are repeats, the
baseline their mean (tests/test_derive.py, test_scaling.py)."""


OLD_EMPTY_NOTES = re.compile(r"gpus unknown: |mfu: (?!above)|hfu: activation_checkpointing unknown")
"""The notes on empty values the frozen layer wrote: only for unknown devices, a missing peak and an unknown
activation checkpointing."""
NEW_EMPTY_NOTES = re.compile(r"(?!scaling: )(?:[a-z_]+, )*[a-z_]+: (?:no |not given, and no |its inputs give no "
                             r"value)|peak_tflops_per_gpu: |scaling_type: |serial_fraction: not above |"
                             r"cost_efficiency: the baseline ")
"""Since, every derived column a row leaves empty has a note saying why (``trainperf.derived.NEEDS``; the peak
table's reason keyed by peak_tflops_per_gpu; the scaling study's reasons for a type and a serial fraction):
tests/test_derive.py checks them. Here both layers' notes on empty values are left out; the others must agree."""


IMPOSSIBLE = re.compile(r"(?:[a-z_]+, )*[a-z_]+: impossible, emptied: |scaling_efficiency: super-linear ")
"""Notes of ``trainperf.invariants`` (a figure that cannot be true is emptied since, with this note): the test
restores the frozen figure and leaves the note out; tests/test_invariants.py checks them."""


def emptied(frame: pd.DataFrame) -> list[tuple[int, list[str]]]:
    """Per row with notes of figures emptied as impossible: its position and the columns emptied."""
    return [(i, [c for note in notes.split("; ") if IMPOSSIBLE.match(note) and ": impossible" in note
                 for c in note.split(": ", 1)[0].split(", ")])
            for i, notes in enumerate(frame["notes"]) if isinstance(notes, str) and "impossible, emptied" in notes]


def without_empty_notes(notes: pd.Series, pattern: re.Pattern[str]) -> pd.Series:
    """``notes`` without those ``pattern`` matches (at their start), empty where none is left."""
    kept = notes.astype("string").str.split("; ").map(
        lambda found: "; ".join(n for n in found if not pattern.match(n)) if isinstance(found, list) else pd.NA)
    return kept.replace("", pd.NA).astype("string")


def inferred_accumulation(frame: pd.DataFrame, stored: pd.DataFrame) -> np.ndarray:
    """Derived rows whose ``grad_accum_steps`` is new since: ``derive`` gives global_batch_size /
    (micro_batch_size · data_parallel) where a row lacks it (seed 002's throughput table)."""
    new = (stored["grad_accum_steps"].isna() & frame["grad_accum_steps"].notna()).to_numpy(bool)
    if new.any():
        expected = frame["global_batch_size"] / (frame["micro_batch_size"] * frame["data_parallel"])
        assert np.allclose(frame.loc[new, "grad_accum_steps"], expected[new])
    return new


def as_frozen(kind: str, frame: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as the previous data layer gave it, where this one changed it
    on purpose: step intervals carry :data:`NEW_STEP_COLUMNS`, and a log's
    intervals include those whose time includes an evaluation (the steps table
    left them out); a steps table's missing node is empty (it was missing); a timing summary's
    ``extra_total_exec_s`` was ``extra_total_execution_s``.
    Derived rows have ``scaling_study``, ``scaling_type`` and ``flops_per_sample``, and the scaling
    of the rows that had :data:`TIED`, whose experiment is split into series,
    or that scale weakly (no serial fraction) is new; so are their notes on
    empty values (:data:`NEW_EMPTY_NOTES`) and a derived ``grad_accum_steps``."""
    if "extra_oversubscribed" in stored:  # the bench's flag, canonical since
        frame = frame.rename(columns={"oversubscribed": "extra_oversubscribed"})
    if "extra_total_execution_s" in stored:  # a timing summary's script total, named as the reference data names it since
        frame = frame.rename(columns={"extra_total_exec_s": "extra_total_execution_s"})
    frame = frame.drop(columns=[c for c in NEW_RUN_COLUMNS if c in frame and c not in stored])
    if kind == "derived":
        frame.loc[inferred_accumulation(frame, stored), "grad_accum_steps"] = np.nan
        for i, figures in emptied(frame):  # trainperf.invariants empties impossible figures since
            frame.loc[i, figures] = stored.loc[i, figures]
        frame["notes"] = without_empty_notes(frame["notes"], IMPOSSIBLE)
        frame["notes"] = without_empty_notes(frame["notes"], NEW_EMPTY_NOTES)
        split = (frame["scaling_study"] != frame["experiment"].fillna("")).to_numpy(bool)
        weak = frame["scaling_type"].eq("weak").fillna(False).to_numpy(bool)  # no Karp–Flatt fraction
        weak |= frame[[c for c in frame if c.endswith("oversubscribed")]].eq(True).any(axis=1).to_numpy(bool)
        tied = stored["notes"].fillna("").str.contains(TIED, regex=False).to_numpy(bool) | split | weak
        frame = frame.drop(columns=[c for c in ("scaling_study", "second_scaling_study", "scaling_type",
                                                "flops_per_sample") if c not in stored])
        frame.loc[tied, SCALING] = stored.loc[tied, SCALING].to_numpy()
        return frame
    if kind not in STEP_KINDS:
        return frame
    frame = frame[~frame["includes_evaluation"]] if kind == "log_steps" else frame
    frame = frame.drop(columns=[c for c in NEW_STEP_COLUMNS if c in frame and c not in stored])
    if "node" in stored and stored["node"].isna().all():
        frame = frame.assign(node=frame["node"].replace("", pd.NA))
    return frame.reset_index(drop=True)


@pytest.mark.parametrize("path", inputs(), ids=str)
def test_an_input_reads_into_its_frozen_frames(path):
    frozen = json.loads((FROZEN / f"{name(path)}.json").read_text())
    found = frames(path)
    for key in ("runs_error", "steps_error"):
        assert found.get(key) == frozen.get(key), key
    assert found["warnings"] == frozen["warnings"]
    for kind in KINDS:
        stored = FROZEN / f"{name(path)}.{kind}.parquet"
        if kind == "log_steps" and not stored.exists():  # a log of intervals of several steps: none before
            assert kind not in found or (found[kind]["n_steps"] != 1).any() or found[kind]["n_steps"].isna().any()
            continue
        assert (kind in found) == stored.exists(), kind
        if kind in found:
            frozen_frame = pd.read_parquet(stored)
            if kind == "derived":
                frozen_frame["notes"] = without_empty_notes(without_empty_notes(frozen_frame["notes"], OLD_EMPTY_NOTES),
                                                            NEW_EMPTY_NOTES)  # data/runs was frozen again since
            pd.testing.assert_frame_equal(as_frozen(kind, as_text_columns(found[kind]).reset_index(drop=True),
                                                    frozen_frame),
                                          frozen_frame, check_dtype=False, check_like=True, rtol=1e-9,
                                          obj=f"{path}: {kind}")


def test_every_input_is_frozen():
    assert sorted(f"{name(p)}.json" for p in inputs()) == sorted(p.name for p in FROZEN.glob("*.json"))
