"""The scaling studies of a page's runs, named with their kind; what else changes between their runs, and which
laws judge them."""

from __future__ import annotations

import pandas as pd

from trainperf.report.run_labels import by_experiment, study_of
from trainperf.report.page import keep_experiments
from trainperf.report.html import fmt_int
from trainperf.scaling import second_study_rows

SAME_TRAINING = {"single": "ddp"}  # one process is DDP at world size 1: single → ddp is no change


def studies(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of scaling studies measured at two or more device counts (:func:`keep_experiments`), each study
    an experiment named with its kind (``seed000-scaling (weak scaling)``, ``my-sweep (global batch 8; strong
    scaling)``); a run in two studies is in both (:func:`trainperf.scaling.second_study_rows`; docs/reports.md)."""
    shared = second_study_rows(runs)
    if len(shared):
        attrs, runs = runs.attrs, pd.concat([runs, shared], ignore_index=True).copy()  # copy: one block per dtype
        runs.attrs = attrs
    study = study_of(runs)
    kinds = {name: kind_label(group) for name, group in runs.groupby(study, sort=False)}
    named = {name: f"{name[:-1]}; {kinds[name]})" if name != str(experiment) and name.endswith(")")  # a series
             else f"{name} ({kinds[name]})" for name, experiment in zip(study, runs["experiment"])}
    runs = runs.assign(experiment=study.map(named))
    counts = runs.groupby("experiment")["gpus"].nunique()
    return keep_experiments(runs, counts >= 2, ["gpus", "micro_batch_size", "run_id"],
                            "measured at one device count only: no scaling",
                            "no experiment has runs at two or more device counts (column gpus): measure one "
                            "experiment at several device counts, e.g. with torchrun --nproc-per-node 1, 2, 4 "
                            f"(experiments: {', '.join(map(str, counts.index)) or 'none'})")


def changes(group: pd.DataFrame) -> list[str]:
    """What differs between the runs of one experiment besides the device
    count, e.g. ``strategy ddp (from 8 devices) → fsdp (from 64 devices)``.
    A batch scaled with the devices (strong or weak scaling) and single → ddp
    (:data:`SAME_TRAINING`) are no change."""
    columns = [("strategy", "strategy"), ("precision", "precision"), ("model", "model"), ("platform", "platform"),
               ("seq_len", "sequence length")]
    per_device = group["micro_batch_size"] * group["grad_accum_steps"].fillna(1)
    total = group["global_batch_size"].fillna(per_device * group["gpus"])
    if not (per_device.isna().all() or per_device.nunique() <= 1 or total.nunique() <= 1):  # neither strong nor weak
        columns.insert(1, ("micro_batch_size", "micro-batch size"))
    compared = group[[c for c, _ in columns if c in group]]
    if "strategy" in compared:
        compared = compared.assign(strategy=compared["strategy"].astype("string").str.lower().replace(SAME_TRAINING))
    varies = compared.nunique() > 1
    out = []
    for column, what in ((c, w) for c, w in columns if varies.get(c, False)):
        value = [str(v) for v in compared[column]]
        moves = group.iloc[[i for i, v in enumerate(value) if i == 0 or v != value[i - 1]]]
        out.append(f"{what} " + " → ".join(
            f"{fmt_int(v) if isinstance(v, float) else v} (from {fmt_int(g)} device{'s' if g > 1 else ''})"
            for v, g in zip(moves[column], moves["gpus"])))
    return out


def confounded(runs: pd.DataFrame) -> list[str]:
    """A warning for each experiment whose runs differ in more than the device count."""
    return [f"{name} changes more than the device count: {'; '.join(found)}. Its multiplier mixes scaling with "
            "these changes, so it is not fitted or projected."
            for name, group in by_experiment(runs) if (found := changes(group))]


KIND_LABELS = {"strong": "strong scaling", "weak": "weak scaling", None: "strong or weak not known"}
"""``scaling_kind`` of :func:`trainperf.report.scaling.multipliers.table`, from a study's ``scaling_type``; :func:`studies` puts it in the study's name."""


def kind_of(group: pd.DataFrame) -> str | None:
    """The ``scaling_type`` of one study's runs: ``strong``, ``weak``, or None (not known, or mixed)."""
    kinds = group["scaling_type"].dropna().unique() if "scaling_type" in group else []
    return str(kinds[0]) if len(kinds) == 1 else None


def kind_label(group: pd.DataFrame) -> str:
    """:func:`kind_of` one study's runs in words (:data:`KIND_LABELS`)."""
    return KIND_LABELS.get(kind_of(group), KIND_LABELS[None])


def laws(runs: pd.DataFrame) -> list[str]:
    """Per study, a sentence on which laws judge it (README.md, "Scaling"); one not known is judged as strong
    scaling, and says so."""
    out = []
    for name, group in by_experiment(runs):
        kind = kind_of(group)
        if kind == "weak":
            out.append(f"{name}: the same work per device at every device count. The multiplier is Gustafson's "
                       "scaled speedup and the efficiency the per-device throughput against the baseline's; "
                       "Amdahl's law and the Karp–Flatt serial fraction assume the same total work and are not "
                       "applied (projection: USL only).")
        elif kind == "strong":
            out.append(f"{name}: the same total work per optimizer step at every device count: Amdahl's law, "
                       "USL and the Karp–Flatt serial fraction apply.")
        else:
            out.append(f"{name}: the data does not tell whether the work per step or per device is held (give "
                       "global_batch_size, tokens and steps, or scaling_type): judged as strong scaling.")
    return out

