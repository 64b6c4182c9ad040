"""The shared core of the importers: what a format parser returns, and how its runs become canonical runs rows
(sidecar values merged, run ids given, checked by ``trainperf.table_rules.check_runs``) with the fields missing."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.aggregate import incomplete, stopped_early
from trainperf.errors import DataError, DataWarning
from trainperf.flops import missing_inputs
from trainperf.partials import rank_partials
from trainperf.importers.event_files import is_event_file_name
from trainperf.importers.settings import Settings
from trainperf.importers.text import LineParser
from trainperf.schema import STEP_INTERVAL_COLUMNS, STEP_TIME_ANOMALIES
from trainperf.table_rules import SPEED_INPUTS, check_runs, is_missing

Finish = Callable[[Mapping[str, Any]], tuple[dict[str, Any], "pd.DataFrame | None"]]
"""Turns a run's merged configuration into its measurements (runs columns) and its step intervals
(``trainperf.schema.STEP_INTERVALS``; None for a format that prints only a run's summary)."""


@dataclass
class ParsedRun:
    """One run found in a log: its name in the log (a section title) or None, the line it starts at, what the log
    states about its configuration (runs columns), and how to measure it once the configuration is merged."""

    name: str | None
    line: int
    config: dict[str, Any]
    finish: Finish


@dataclass
class ParsedLog:
    """What a format parser read from one file (or a TensorBoard log dir): its runs, the lines it could not read,
    and notes for the user (each also a ``DataWarning``)."""

    runs: list[ParsedRun]
    skipped: list[tuple[str, int, str]]
    skipped_total: int
    lines: int
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Format:
    """A log format: its name, a title for messages, ``parse(path, settings)`` and ``sniff(head, settings)``, the
    number of its record lines in the cleaned start of a file (0: not this format, or one not told by its text)."""

    name: str
    title: str
    parse: Callable[[Path, Settings], ParsedLog]
    sniff: Callable[[str, Settings], int] = lambda head, settings: 0


class RunParser(LineParser):
    """A line parser that collects runs: :meth:`result` gives them once the file is read."""

    def result(self) -> list[ParsedRun]:
        raise NotImplementedError


def line_format(name: str, title: str, patterns: tuple[re.Pattern[str], ...],
                parser: Callable[[Path], RunParser]) -> Format:
    """A format read line by line by the parser ``parser(path)`` makes and recognised by the number of matches of
    ``patterns`` (its record or section starts) in the head of a file."""
    return Format(name, title, lambda path, settings: read_log(parser(path)),
                  lambda head, settings: sum(len(pattern.findall(head)) for pattern in patterns))


def read_log(parser: RunParser) -> ParsedLog:
    """What ``parser`` reads from its whole file."""
    parser.read()
    return ParsedLog(parser.result(), parser.skipped, parser.skipped_total, parser.lines, parser.notes())


@dataclass(frozen=True)
class Missing:
    """A field neither the log nor the sidecar gives, the derived metrics it blocks, and the runs that lack it."""

    field: str
    blocks: tuple[str, ...]
    runs: tuple[str, ...]
    note: str = ""


@dataclass
class ImportResult:
    """A log read into canonical tables: ``runs``, one row per run; ``steps``, its step intervals (a row per rank per
    record; None where it prints none); ``skipped``, ``(file, line, reason)`` of the first ``text.MAX_SKIPPED_KEPT``
    unreadable record lines (or runs with no measured window), ``skipped_total`` all; ``missing``: :class:`Missing`."""

    path: Path
    format: str
    runs: pd.DataFrame
    steps: pd.DataFrame | None
    skipped: list[tuple[str, int, str]]
    missing: list[Missing]
    skipped_total: int = 0
    lines: int = 0
    warnings: list[str] = field(default_factory=list)


SAMPLES_SOURCE = "extra_samples_source"
"""Column saying why a run's samples are counted rather than taken from a printed rate (also a note)."""
RATE_FROM_REPORTED = "reported throughput (the log gives no token or sample counts)"
"""``extra_time_source`` of a run whose rate is the log's own reported rate."""


def timed_by(measured: dict[str, Any], source: str) -> None:
    """Say where a run's times came from (``extra_time_source``: ``source``) where it has a measured time."""
    if "elapsed_s" in measured:
        measured["extra_time_source"] = source


def _known(row: Mapping[str, Any], *names: str) -> bool:
    return all(not is_missing(row.get(name)) for name in names)


def counted_work(measured: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, bool]:
    """Per unit (``tokens``, ``samples``), whether a run's window counts its work or its configuration can (samples ·
    ``seq_len``; steps · ``global_batch_size``, or micro-batch · accumulation · devices)."""
    known = partial(_known, config)
    batch = known("global_batch_size") or known("micro_batch_size", "grad_accum_steps", "gpus")
    samples = "samples" in measured or batch and "steps" in measured
    return {"tokens": "tokens" in measured or samples and known("seq_len"), "samples": samples}


def rate_from_reported(measured: dict[str, Any], config: Mapping[str, Any]) -> None:
    """Where a run's work is not counted (:func:`counted_work`), the log's own rate is its throughput:
    ``reported_tokens_per_s`` (global), else ``reported_tokens_per_s_per_gpu`` × ``gpus`` (likewise for samples);
    ``extra_time_source`` then says so (and rates are not compared)."""
    known, counted = partial(_known, config), counted_work(measured, config)
    for unit in ("tokens", "samples"):
        if counted[unit]:
            continue
        rate = measured.get(f"reported_{unit}_per_s", math.nan)
        if not rate > 0 and known("gpus"):
            rate = measured.get(f"reported_{unit}_per_s_per_gpu", math.nan) * float(config["gpus"])
        if rate > 0:
            measured[f"{unit}_per_s"] = rate
            measured["extra_time_source"] = RATE_FROM_REPORTED


APPROXIMATE = 0.001
"""Relative rounding (half the last printed digit over the value) beyond which a printed input is approximate."""
REPORTED_CONVENTION = "extra_reported_flops_convention"
"""Column naming the FLOPs convention (``trainperf.flops``) of the figures a log printed itself: its ``reported_*``
FLOP/s and MFU are compared with trainperf's under that convention."""

PER_GPU = ("tokens_per_s_per_gpu", "samples_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu",
           "scaling_efficiency", "gpu_hours", "cost_usd")
FLOPS = ("flops_per_token", "tflops_total", "tflops_per_gpu", "mfu", "hfu")
TOKEN_RATES = ("tokens_per_s", "tokens_per_s_per_gpu", "tokens_per_day")
SAMPLE_RATES = ("samples_per_s", "samples_per_s_per_gpu", "samples_per_day")
PEAK = ("peak_tflops_per_gpu", "mfu", "hfu")
_SIX_N = "flops_per_token falls back to 6N (no attention term)"


def missing_fields(row: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...], str]]:
    """``(field, blocked derived metrics, note)`` for each input ``row`` lacks that ``trainperf.derive`` needs."""
    known = partial(_known, row)
    found: dict[str, tuple[list[str], str]] = {}

    def lack(name: str, blocks: tuple[str, ...], note: str = "") -> None:
        if not known(name):  # each field once: the metrics it blocks merged, its first note kept
            blocked, old = found.get(name, ([], ""))
            found[name] = (list(dict.fromkeys([*blocked, *blocks])), old or note)

    lack("gpus", PER_GPU)
    batch = known("global_batch_size") or known("micro_batch_size", "grad_accum_steps", "gpus")
    has_samples = known("samples") or known("samples_per_s") or batch and (known("steps") or known("step_time_s"))
    if not (known("tokens") or known("tokens_per_s")):
        if has_samples:
            lack("seq_len", TOKEN_RATES + FLOPS[1:])
        elif known("steps") and not batch:
            lack("global_batch_size", SAMPLE_RATES + TOKEN_RATES + FLOPS[1:])
            lack("seq_len", TOKEN_RATES + FLOPS[1:])
        else:
            lack("tokens", TOKEN_RATES + SAMPLE_RATES + FLOPS[1:],
                 "without it runs of one experiment are compared as doing equal work")
    if not known("flops_per_token"):
        convention = row.get("flops_convention")
        if not is_missing(convention):
            for name in missing_inputs(row, str(convention)):
                lack(name, FLOPS)
        else:
            if not known("n_active_params"):
                lack("n_params", FLOPS)
            for name in ("n_layers", "d_model", "seq_len"):
                lack(name, (), _SIX_N)
    if not known("peak_tflops_per_gpu"):
        for name in ("platform", "precision"):
            lack(name, PEAK)
    lack("activation_checkpointing", ("hfu",))
    lack("price_per_gpu_hour", ("cost_usd",))
    return [(name, tuple(blocks), note) for name, (blocks, note) in found.items()]


