"""Logs read through the vocabulary (``trainperf.importers.vocabulary``): text ``key: value`` lines, JSON lines,
MLPerf ``:::MLLOG`` and DLLogger ``DLLL`` lines, and the logs of the stacks whose reader is a :class:`Stack`
(docs/importers.md, "The vocabulary").
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf.importers import records
from trainperf.importers.core import Format, line_format, read_log
from trainperf.importers.settings import Settings
from trainperf.importers.text import CutLine, LineError, number, one_record, rank_prefix, timestamp
from trainperf.importers.vocabulary import (FIELD, RATES, SECONDS, Field, fields_of, in_unit, is_record, lookup,
                                            scale, unit_of_key, value)

NAN = math.nan
SNIFF_LINES = 2000
"""Lines of a file's head the sniff reads."""
TIMES = ("step_time_s", "cumulative_time_s", "interval_time_s", "interval_mean_s", "average_time_s")
"""The time fields of the vocabulary, in the order of ``vocabulary.TIME_KINDS``."""
_START_WORDS = re.compile(r"\\[bsd][+*]?|[(\[].*")
"""What a record start's regular expression is not in words: escapes, groups, classes."""
_MLLOG_CONFIG = {"global_batch_size": "global_batch_size", "max_sequence_length": "seq_len"}


@dataclass(frozen=True)
class Stack:
    """What a stack's own reader adds to the vocabulary (each attribute: docs/importers.md, "The vocabulary", on a
    stack's own reader): ``keys``, each printed key -> a field of ``vocabulary.VOCABULARY``; ``start``, the regular
    expression of a record line's start (group ``step``: the step); ``time``, the key of the time a record needs;
    ``origin``, the number of its first step (None: unknown); ``configure``, a reader of its other lines."""

    name: str
    title: str
    keys: Mapping[str, str]
    start: str
    time: str
    anchors: tuple[str, ...]
    sniff: str
    origin: int | None = 0
    first: int | None = None
    warmup: int = 1
    time_source: str = "step times printed by the log"
    convention: str | None = None
    val_loss: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    separator: str = r"\s*[:=]\s*"
    closes: str = ""
    units: Mapping[str, str] = field(default_factory=dict)
    last: str | None = None
    after: Mapping[str, str] = field(default_factory=dict)
    usual: str | None = None
    rate_measures: bool = True
    configure: Callable[[GenericParser, str, int], None] | None = None

    @functools.cached_property
    def patterns(self) -> tuple[re.Pattern[str] | None, ...]:
        """The start, the keys (each with the text up to the next separator), the validation loss, the keys
        printed after their value (each with that value) and the usual line, compiled (None: not given)."""
        def either(keys: Mapping[str, str]) -> str:
            return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
        closes = re.escape(self.closes)  # the field before a key ends in it: a search for it finds the keys
        before, after = (rf"{closes}\s*", rf"(?=\s*{closes})") if closes else (r"(?<![\w/])", "")
        keys = rf"{before}({either(self.keys)}){self.separator}([^\s,|\]:]+){after}"
        return (re.compile(self.start), re.compile(keys),
                re.compile(self.val_loss) if self.val_loss else None,
                re.compile(rf"(?<=[\s(])([-+.\d]\S*)\s+(?:[a-z]\w* )?({either(self.after)})(?![\w/])")
                if self.after else None, re.compile(self.usual) if self.usual else None)

    @functools.cached_property
    def fields(self) -> dict[str, tuple[str, Field, str, str | None, float | None]]:
        """Each key's canonical name, field, unit of a bare value (the one its values must end in, else the one the
        key names or is), the unit they must end in and the factor to the field's unit (``vocabulary.scale``)."""
        out = {}
        for key, name in {**self.keys, **self.after}.items():
            ends = self.units.get(key)
            unit = ends if ends is not None else key if key in SECONDS else unit_of_key(key)
            out[key] = (name, FIELD[name], unit, ends, scale(unit, FIELD[name]))
        return out

    @functools.cached_property
    def usual_keys(self) -> tuple[str, ...]:
        """The (first) key of the field each group of the usual line names, in the groups' order."""
        key_of = {name: key for key, (name, *_) in reversed(self.fields.items())}
        return tuple(key_of[name] for name in self.patterns[4].groupindex) if self.usual else ()

    def parse(self, line: str) -> tuple[int | None, dict[str, float]]:
        """The rank the launcher prefix names and the figures of a record line (canonical field -> value in
        the field's unit); :class:`~trainperf.importers.text.LineError` where it has no start or no time,
        two starts (two processes' output run together) or a value that is no number."""
        start, keys, _, after, usual = self.patterns
        rank, body = rank_prefix(line)
        match = start.search(body)
        if match is None:
            raise LineError(f"no {_START_WORDS.sub('', self.start).strip()!r} field")
        one_record(start, body, match.end())
        values: dict[str, float] = {}
        if "step" in start.groupindex:
            values["step"] = float(match.group("step"))
        fields = self.fields
        line_as_usual = usual.match(body, match.end()) if usual is not None else None
        if line_as_usual is not None:
            pairs = zip(self.usual_keys, line_as_usual.groups())
        else:
            pairs = keys.findall(body)
            if after is not None:
                pairs += [(key, text) for text, key in after.findall(body)]
        for key, text in pairs:
            name, known, unit, ends, factor = fields[key]
            if name in values:
                continue
            if ends is not None:  # the unit its values are printed in: without it, a value cut short
                if not text.endswith(ends):
                    raise LineError(f"{key}: {text!r} does not end in {ends!r}")
                text = text[:-len(ends)]
            try:
                found = float(text)
            except ValueError:
                try:
                    found, printed = value(text, key)
                except LineError as exc:
                    raise LineError(f"{key}: {exc}") from None
                values[name] = in_unit(found, ends or printed, known)
                continue
            values[name] = found * factor if factor is not None else in_unit(found, unit, known)
        time = values.get(fields[self.time][0])
        if time is None:
            cut = self.closes and not body.rstrip().endswith(self.closes)
            raise LineError(f"{f'truncated (no final {self.closes!r}): ' if cut else ''}no {self.time!r} field")
        if not math.isfinite(time):
            raise LineError(f"{self.time} must be a finite number, not {time:g}")
        if self.last is not None and fields[self.last][0] not in values:
            raise CutLine(f"no {self.last!r} field (a line cut, or wrapped onto the next)", (rank, values))
        return rank, values


