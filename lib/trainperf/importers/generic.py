"""Logs of stacks without a reader of their own, read through the vocabulary
(``trainperf.importers.vocabulary``): text lines of ``key: value`` fields, JSON lines, MLPerf ``:::MLLOG``
result logs and DLLogger ``DLLL`` lines.

A record is a line whose fields (``fields.fields_of``) name a step counter and a time or a rate. What covers
what:

* its steps: those since the rank's previous record (the first record's are unknown); with an ``epoch``
  field, a step counter that goes back in a later epoch counts on from the last step (fairseq's
  ``epoch 011  1000 / 8223``): one run, not one per epoch. The same step printed again (a validation line
  after the training line of that step) is no new record;
* its time, by the first kind the line has (``vocabulary.TIME_KINDS``): a step time is that one step's (a
  record of one step); a clock since the start gives the time since the previous record by difference (a
  clock that goes back restarted: that record's time is unknown); an interval's time or mean; a mean since the
  start; else the work over the printed rate;
* its work: the tokens (samples) of a step times its steps, or the difference of a count since the start.
  Without either, the sidecar's ``global_batch_size`` and ``seq_len`` count it (``trainperf.derive``), else
  the printed rate is the throughput. Where the line prints a rate too, it is kept as ``reported_*`` and
  compared: the time and the counted work are the measurement.

MLPerf ``:::MLLOG`` logs time ``block_start`` .. ``block_stop`` (``time_ms``): each block is a record of its
samples (``samples_count`` at its ends) or, for ``gpt3`` (whose "epochs" are tokens), its ``epoch_count``
tokens; evaluation between blocks is not counted; ``global_batch_size`` and ``max_sequence_length`` give the
batch. DLLogger's ``step`` ``[epoch, iteration]`` gives both.

The result's notes say which printed field gave each figure (``read generically: step from 'step', ...``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from trainperf.importers import figures, records
from trainperf.importers.core import LineFormat
from trainperf.importers.fields import fields_of, value
from trainperf.importers.settings import Settings
from trainperf.importers.text import LineError
from trainperf.importers.vocabulary import NAMES, Field, in_unit, is_record, lookup

NAN = math.nan
SNIFF_LINES = 2000
"""Lines of a file's head the sniff reads."""
TIMES = ("step_time_s", "cumulative_time_s", "interval_time_s", "interval_mean_s", "average_time_s")
"""The time fields of the vocabulary, in the order of ``vocabulary.TIME_KINDS``."""
_MLLOG_CONFIG = {"global_batch_size": "global_batch_size", "max_sequence_length": "seq_len"}


