"""Run folders as an input kind (their format: ``trainperf.runfolder``): read a part at a time into the store, and
measured into one runs row from the summaries of their step intervals. Steps tables' runs are measured the same way,
without a folder (:func:`summarized_runs`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.aggregate import Summaries, incomplete, measure, stopped_early, summarize
from trainperf.errors import DataError, DataWarning, NoMeasuredSteps
from trainperf.goodput import goodput
from trainperf.reading import store
from trainperf.reading.tables import as_intervals
from trainperf.runfolder.manifest import MANIFEST_FILE, check_manifest
from trainperf.runfolder.rankfile import STEPS_FILE_PATTERN, BadLine, warn_bad_lines
from trainperf.runfolder.reader import RunFolder, model_parallel, open_run_folder, runs_row
from trainperf.table_rules import check_runs


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder (it holds ``manifest.json``); DataError for steps-rank files without one."""
    if not path.is_dir():
        return False
    if (path / MANIFEST_FILE).exists():
        return True
    if any(STEPS_FILE_PATTERN.match(child.name) for child in path.iterdir()):
        raise DataError(f"a run folder without {MANIFEST_FILE}: the profiler writes it next to the steps-rank "
                        "files when the run starts (its configuration, devices and peak); copy it with them",
                        path=path)
    return False


def entry(path: Path, scheduler: Any, key: str | None, folder: RunFolder | None = None) -> store.Entry:
    """The store entry of the run folder at ``path`` (``key``: its ``input_key``; None with the store off); the lines
    that could not be read are reported in one DataWarning."""
    folder = folder or open_run_folder(path)
    rule = folder.manifest.get("warmup_rule") or "mser"  # checked by check_manifest
    found = store.entry(folder.parts, scheduler, key, rule)
    bad = [BadLine(Path(file), line, reason) for file, line, reason in found.facts.get("bad_lines", [])]
    events = any(STEPS_FILE_PATTERN.match(b.path.name) is None for b in bad)
    warn_bad_lines(bad, "steps and events files" if events else "steps files", stacklevel=4)
    return found


def read_runs(path: Path, scheduler: Any, key: str | None) -> pd.DataFrame:
    """The checked runs row of the run folder at ``path`` (``key`` as for :func:`entry`)."""
    folder = open_run_folder(path)
    found = entry(path, scheduler, key, folder)
    return check_runs(pd.DataFrame([_runs_row(folder, found.summaries, found.facts)]), path)


def aggregate_steps(steps: pd.DataFrame, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One canonical runs row per ``run_id`` of step intervals (a steps table), measured by
    ``trainperf.aggregate.measure``. ``manifests`` maps a run_id to its run manifest (``manifest.json``'s content):
    its ``config`` keys become columns, its environment gives ``gpus``, ``nodes``, ``platform``, ... (see
    ``trainperf.runfolder.reader.runs_row``); without one, ``gpus`` is the number of ranks."""
    intervals = as_intervals(steps)
    if intervals.empty:
        raise DataError("no steps to aggregate")
    return summarized_runs(summarize(intervals), manifests)


def summarized_runs(summaries: Summaries, manifests: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One canonical runs row per run of ``summaries`` (``manifests`` as in :func:`aggregate_steps`): the runs of steps
    tables without holding their step rows (``summarized_runs(load_summaries(path))``)."""
    manifests = manifests or {}
    rows = []
    for run_id in summaries.run_ids:
        manifest = dict(manifests.get(run_id) or {})
        manifest["config"] = {"run_id": run_id, **(manifest.get("config") or {})}
        check_manifest(manifest, f"manifest of run {run_id}")
        rows.append(_runs_row(RunFolder(Path(run_id), manifest, ()), summaries, None))
    return pd.DataFrame(rows)


def _runs_row(folder: RunFolder, summaries: Summaries, facts: Mapping[str, list] | None) -> dict[str, Any]:
    """The runs row of a run from the summaries of its step intervals and the reader's ``facts`` (a run folder's;
    None for a steps table's run, read without one); :class:`NoMeasuredSteps` when a run folder has no measured
    step, unless a step ran out of memory (then the row says that it does not fit)."""
    run = summaries.select([folder.run_id])
    closed = None if facts is None else facts.get("closed", [])
    read, facts = facts is not None, facts or {}
    out_of_memory = facts.get("out_of_memory", [])  # [rank, step, ooms] of each step that ran out of memory
    if read and not out_of_memory and not run.per_rank["measured_intervals"].gt(0).any():
        lines = int(run.per_rank["intervals"].sum())
        raise NoMeasuredSteps(f"no measured steps: {lines} step line(s){', all warm-up' if lines else ''} "
                              f"(warmup_steps = {folder.manifest.get('warmup_steps')})", path=folder.path)
    world = folder.world_size
    expected = range(world) if world else sorted(run.per_rank["rank"].astype(int))
    # a rank whose lines beyond those every rank had written were left out (a run still being written): as written
    written = run.per_rank.set_index("rank")
    for rank, lines, last in facts.get("ahead", []):
        written.loc[rank, ["intervals", "last_step"]] = [lines, last]
    if stopped := stopped_early(written.reset_index(), expected, closed):
        warnings.warn(incomplete(folder.run_id, stopped), DataWarning, stacklevel=4)
    measured = measure(summaries, folder.run_id, expected_ranks=expected, closed_ranks=closed, batch_facts=True,
                       model_parallel=model_parallel(folder.config))
    if out_of_memory:  # the run does not fit its devices; ooms counts their errors too
        measured.update(fits=False, ooms=int(measured.get("ooms") or 0) + sum(int(n) for *_, n in out_of_memory),
                        extra_out_of_memory="; ".join(f"rank {rank} step {step}" for rank, step, _ in out_of_memory))
    elif set(expected) <= set(facts.get("memory_checked", [])):  # every rank could record one, and none did
        measured["fits"] = True
    measured.update(goodput(run.per_rank, {int(r): w for r, w in facts.get("wall_s", [])}, facts.get("outside", [])))
    waited = sorted({(int(rank), str(name)) for rank, name in facts.get("waited_for", [])})
    if waited and measured.get("wait_outside_s", 0.0) > 0:
        measured["wait_outside_for"] = ", ".join(f"rank {rank}'s {name}" for rank, name in waited)
    return runs_row(folder, measured, run.per_rank["node"].astype(str).tolist())
