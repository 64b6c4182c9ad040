"""Step-interval records of a training log (one line of one rank: ``n_steps`` steps ending at ``step`` in
``seconds``), their parsers' base (:class:`IntervalParser`), records of named figures (:data:`GROUPS`) and the
measurement of their window by the one aggregator (:func:`measure_window`).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Collection, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd

from trainperf.aggregate import measure, summarize
from trainperf.errors import DataError
from trainperf.importers.core import REPORTED_CONVENTION, ParsedRun, RunParser, rate_from_reported, timed_by
from trainperf.importers.text import LineError, parse_wrapped, rank_prefix
from trainperf.schema import LONGEST_INTERVAL_S, STEP_INTERVAL_COLUMNS, STEP_TIME_ANOMALIES, STEPS_SET_ASIDE
from trainperf.steady_state import FAR_OUT_IQR, far_out_fence
from trainperf.table_rules import is_missing

FIELDS: tuple[str, ...] = ("rank", "step", "n_steps", "seconds", "weight", "samples", "tokens", "loss",
                           "memory_gb", "excluded", "energy_j")
"""Numeric fields of a record, in order; NaN where the log does not say. ``weight`` is the record's duration or any
quantity proportional to it; ``excluded`` is 1 for a record that is no training measurement (it includes an
evaluation), 2 for one whose time another record contains; ``energy_j``: the whole job's energy over the record (J)."""
COLUMN = {name: j for j, name in enumerate(FIELDS)}

NAN = math.nan
COPY_STRIDE = 1_000_000
"""Rank offset of the copies of a labelled rank's line (see :meth:`IntervalParser.rank_of`)."""
BROKEN: tuple[float, ...] = (NAN,)
"""Marks a rank whose previous record line could not be read: its next record's length is unknown."""


class Intervals:
    """The records of one run, each :data:`FIELDS` followed by the figures named in ``reported`` (e.g.
    ``tflops_per_gpu``), stored as one flat array of doubles (8 bytes a value: a 1 GB log fits in memory)."""

    def __init__(self, reported: tuple[str, ...]) -> None:
        self.reported = reported
        self.width = len(FIELDS) + len(reported)
        self.data = array("d")
        self.last_step: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.data) // self.width

    def add(self, row: tuple[float, ...]) -> None:
        """Append a record (its rank and step, ``row[0]`` and ``row[1]``, ints)."""
        self.data.extend(row)
        self.last_step[row[0]] = row[1]  # type: ignore[index]

    def drop(self, rows: np.ndarray) -> None:
        """Leave out the records at the indices ``rows``."""
        kept = np.delete(self.table(), rows, axis=0)
        self.data = array("d", kept.tobytes())

    def table(self) -> np.ndarray:
        """The records as a (records x fields) array sharing their memory."""
        return np.frombuffer(self.data, dtype=float).reshape(-1, self.width)


class Run:
    """A run of a step-interval log: its configuration (runs columns stated before it) and each rank's last record
    line, which the next one's interval is measured from (``previous``; :data:`BROKEN` after an unreadable one)."""

    def __init__(self, line: int, config: dict[str, Any], reported: tuple[str, ...]) -> None:
        self.line = line
        self.config = config
        self.records = Intervals(reported)
        self.previous: dict[int, tuple[float, ...]] = {}
        self.val_loss = NAN
        self.restarted = False  # follows a restart in the same log: its first steps are a warm-up again
        self.echoed = array("q")  # the records of lines the same as the line before them (IntervalParser.result)


RunT = TypeVar("RunT", bound=Run)