OBJECT_LINES = 64
"""The most lines one JSON object printed over several lines may take."""


class GenericParser(records.IntervalParser[records.Run]):
    """Reads a log through the vocabulary (``stack``: through a stack's own keys)."""

    record_line = "step line"  # what a skipped record line is called
    reported = records.REPORTED

    def __init__(self, path: Path, stack: Stack | None = None) -> None:
        super().__init__(path)
        self.stack = stack
        self.anchors = stack.anchors if stack is not None else ("",)
        self.used: dict[str, str] = {}
        self.last: dict[int, dict[str, float]] = {}
        self.config = dict(stack.config) if stack is not None else {}
        self.step_key = next((k for k, name in stack.keys.items() if name == "step"), "step") if stack else "step"
        self.block: tuple[float, float, float] | None = None
        self.benchmark = ""
        self.steps = 0.0
        self.blocks = False
        self.counted_samples = 0.0
        self.step_tokens = NAN
        self.evaluated: tuple[float, float] | None = None
        self.drawn: tuple[object, ...] = ()  # a stack's last record: its launcher's rank and its figures
        self.checkpoints: list[tuple[float, float, bool]] = []
        """MLPerf ``train_loss`` events: ``(time_ms, samples_count, whether a block ended since the one before)``."""
        self.block_ended = False
        self.interval_times: dict[int, list[tuple[int, float]]] = {}
        """Per run (``id``), each interval-timed record's row (never moved: repeated lines add none), its time (s)."""
        self.stamp = NAN  # the timestamp of the line being read generically (s since 1970; NaN: none)
        self.clocks: dict[int, list[tuple[int, float]]] = {}
        """Per run (``id``), each timed record's row and its line's timestamp (s since 1970)."""

    def starts_record(self, text: str) -> bool:
        return self.stack is not None and self.stack.patterns[0].search(text) is not None

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if self.stack is not None:
            start, val_loss = self.stack.patterns[0], self.stack.patterns[2]
            if start.search(line):
                return self.read_record(lines, i, number_, self.stack.parse, self.record_line)
            if val_loss is not None and (match := val_loss.search(line)):
                found = match.groupdict()
                # a loss printed before any record that names no step is the untrained model's, not the run's
                if self.run is not None or found.get("step"):
                    self.evaluated = (float(found.get("step") or NAN), records.finite(number(found["loss"])))
                    if self.run is not None:
                        self.run.val_loss = self.evaluated[1]
            else:
                self.configure(line, number_)
            return 1
        if ":::MLLOG" in line:
            self.mllog(number_, *fields_of(line))
            return 1
        line, used = joined_object(lines, i)
        self.stamp = timestamp(line)
        label, found = fields_of(line)
        values, said = read_fields(found) if found else ({}, {})
        if "val_loss" in values and self.run is not None:
            self.run.val_loss = records.finite(values["val_loss"])
        if is_record(values):
            problem = self.add(number_, (label, values, said))
            if problem:
                self.skip(number_, f"record line: {problem}")
        return used

    def configure(self, line: str, number_: int) -> None:
        """Read a stack's line that is no record (line ``number_``)."""
        if self.stack is not None and self.stack.configure is not None:
            self.stack.configure(self, line, number_)

    def break_chain(self, rank: int | None) -> None:
        """After an unreadable record line of ``rank`` (None: any), a stack's next record of an interval's time
        covers unknown steps (a step's own time needs no line before it)."""
        if self.stack is not None and self.stack.fields[self.stack.time][1].kind != "step_time":
            for last in ([self.last.get(rank, {})] if rank is not None else self.last.values()):
                last["step"] = NAN

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        """Add a record line's figures (``parsed``: its launcher's rank, the figures and, read generically,
        the keys they were printed under); a reason where the line cannot be a record."""
        label, values = parsed[:2]
        if self.stack is not None:
            drawn, self.drawn = self.drawn, (label, *values.items())
            if "step" in values and not self.echo and drawn == self.drawn:
                self.repeated += 1
                return ""  # a progress bar drawn again (its bar's clock moved on, its figures did not): read once
        batch = values.get("global_batch_size", NAN)
        if batch > 0:
            self.config["global_batch_size"] = int(batch)
            values["samples"] = batch
        step = values.get("step")
        if step is None:
            step = float(self.count_step(label) - 1 + ((self.stack.origin or 0) if self.stack else 1))
        if not (math.isfinite(step) and step >= 0 and step == int(step)):
            return f"{self.step_key} {step:g} is not a step number"
        step = int(step) if "epoch" not in values else self.across_epochs(label, values["epoch"], int(step))
        if self.stack is not None:
            rank = self.rank_of(label, step)
        else:
            rank = 0 if label is None else label
            if step == self.last.get(rank, {}).get("step"):
                return ""  # the same step printed again (its validation line)
        last = self.last.setdefault(rank, {})
        if self.stack is not None and step == self.stack.first:
            last.update(step=step - 1.0, tokens=0.0, samples=0.0)
        n = step - last["step"] if step > last.get("step", math.inf) else NAN
        last["step"] = step
        seconds = self.seconds(values, last, n)
        for work, counted in (("tokens", "tokens_total"), ("samples", "samples_total")):
            if counted in values:
                total = values[counted]
                if total < last.get(work, NAN) and math.isfinite(n):  # the step went on, its count back: damage
                    last.update({"step": NAN, work: NAN})  # the next record covers unknown steps
                    return f"the count of {work} since the start went down since the previous line"
                if total - last.get(work, NAN) > 0:
                    values[work] = (total - last[work]) / n
                last[work] = total
            if work in values and not values[work] > 0:
                del values[work]
        if "tokens" not in values and self.step_tokens > 0:
            values["tokens"] = self.step_tokens
        run = self.run_at(line, rank, step)
        if batch > 0:
            run.config["global_batch_size"] = int(batch)
        if seconds is not None:
            values["step_time_s"] = seconds[0] / seconds[1]
        evaluated = self.evaluated is not None and self.evaluated[0] == step
        if self.evaluated is not None:
            run.val_loss = self.evaluated[1]
            if not evaluated:  # else its time holds the evaluation (every rank's line of that step)
                self.evaluated = None
        run.records.add(records.record(values, rank, step, seconds[1] if seconds is not None else n,
                                       excluded=1.0 if evaluated else 0.0))
        if self.stack is None and "interval_time_s" in values:
            self.interval_times.setdefault(id(run), []).append((len(run.records) - 1, values["interval_time_s"]))
        if self.stack is None and seconds is not None and math.isfinite(self.stamp):
            self.clocks.setdefault(id(run), []).append((len(run.records) - 1, self.stamp))
        said = parsed[2] if len(parsed) > 2 else {}
        self.used.update({name: said[name] for name in values if name in said and name not in self.used})
        return ""

    def seconds(self, values: dict[str, float], last: dict[str, float], n: float) -> tuple[float, float] | None:
        """``(seconds, steps)`` the line's time gives (None: none; timed by its rate), by the first kind of
        :data:`~trainperf.importers.vocabulary.TIME_KINDS` it prints."""
        name = next((name for name in TIMES if name in values), None)
        if name is None:
            return None
        own = values[name]
        for other in TIMES[TIMES.index(name) + 1:]:  # the line's later kinds are not used
            values.pop(other, None)
        if name == "step_time_s":
            return own, 1.0
        if name == "cumulative_time_s":
            before, last["clock"] = last.get("clock", NAN), own
            return (own - before if own >= before else NAN), n
        return (own if name == "interval_time_s" else own * n), n

    def mllog(self, line: int, label: int | None, found: Mapping[str, str]) -> None:
        """An MLPerf ``:::MLLOG`` event: configuration, or a block's start or stop."""
        key, when = found.get("key", ""), _float(found.get("time ms"))
        if key == "submission_benchmark":
            self.benchmark = found.get("value", "")
        elif key in _MLLOG_CONFIG and _float(found.get("value")) > 0:
            self.config[_MLLOG_CONFIG[key]] = int(_float(found.get("value")))
        elif key == "train_loss" and _float(found.get("metadata samples count")) > 0:
            self.checkpoints.append((when, _float(found.get("metadata samples count")), self.block_ended))
            self.block_ended = False
        elif key == "block_start":
            self.block = (when, _float(found.get("metadata samples count")),
                          _float(found.get("metadata epoch count")))
        elif key == "block_stop":
            self.block_ended = True
            start, done, self.block = self.block, _float(found.get("metadata samples count")), None
            if start is not None and start[1] < self.counted_samples:  # a start printing steps, not samples
                start = (start[0], self.counted_samples, start[2])
            self.counted_samples = done if done > 0 else self.counted_samples
            seconds = (when - start[0]) / 1000.0 if start is not None else NAN
            values: dict[str, float] = {}
            if start is not None and done - start[1] > 0:
                values["samples"] = done - start[1]
            count = _float(found.get("metadata epoch count", str(start[2] if start else NAN)))
            if self.benchmark == "gpt3" and count > 0:
                values["tokens"] = count
            if not values and start is not None:
                return
            batch = self.config.get("global_batch_size", 0)
            work = values.get("samples", values.get("tokens", NAN) / self.config.get("seq_len", NAN))
            n = work / batch if batch and work > 0 else 1.0
            n = n if math.isfinite(n) else 1.0
            self.steps += n
            values = {name: v / n for name, v in values.items()}
            values["step_time_s"] = seconds / n
            rank = 0 if label is None else label
            run = self.run_at(line, rank, int(self.steps))
            run.records.add(records.record(values, rank, int(self.steps), n if start is not None else NAN))
            self.blocks = True
            self.used.update(step="block_stop", step_time_s="time_ms of block_start and block_stop")
            self.used.setdefault("tokens" if "tokens" in values else "samples",
                                 "epoch_count" if "tokens" in values else "samples_count")

    def notes(self) -> list[str]:
        if any(map(self.timed_between_checkpoints, self.done + ([self.run] if self.run is not None else []))):
            self.used.update(step="train_loss", step_time_s="time_ms of consecutive train_loss events",
                             samples="their samples_count")
        used = ", ".join(f"{name} from {key!r}" for name, key in self.used.items())
        rate = ("; a printed rate is kept as reported and compared, a printed time and the counted work are the "
                "measurement") if set(self.used) & set(RATES) else ""
        said = [f"{self.path}: read generically: {used}{rate}"] if self.used and self.stack is None else []
        return super().notes() + said

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        stack, source = self.stack, "the log's own times, read generically"
        if stack is None and self.timed_between_checkpoints(run):
            run.records = self.between_checkpoints(config)
        elif stack is None and self.running_totals(run):
            source += (f"; {self.used['interval_time_s']!r} a running total (as fairseq's train_wall before 0.9): "
                       "each line's time is its increase")
        elif stack is None and (clock := self.in_milliseconds(run)):
            source += f"; its step times read as milliseconds: {clock}"
        measured, steps = (records.measure_figures(run, config, None if self.blocks else 1, source) if stack is None
                           else records.measure_figures(run, config, stack.origin, stack.time_source,
                                                        stack.convention, stack.warmup, stack.rate_measures))
        if math.isfinite(run.val_loss):
            measured["val_loss"] = run.val_loss
        return measured, steps

    def running_totals(self, run: records.Run) -> bool:
        """Time ``run``'s records by the increases of their interval times where those are a running total (then
        True): on every rank two or more, each above the one before, at a time per step since the line before
        within 1.5 × of the total's since step 0 (as intervals, each would last all the run before it)."""
        rows, totals = np.array(self.interval_times.pop(id(run), []), dtype=float).reshape(-1, 2).T
        table, rows = run.records.table(), rows.astype(int)
        ranks, steps, counts = (table[rows, records.COLUMN[c]] for c in ("rank", "step", "n_steps"))
        timed = []
        for rank in np.unique(ranks):
            mine = np.flatnonzero(ranks == rank)
            gained, step = np.diff(totals[mine]), steps[mine][1:]
            if len(mine) < 2 or not ((gained > 0) & (step > 0) & (totals[mine][1:] > 0)).all():
                return False
            pace = (gained / counts[mine][1:]) / (totals[mine][1:] / step)
            if not (abs(np.log(pace)) <= np.log(1.5)).all():
                return False
            timed.append((rows[mine][1:], gained))
        for at, seconds in timed:  # a record's weight is its duration
            table[np.ix_(at, [records.COLUMN["seconds"], records.COLUMN["weight"]])] = seconds[:, None]
        return bool(timed)

    def in_milliseconds(self, run: records.Run) -> str:
        """Divide ``run``'s step times by 1,000 where, read as seconds, they last over 100 × what its lines'
        timestamps span (2 s added a rank: stamps to the second) and, as milliseconds, under 10 ×: a time printed
        without a unit in milliseconds (wordplay's ``dt``); what the clock said (empty: the times fit it)."""
        rows, stamps = np.array(self.clocks.pop(id(run), []), dtype=float).reshape(-1, 2).T
        if "step_time_s" not in self.used or len(rows) < 3:
            return ""
        table, rows = run.records.table(), rows.astype(int)
        ranks, seconds = table[rows, records.COLUMN["rank"]], table[rows, records.COLUMN["seconds"]]
        per_rank = [(stamps[ranks == r], seconds[ranks == r]) for r in np.unique(ranks)]
        if not all(np.ptp(clock) > 0 and (np.diff(clock) >= 0).all() for clock, _ in per_rank):
            return ""  # no clock that moves on (a date in a name, or none)
        claimed = sum(np.nansum(times[1:]) for _, times in per_rank)  # each line's time since the one before it
        span = sum(np.ptp(clock) + 2.0 for clock, _ in per_rank)
        if not 100 * span < claimed < 10_000 * span:
            return ""
        timed = np.isfinite(table[:, records.COLUMN["seconds"]])
        table[np.ix_(timed, [records.COLUMN["seconds"], records.COLUMN["weight"]])] /= 1000.0
        return f"as seconds, its lines would last {claimed:,.0f} s where its timestamps span {span:,.0f} s"

    def timed_between_checkpoints(self, run: records.Run) -> bool:
        """Whether an MLPerf log's ``run`` is timed between its ``train_loss`` events (more of them than blocks)."""
        return self.stack is None and self.blocks and len(self.checkpoints) > len(run.records) + 1

    def between_checkpoints(self, config: Mapping[str, Any]) -> records.Intervals:
        """Records between an MLPerf log's ``train_loss`` events (docs/importers.md, "The vocabulary"): each of the
        samples and the time since the one before, ``excluded`` 1 where it spans a block's end (an evaluation)."""
        found = records.Intervals(records.REPORTED)
        batch = float(config.get("global_batch_size") or self.config.get("global_batch_size") or 1)
        previous: tuple[float, float, bool] | None = None
        for when, samples, evaluated in self.checkpoints:
            step = samples / batch
            if previous is None or not (samples > previous[1] and when > previous[0]):
                n, seconds, work = NAN, NAN, NAN
            else:
                n, seconds, work = step - previous[1] / batch, (when - previous[0]) / 1000.0, samples - previous[1]
            found.add(records.record({"step_time_s": seconds / n, "samples": work / n}, 0, step, n,
                                     excluded=1.0 if evaluated else 0.0))
            previous = (when, samples, evaluated)
        return found