class Unmeasured(DataError):
    """A log read by one format in which no run has a measured window (another format may time it)."""


def build_result(path: Path, fmt: Format, parsed: ParsedLog, settings: Settings) -> ImportResult:
    """Canonical runs (and steps) of a parsed log, with the settings merged."""
    stem = log_stem(path)
    several = len(parsed.runs) > 1
    default_ids = [run.name or (f"{stem}-{k}" if several else stem) for k, run in enumerate(parsed.runs, 1)]
    if several and "run_id" in settings.values:
        raise DataError(f"run_id names one run but this log holds {len(parsed.runs)} ({', '.join(default_ids)}): "
                        "give ids under 'runs:' in the sidecar", path=path, column="run_id")
    rows: list[dict[str, Any]] = []
    steps: list[pd.DataFrame] = []
    skipped = list(parsed.skipped)
    notes: list[str] = list(parsed.notes)
    for run, default_id in zip(parsed.runs, default_ids):
        explicit = settings.for_run(default_id)
        config = {**run.config, **explicit}
        measured, run_steps = run.finish(config)
        row: dict[str, Any] = {"run_id": default_id, "experiment": stem, "source": str(path), "gpus": math.nan,
                               **run.config, **measured}
        for key, value in explicit.items():
            if key in ("warmup_steps", "warmup_rule") and key in measured:
                continue  # read as the warm-up to exclude and how; measured says what was excluded
            said = measured.get(key, run.config.get(key))
            if not is_missing(said) and not _same(said, value):
                notes.append(f"{path}: run {default_id}: the log says {key}={said!r} but "
                             f"{settings.origin(default_id, key)} sets {value!r}; using {value!r}")
            row[key] = value
        row["extra_log_format"] = fmt.name
        for noted in (STEP_TIME_ANOMALIES, SAMPLES_SOURCE):
            if noted in measured:
                notes.append(f"{path}: run {row['run_id']}: {measured[noted]}")
        if not any(not is_missing(row.get(c)) for c in SPEED_INPUTS):
            timed = run_steps is not None and run_steps["step_s"].notna().any()
            counted = counted_work(measured, config)  # a rate stands for the work nothing counts
            rated = [u for u in counted if not counted[u] and measured.get(f"reported_{u}_per_s_per_gpu", 0) > 0]
            needs = (f"; its {rated[0]} rate is per device: give gpus (in the sidecar, docs/importers.md) to take it "
                     "as the job's" if rated and is_missing(row.get("gpus")) else "")
            why = ("only warm-up or incomplete records" if timed else
                   f"no record gives a time: no step time, timestamp, runtime or throughput{needs}")
            skipped.append((str(path), run.line, f"run {row['run_id']}: no measured window ({why})"))
            continue
        rows.append(row)
        if run_steps is not None and len(run_steps):
            steps.append(run_steps.assign(run_id=row["run_id"]))
            stopped = stopped_early(rank_partials(run_steps), None, None)
            if stopped:
                notes.append(f"{path}: {incomplete(str(row['run_id']), stopped)}")
    for note in notes:
        warnings.warn(note, DataWarning, stacklevel=3)
    skipped_total = parsed.skipped_total + len(skipped) - len(parsed.skipped)
    if not rows:
        shown = "; ".join(f"line {line}: {reason}" for _, line, reason in skipped[:3])
        raise Unmeasured(f"read as {fmt.title} but no run has a measured window"
                        + (f" ({skipped_total} problem(s); first: {shown})" if shown else " (no record lines found)"),
                        path=path)
    runs = check_runs(pd.DataFrame(rows), path)
    table = None  # the steps table, None where the log prints no steps; every format's intervals have every column
    if steps:
        table = pd.concat(steps, ignore_index=True).astype({"run_id": "string"})[list(STEP_INTERVAL_COLUMNS)]
    return ImportResult(path=path, format=fmt.name, runs=runs, steps=table, skipped=skipped,
                        missing=_missing_list(runs), lines=parsed.lines, skipped_total=skipped_total, warnings=notes)


def log_stem(path: Path) -> str:
    """The file name without ``.gz`` and its last suffix (``train.log.gz`` -> ``train``);
    a folder's name; an event file's log dir's name (``tb/events.out.tfevents.1.host`` -> ``tb``)."""
    if path.is_dir():
        return path.name
    if is_event_file_name(path):
        return path.resolve().parent.name
    name = path.name.removesuffix(".gz")
    return Path(name).stem or name


def _missing_list(runs: pd.DataFrame) -> list[Missing]:
    """Each field the ``runs`` still need, once, with the runs that lack it."""
    collected: dict[str, tuple[tuple[str, ...], str, list[str]]] = {}
    for row in runs.to_dict("records"):
        for name, blocks, note in missing_fields(row):
            collected.setdefault(name, (blocks, note, []))[2].append(str(row["run_id"]))
    return [Missing(name, blocks, tuple(ids), note) for name, (blocks, note, ids) in collected.items()]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return str(a) == str(b)