class IntervalParser(RunParser, Generic[RunT]):
    """Base of the parsers of step-interval logs: a record line starts where :attr:`start` matches; each run
    (:meth:`run_at`: with the configuration read so far, ``config``) is measured by :meth:`finish`."""

    start: re.Pattern[str]
    reported: tuple[str, ...] = ()

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.config: dict[str, Any] = {}
        self.run: RunT | None = None
        self.done: list[RunT] = []
        self.copies: dict[int | None, tuple[int, int]] = {}
        self.counted: dict[int | None, int] = {}
        self.epochs: dict[int | None, tuple[float, int, int, int]] = {}
        self.echo = False  # the line being read is the same as the one before it
        self.parsed: tuple[str, tuple[Any, ...]] | None = None  # the last record line read alone, as parsed
        self.labelled = False  # some record line has a launcher prefix
        self.copies_differ = False  # some copy of a step differs from the line before it: several ranks print

    def repeated_line(self, lines: list[str], i: int, number: int) -> int:
        """Read a record line the same as the one just before it as the next copy of its step (:meth:`rank_of`):
        a wrapper's echo, or another rank printing the same figures without a prefix (:meth:`result` tells which);
        any other such line once."""
        if not self.starts_record(lines[i]):
            return super().repeated_line(lines, i, number)
        self.echo, run = True, self.run
        before = len(run.records) if run is not None else 0
        try:
            used = self.handle(lines, i, number)
        finally:
            self.echo = False
        if self.run is not None and len(self.run.records) > (before if self.run is run else 0):
            self.run.echoed.append(len(self.run.records) - 1)
        else:
            self.repeated += 1  # read as nothing new
        return used

    def count_step(self, rank: int | None) -> int:
        """The step of a record line that prints no step number, for the rank its launcher prefix names (None: no
        prefix): its rank's lines are steps 1, 2, 3, ... in the order of the file (a repeated line: its step again)."""
        self.counted[rank] = self.counted.get(rank, 0) + (not self.echo)
        return self.counted[rank]

    def across_epochs(self, rank: int | None, epoch: float, step: int) -> int:
        """The step a record of ``epoch``'s ``step`` is, for a counter that restarts each epoch, per launcher prefix
        ``rank`` (None: none): counted on across epochs; an earlier epoch is a restart (counted from 0 again)."""
        last_epoch, offset, raw, numbered = self.epochs.get(rank, (epoch, 0, -1, 0))
        if epoch > last_epoch and step <= raw:
            offset = numbered
        elif epoch < last_epoch:
            offset = 0
        self.epochs[rank] = (epoch, offset, step, offset + step)
        return offset + step

    def rank_of(self, rank: int | None, step: int) -> int:
        """The rank of a record of ``step`` whose launcher prefix names ``rank`` (None: none): the k-th line of one
        step in a row is rank k, or ``rank + k·COPY_STRIDE`` (docs/importers.md, "Tolerance")."""
        last, copies = self.copies.get(rank, (-1, 0))
        copies = copies + 1 if step == last else 0
        self.copies[rank] = (step, copies)
        self.copies_differ |= bool(copies) and not self.echo
        self.labelled |= rank is not None
        return (0 if rank is None else rank) + copies * (1 if rank is None else COPY_STRIDE)

    def new_run(self, line: int) -> RunT:
        return Run(line, dict(self.config), self.reported)  # type: ignore[return-value]

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        """Add the record read from ``line``; a reason if its interval cannot be used."""
        raise NotImplementedError

    def finish(self, run: RunT, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        """The measurements (runs columns) and step intervals of ``run`` under its merged ``config``."""
        raise NotImplementedError

    def starts_record(self, text: str) -> bool:
        return self.start.search(text) is not None

    def read_record(self, lines: list[str], i: int, number: int, parse: Callable[[str], tuple[Any, ...]],
                    what: str) -> int:
        """Read the record line ``lines[i]`` (line ``number``; ``text.parse_wrapped``) with ``parse`` and :meth:`add`
        it; the lines used. One that cannot be read or used is skipped (``what`` in the reason)."""
        try:
            if self.echo and self.parsed is not None and self.parsed[0] == lines[i]:
                parsed, used = self.parsed[1], 1
            else:
                parsed, used = parse_wrapped(lines, i, parse, self.starts_record)
                self.parsed = (lines[i], parsed) if used == 1 else None
        except LineError as exc:
            self.parsed = None
            self.skip(number, f"{what}: {exc}")
            self.break_chain(rank_prefix(lines[i])[0])
            return 1
        problem = self.add(number, parsed)
        if problem:
            self.skip(number, f"{what}: {problem}")
        return used

    def break_chain(self, rank: int | None) -> None:
        """After an unreadable record line of ``rank`` (None: every rank), its next record has an unknown length."""
        if self.run is not None:
            self.run.previous.update(dict.fromkeys(self.run.previous if rank is None else [rank], BROKEN))

    def add_timed(self, line: int, label: int | None, step: int, when: float, loss: float, memory_gb: float,
                  reported: tuple[float, ...], first: int = -1) -> tuple[RunT, str]:
        """Add the record of a line stamped ``when`` (s) of launcher prefix ``label``: its steps and time since its
        rank's previous line (NaN after none, steps 1 at step ``first``, or an unreadable one), weighted by that time,
        else by its steps (1 where unknown) over its rate ``reported[0]``. Its run, and why it is not added ('')."""
        rank = self.rank_of(label, step)
        run = self.run_at(line, rank, step)
        previous = run.previous.get(rank)
        if previous is None or previous is BROKEN:
            n, seconds = (1.0 if step == first and previous is None else NAN), NAN
        else:
            n, seconds = float(step - previous[0]), when - previous[1]
            if seconds <= 0:
                run.previous[rank] = BROKEN
                return run, f"timestamp not after the previous line of rank {rank} ({seconds:+.3f} s)"
        run.previous[rank] = (step, when)
        weight = seconds if math.isfinite(seconds) else (n if math.isfinite(n) else 1.0) / reported[0]
        run.records.add((rank, step, n, seconds, weight, NAN, NAN, loss, memory_gb, 0.0, NAN, *reported))
        return run, ""

    def run_at(self, line: int, rank: int, step: int) -> RunT:
        """The run of a record of ``rank`` at ``step``: the current one, or a new one if the step does not advance."""
        run = self.run
        last = None if run is None else run.records.last_step.get(rank)
        if run is None or last is not None and step <= last:
            if run is not None:
                self.done.append(run)
            run = self.run = self.new_run(line)
            run.restarted = bool(self.done)
        return run

    def result(self) -> list[ParsedRun]:
        """The runs read. Where no copy of a step differs from the line before it, the lines the same as the line
        before them are echoes (docs/importers.md, "Tolerance"): their records are left out, each line read once.
        Where copies differ, several ranks print; only where every line is printed k times in a row are all but
        every k-th of those lines echoes (and the ranks of unlabelled copies counted again from 0 by k)."""
        runs = self.done + ([self.run] if self.run is not None else [])
        echoes = [(run, np.isin(np.arange(len(run.records)), run.echoed)) for run in runs if run.echoed]
        rows = [np.diff(np.flatnonzero(np.append(~echo, True))) for _, echo in echoes]  # rows of one line: lengths
        fold = int(np.gcd.reduce(np.concatenate(rows))) if echoes and self.copies_differ else 0
        for run, echo in echoes:
            drop = echo
            if fold:  # each record's place in its row (0: the line, 1: its first repeat, ...)
                place = np.arange(len(echo)) - np.maximum.accumulate(np.where(echo, 0, np.arange(len(echo))))
                drop = echo & (place % fold != 0)
            self.repeated += int(drop.sum())
            run.records.drop(np.flatnonzero(drop))
            if fold > 1 and not self.labelled:
                run.records.table()[:, COLUMN["rank"]] //= fold
        return [ParsedRun(None, run.line, run.config, partial(self.finish, run)) for run in runs]


def measure_window(records: Intervals, config: Mapping[str, Any], origin: float | None = None,
                   least_warmup: int = 1) -> tuple[dict[str, Any], pd.DataFrame]:
    """Measurements of the run's window (a dict of runs columns, by ``trainperf.aggregate.measure``) and its
    step intervals (``run_id`` left empty for the caller to name), by the rules of docs/importers.md, "The
    measured window": a stated warm-up as given, else MSER on top of ``least_warmup`` steps; ``origin``, the
    number of the job's first step where the log numbers steps from it (None: unknown), tells an excerpt."""
    table, anomalies, set_aside = join_timer_glitches(records.table())
    col = {name: table[:, j] for j, name in enumerate(FIELDS + records.reported)}
    warmup = config.get("warmup_steps")
    stated = not is_missing(warmup)
    warmup = int(warmup) if stated else least_warmup
    ranks, first_record, group = np.unique(col["rank"], return_index=True, return_inverse=True)
    first_covered = col["step"] - col["n_steps"] + 1
    if origin is not None:
        usual = pd.Series(col["n_steps"]).groupby(group).transform("median").fillna(1.0).to_numpy()
        first_covered = np.where(np.isfinite(first_covered), first_covered, col["step"] - usual + 1)
    start = first_covered[first_record]
    excerpt = origin is not None and bool((start >= origin + warmup).all())
    if origin is not None:
        start = np.where(start >= origin + warmup, start - warmup, np.where(start >= origin, origin, start))
    boundary = np.where(np.isfinite(start), start, col["step"][first_record]) + warmup
    in_window = np.isfinite(first_covered) & (first_covered >= boundary[group])
    if np.isfinite(col["seconds"]).any():
        in_window &= np.isfinite(col["seconds"])
    rule = config.get("warmup_rule")
    rule = ("fixed" if stated else "mser") if is_missing(rule) else str(rule)
    summaries = summarize(_intervals(col, in_window, config), rules="fixed" if excerpt else rule)
    steady_from = summaries.warmup["first_step"].dropna()
    if len(steady_from):  # the records before the steady state are warm-up too
        in_window &= col["step"] >= float(steady_from.iloc[0])
    intervals = _intervals(col, in_window, config)
    anomalies += far_out(col, in_window)
    if not summaries.per_rank["measured_intervals"].gt(0).any():  # no measured window: nothing to measure
        excluded = int(summaries.per_rank["excluded_intervals"].sum())
        return ({"extra_excluded_records": excluded} if excluded else {}), intervals
    out = measure(summaries, "")
    if anomalies:
        out[STEP_TIME_ANOMALIES] = "; ".join(anomalies)
        out[STEPS_SET_ASIDE] = set_aside
    window = in_window & (col["excluded"] == 0)  # the records of the measured intervals
    weight = col["weight"][window]
    for name in records.reported:
        values = col[name][window]
        usable = np.isfinite(values) & np.isfinite(weight) & (weight > 0)
        if usable.any():
            out[f"reported_{name}"] = float(np.average(values[usable], weights=weight[usable]))
    return out, intervals


def join_timer_glitches(table: np.ndarray) -> tuple[np.ndarray, list[str], int]:
    """The records with each timer glitch (a time ≤ 0 s) joined with its rank's record before it, and what cannot
    be joined or be true set aside (docs/importers.md, "The measured window"): the records (a copy where any
    changed), a sentence for each glitch and the steps set aside (a record of unknown length counts as one)."""
    seconds = table[:, COLUMN["seconds"]]
    impossible = np.isinf(seconds) | (seconds > LONGEST_INTERVAL_S)
    glitches = np.flatnonzero((seconds <= 0) | impossible)
    if not len(glitches):
        return table, [], 0
    table = table.copy()
    col = {name: table[:, j] for name, j in COLUMN.items()}
    notes = []
    set_aside = 0
    for i in glitches:
        earlier = np.flatnonzero((col["rank"][:i] == col["rank"][i]) & (col["excluded"][:i] != 2))
        step, own, evaluated = int(col["step"][i]), col["seconds"][i], col["excluded"][i] == 1
        col["excluded"][i] = 2
        if impossible[i] or not len(earlier) or not col["seconds"][earlier[-1]] + own > 0:
            set_aside += int(col["n_steps"][i]) if np.isfinite(col["n_steps"][i]) else 1
            why = (f"is impossible (more than {LONGEST_INTERVAL_S / 86400:g} days)" if impossible[i] else
                   f"that step {int(col['step'][earlier[-1]])} ({col['seconds'][earlier[-1]]:g} s) does not make up "
                   "for" if len(earlier) else "with no step before it to make up for it")
            notes.append(f"step {step}: a step time of {own:g} s {why}, set aside")
            continue
        j = earlier[-1]
        joined = col["seconds"][j] + own
        notes.append(f"step {step}: a step time of {own:g} s, joined with step {int(col['step'][j])} "
                     f"({col['seconds'][j]:g} s) into {joined:g} s for both")
        for name in ("samples", "tokens", "n_steps"):  # NaN stays NaN: the joined interval's work is unknown
            col[name][j] += col[name][i]
        col["seconds"][j] = col["weight"][j] = joined
        col["step"][j], col["loss"][j] = col["step"][i], col["loss"][i]
        if evaluated:
            col["excluded"][j] = 1
    return table, notes, set_aside


FAR_OUT_MIN_RECORDS = 8
"""Measured records a run needs before its quartiles are used."""


def far_out(col: dict[str, np.ndarray], in_window: np.ndarray) -> list[str]:
    """A sentence on the measured records whose time per step (``seconds / n_steps``, s) is above the run's
    ``steady_state.far_out_fence``; they stay in the measurement."""
    per_step = col["seconds"] / col["n_steps"]
    timed = in_window & (col["excluded"] == 0) & np.isfinite(per_step) & (col["n_steps"] >= 1)
    times = per_step[timed]
    if len(times) < FAR_OUT_MIN_RECORDS:
        return []
    fence = far_out_fence(times)
    out = timed & (per_step > fence)
    if not out.any():
        return []
    steps = sorted(set(int(s) for s in col["step"][out]))
    shown = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
    return [f"{int(out.sum())} measured step time(s) far above the others (over Q3 + {FAR_OUT_IQR:g} IQR = "
            f"{fence:.3g} s: step {shown}), kept in the measurement"]


def _intervals(col: dict[str, np.ndarray], in_window: np.ndarray, config: Mapping[str, Any]) -> pd.DataFrame:
    """The step intervals of a log's records: every record but those whose time another record contains, by
    rank (each in file order), the job's work shared among the ranks that print the step; ``start_s`` is
    known for records of single steps (:func:`_starts`)."""
    keep = np.flatnonzero(col["excluded"] != 2)
    keep = keep[np.argsort(col["rank"][keep], kind="stable")]  # by rank, each in file order
    rank, step, seconds, n_steps = col["rank"][keep], col["step"][keep], col["seconds"][keep], col["n_steps"][keep]
    evaluated = col["excluded"][keep] == 1
    single = (n_steps == 1) & ~evaluated
    start = np.full(len(keep), np.nan)
    start[single] = _starts(rank[single], step[single], seconds[single])
    _, printed, printers = np.unique(step, return_inverse=True, return_counts=True)
    micro = config.get("grad_accum_steps")
    frame = pd.DataFrame({
        "run_id": pd.Series("", index=range(len(keep)), dtype="string"),
        "rank": rank.astype(np.int64), "step": step.astype(np.int64), "n_steps": n_steps,
        "node": pd.Series("", index=range(len(keep)), dtype="string"),
        "warmup": ~in_window[keep], "includes_evaluation": evaluated, "start_s": start, "step_s": seconds,
        "tokens": col["tokens"][keep] / printers[printed], "samples": col["samples"][keep] / printers[printed],
        "micro_steps": np.full(len(keep), np.nan if is_missing(micro) else float(micro)),
        "loss": col["loss"][keep], "peak_memory_gb": col["memory_gb"][keep],
        "energy_j": col["energy_j"][keep] / printers[printed],
    })
    return frame.reindex(columns=list(STEP_INTERVAL_COLUMNS))


def _starts(rank: np.ndarray, step: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """``start_s`` of single-step records sorted by rank (each rank in file order): seconds since the start of the
    rank's first timed step, summed over the steps before it while they follow one another and are timed; NaN before
    that step and after a gap."""
    n = len(step)
    if n == 0:
        return np.empty(0)
    index = np.arange(n)
    first = np.concatenate([[True], rank[1:] != rank[:-1]])
    group_first = np.maximum.accumulate(np.where(first, index, 0))
    timed = np.isfinite(seconds)
    timed_upto = np.cumsum(timed)
    started = timed_upto - (timed_upto - timed)[group_first] > 0  # a timed step at or before this one
    origin = started & ~(np.concatenate([[False], started[:-1]]) & ~first)
    origin_index = np.maximum.accumulate(np.where(origin, index, 0))
    previous = np.concatenate([[np.nan], seconds[:-1]])
    gaps = np.cumsum(started & ~origin & ((np.diff(step, prepend=np.nan) != 1) | ~np.isfinite(previous)))
    durations = np.where(timed, seconds, 0.0)
    before = np.cumsum(durations) - durations
    return np.where(started & (gaps == gaps[origin_index]), before - before[origin_index], np.nan)


def finite(value: float) -> float:
    """``value``, or NaN where it is infinite (runs columns hold finite numbers)."""
    return value if math.isfinite(value) else NAN


GROUPS = ("step", "epoch", "step_time_s", "step_time_ms", "tokens", "samples", "tokens_per_s", "tokens_per_s_per_gpu",
          "samples_per_s", "loss", "mfu_percent", "tflops_per_gpu", "memory_gb")
"""The named figures a pattern's groups or a TensorBoard tag mapping may give (docs/importers.md, "A log of any
stack"): the optimizer step and its epoch (whole numbers), the step's wall time (s, ms), the tokens and samples
the whole job processed in it, the job's rates (tokens/s, samples/s) and the per-device one (tokens/s), the
training loss, MFU (%), TFLOP/s per device and peak device memory (GiB)."""
TIMING = ("step_time_s", "step_time_ms", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s")
"""A pattern or a mapping needs one of these: a step time or a rate."""
REPORTED = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "tflops_per_gpu", "power_w_per_gpu")
"""The source's own figures a record keeps, after :data:`FIELDS`."""
RATES = REPORTED[:3]


def check_names(names: Collection[Any], allowed: tuple[str, ...], noun: str, what: str, where: object,
                column: str, hint: str = "") -> None:
    """DataError naming ``where`` and ``column`` unless each of ``names`` is one of the ``allowed`` figures (the
    ``noun``: a pattern's groups, a mapping's figures) and one of them is of :data:`TIMING`, as ``what`` needs."""
    unknown = sorted(str(name) for name in names if name not in allowed)
    if unknown:
        raise DataError(f"unknown {noun}(s) {', '.join(unknown)}: the {noun}s are {', '.join(allowed)}{hint}",
                        path=where, column=column)
    if not set(names) & set(TIMING):  # none at all too
        raise DataError(f"{what} needs a step time or a rate: one of the {noun}s {', '.join(TIMING)}", path=where,
                        column=column)


def record(values: Mapping[str, float], rank: int, step: int, n_steps: float = 1.0,
           timed_steps: float | None = None, excluded: float = 0.0) -> tuple[float, ...]:
    """The record of ``rank`` ending at ``step`` that covers ``n_steps`` steps (NaN: unknown) with the per-step
    figures ``values`` (names of :data:`GROUPS`) and ``excluded`` (:data:`FIELDS`). Its wall time is the step time
    times ``timed_steps`` (default ``n_steps``: the figures are the mean over the steps the record covers); the
    step time is ``step_time_s``, else ``step_time_ms``, else the step's work over its rate (NaN: none of them)."""
    get = values.get
    seconds = get("step_time_s", NAN)
    if not math.isfinite(seconds) and "step_time_s" not in values:
        seconds = get("step_time_ms", NAN) / 1000.0
    if not math.isfinite(seconds):
        rates = ((get(work, NAN), get(f"{work}_per_s", NAN)) for work in ("tokens", "samples"))
        seconds = next((work / rate for work, rate in rates if work > 0 and rate > 0), NAN)
    seconds *= n_steps if timed_steps is None else timed_steps
    weight = seconds
    if not math.isfinite(seconds):
        rate = next((values[r] for r in RATES if get(r, NAN) > 0), NAN)
        weight = (n_steps if math.isfinite(n_steps) else 1.0) / rate
    return (rank, step, n_steps, seconds, weight, n_steps * get("samples", NAN), n_steps * get("tokens", NAN),
            get("loss", NAN), get("memory_gb", NAN), excluded, n_steps * get("energy_per_gpu_j", NAN),
            get("tokens_per_s", NAN), get("tokens_per_s_per_gpu", NAN), get("samples_per_s", NAN),
            get("mfu", get("mfu_percent", NAN) / 100.0), get("tflops_per_gpu", NAN), get("power_w_per_gpu", NAN))


def measure_figures(run: Run, config: Mapping[str, Any], origin: float | None, time_source: str,
                    convention: str | None = None, least_warmup: int = 1,
                    rate_measures: bool = True) -> tuple[dict[str, Any], pd.DataFrame]:
    """:func:`measure_window` of a run, with where its times came from (``time_source``), the FLOPs convention
    of the source's own figures where known, and (``rate_measures``) :func:`~.core.rate_from_reported`."""
    measured, steps = measure_window(run.records, config, None if run.restarted else origin, least_warmup)
    timed_by(measured, time_source)
    if convention is not None:
        measured[REPORTED_CONVENTION] = convention
    if rate_measures:
        rate_from_reported(measured, config)
    return measured, steps