def read_fields(found: Mapping[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """The figures of a line's fields (``vocabulary.fields_of``; canonical field -> value in the field's unit)
    and the key each was printed under, the first key of a field winning."""
    out: dict[str, float] = {}
    said: dict[str, str] = {}
    for key, text in found.items():
        known = lookup(key)
        if known is None or known.name in out or known.kind == "other":
            continue
        try:
            number_, unit = value(text, key)
        except LineError:
            continue
        out[known.name] = in_unit(number_, unit, known)
        said[known.name] = key + (f" ({unit})" if unit else "")
    if "step" not in out and "step 0" in found:  # DLLogger's step: [epoch, iteration] or [iteration]
        last = "step 1" if "step 1" in found else "step 0"
        out["step"], said["step"] = _float(found[last]), "step"
        if last == "step 1":
            out["epoch"], said["epoch"] = _float(found["step 0"]), "step"
    return out, said


def joined_object(lines: list[str], i: int) -> tuple[str, int]:
    """``lines[i]`` and how many lines it takes: where it opens a JSON object it does not close (DLLogger's
    ``DLLL {`` of an indented dump, as NeMo 1 recipes print it), the object's lines joined into one, up to
    :data:`OBJECT_LINES` lines; else the line alone."""
    line = lines[i]
    if not line.rstrip().endswith("{"):
        return line, 1
    depth, end = 0, i
    while end < len(lines) and end - i < OBJECT_LINES:
        depth += lines[end].count("{") - lines[end].count("}")
        if depth <= 0:
            return " ".join(part.strip() for part in lines[i:end + 1]), end - i + 1
        end += 1
    return line, 1


def _float(text: str | None) -> float:
    try:
        return float(text) if text is not None else NAN
    except ValueError:
        return NAN


def stack_format(stack: Stack, parser_class: type[GenericParser] = GenericParser) -> Format:
    """The format of a :class:`Stack`: recognised by its ``sniff``, read through its keys by ``parser_class``
    (a stack's own subclass of :class:`GenericParser` reads its other lines)."""
    return line_format(stack.name, stack.title, (re.compile(stack.sniff),), lambda path: parser_class(path, stack))


def _sniff(head: str, settings: Settings) -> int:
    count = 0
    lines = head.split("\n", SNIFF_LINES)[:SNIFF_LINES]
    i = 0
    while i < len(lines):
        line, used = joined_object(lines, i)
        i += used
        if ":::MLLOG" in line:
            count += '"block_stop"' in line
            continue
        found = fields_of(line)[1]
        count += bool(found) and is_record(read_fields(found)[0])
    return count


GENERIC = Format("generic", "a log read through the vocabulary of field names",
                 lambda path, settings: read_log(GenericParser(path)), _sniff)
"""A log of any stack read through the vocabulary, chosen only where no stack's own reader recognises it."""