class GenericParser(records.IntervalParser[records.Run]):
    """Reads every line through the vocabulary; see the module's docstring."""

    anchors = ("",)

    def __init__(self, path: Path, names: Mapping[str, Field] = NAMES) -> None:
        super().__init__(path)
        self.names = names
        self.known: dict[str, Field | None] = {}
        self.used: dict[str, str] = {}
        self.last: dict[int | None, dict[str, float]] = {}
        self.config: dict[str, Any] = {}
        self.block: tuple[float, float, float] | None = None
        self.benchmark = ""
        self.steps = 0.0
        self.blocks = False
        self.counted_samples = 0.0

    def starts_record(self, text: str) -> bool:
        return False

    def read_fields(self, found: Mapping[str, str]) -> dict[str, tuple[float, str]]:
        """Canonical field -> (value in its base unit, the printed key), the first key of a field winning."""
        out: dict[str, tuple[float, str]] = {}
        for key, text in found.items():
            field = self.known.get(key, False)
            if field is False:
                field = self.known[key] = lookup(key, self.names)
            if field is None or field.name in out or field.kind == "other":
                continue
            try:
                number, unit = value(text, key)
            except LineError:
                continue
            out[field.name] = (in_unit(number, unit, field), key + (f" ({unit})" if unit else ""))
        if "step" not in out and "step 0" in found:  # DLLogger's step: [epoch, iteration] or [iteration]
            last = "step 1" if "step 1" in found else "step 0"
            out["step"] = (_float(found[last]), "step")
            if last == "step 1":
                out["epoch"] = (_float(found["step 0"]), "step")
        return out

    def handle(self, lines: list[str], i: int, number_: int) -> int:
        line = lines[i]
        if ":::MLLOG" in line:
            self.mllog(number_, *fields_of(line))
            return 1
        label, found = fields_of(line)
        values = self.read_fields(found) if found else {}
        if values.get("global_batch_size", (0.0,))[0] > 0:
            self.config["global_batch_size"] = int(values["global_batch_size"][0])
        if not is_record(values):
            return 1
        problem = self.add(number_, (label, values))
        if problem:
            self.skip(number_, f"record line: {problem}")
        return 1

    def add(self, line: int, parsed: tuple[Any, ...]) -> str:
        label, values = parsed
        step_value = values["step"][0]
        if not (math.isfinite(step_value) and step_value >= 0 and step_value == int(step_value)):
            return f"step {step_value:g} is not a step number"
        step = int(step_value)
        last = self.last.setdefault(label, {})
        if "epoch" in values:
            epoch = values["epoch"][0]
            if epoch > last.get("epoch", epoch) and step <= last.get("raw", -1):
                last["offset"] = last["step"]
            elif epoch < last.get("epoch", epoch):
                last["offset"] = 0.0
            last["epoch"], last["raw"] = epoch, step
            step += int(last.get("offset", 0.0))
        if step == last.get("step"):
            return ""  # the same step printed again (its validation line)
        n = step - last["step"] if step > last.get("step", math.inf) else NAN
        figures_ = {name: number for name, (number, _) in values.items()}
        seconds = self.seconds(figures_, last, n)
        for work in ("tokens", "samples"):
            total = figures_.get(f"{work}_total", NAN)
            if work not in figures_ and total - last.get(work, NAN) > 0:
                figures_[work] = (total - last[work]) / n
            if math.isfinite(total):
                last[work] = total
        last["step"] = step
        if "mfu" in figures_:
            figures_["mfu_percent"] = figures_["mfu"] * 100.0
        rank = 0 if label is None else label
        run = self.run_at(line, rank, step)
        if seconds is not None:
            figures_["step_time_s"] = seconds[0] / seconds[1]
            run.records.add(figures.record(figures_, rank, step, seconds[1]))
        else:
            run.records.add(figures.record(figures_, rank, step, n))
        for name, (_, key) in values.items():
            if name in figures_ or name in ("step", "epoch", "tokens_total", "samples_total"):
                self.used.setdefault(name, key)
        return ""

    def seconds(self, values: dict[str, float], last: dict[str, float], n: float) -> tuple[float, float] | None:
        """``(seconds, steps)`` the line's time gives (None: none; timed by its rate), by the first kind of
        :data:`~trainperf.importers.vocabulary.TIME_KINDS` it prints."""
        for name in TIMES:
            if name not in values:
                continue
            own = values[name]
            for other in TIMES:
                values.pop(other, None)
            values[name] = own
            if name == "step_time_s":
                return own, 1.0
            if name == "cumulative_time_s":
                before, last["clock"] = last.get("clock", NAN), own
                return (own - before if own >= before else NAN), n
            return (own if name == "interval_time_s" else own * n), n
        return None

    def mllog(self, line: int, label: int | None, found: Mapping[str, str]) -> None:
        """An MLPerf ``:::MLLOG`` event: configuration, or a block's start or stop."""
        key, when = found.get("key", ""), _float(found.get("time ms"))
        if key == "submission_benchmark":
            self.benchmark = found.get("value", "")
        elif key in _MLLOG_CONFIG and _float(found.get("value")) > 0:
            self.config[_MLLOG_CONFIG[key]] = int(_float(found.get("value")))
        elif key == "block_start":
            self.block = (when, _float(found.get("metadata samples count")),
                          _float(found.get("metadata epoch count")))
        elif key == "block_stop":
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
            run.records.add(figures.record(values, rank, int(self.steps), n if start is not None else NAN))
            self.blocks = True
            self.used.update(step="block_stop", step_time_s="time_ms of block_start and block_stop")
            self.used.setdefault("tokens" if "tokens" in values else "samples",
                                 "epoch_count" if "tokens" in values else "samples_count")

    def new_run(self, line: int) -> records.Run:
        return records.Run(line, self.config, figures.REPORTED)

    def notes(self) -> list[str]:
        used = ", ".join(f"{_SAID.get(name, name)} from {key!r}" for name, key in self.used.items()
                         if name not in ("epoch", "global_batch_size"))
        said = [f"{self.path}: read generically: {used}; a printed rate is kept as reported and compared, the "
                "time and the counted work are the measurement"] if self.used else []
        return super().notes() + said

    def finish(self, run: records.Run, config: Mapping[str, Any]) -> tuple[dict[str, Any], pd.DataFrame]:
        return figures.measure(run, config, None if self.blocks else 0,
                               "the log's own times, read generically")


_SAID = {"step_time_s": "time", "tokens_per_s": "the printed tokens/s", "samples_per_s": "the printed samples/s",
         "tokens_per_s_per_gpu": "the printed tokens/s per device", "mfu": "the printed MFU",
         "tflops_per_gpu": "the printed TFLOP/s per device", "cumulative_time_s": "time since the start",
         "interval_time_s": "time since the previous line", "interval_mean_s": "mean time a step",
         "average_time_s": "mean time a step since the start", "tokens": "tokens a step",
         "samples": "samples a step", "tokens_total": "tokens so far", "samples_total": "samples so far"}


def _float(text: str | None) -> float:
    try:
        return float(text) if text is not None else NAN
    except ValueError:
        return NAN


class Generic(LineFormat):
    """A log of any stack whose lines print a step counter and a time or a rate (chosen only where no stack's
    own reader recognises the file)."""

    name = "generic"
    title = "a log read through the vocabulary of field names"
    parser_class = GenericParser

    def sniff(self, head: str, settings: Settings) -> int:
        parser = GenericParser(Path())
        count = 0
        for line in head.split("\n", SNIFF_LINES)[:SNIFF_LINES]:
            if ":::MLLOG" in line:
                count += '"block_stop"' in line
                continue
            found = fields_of(line)[1]
            count += bool(found) and is_record(parser.read_fields(found))
        return count
