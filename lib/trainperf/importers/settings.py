"""What a log does not say: the YAML sidecar next to it (``<log>.trainperf.yaml``) and CLI overrides; keys,
precedence and limits: docs/importers.md, "What the log does not say: the sidecar".
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainperf.errors import DataError
from trainperf.hardware import normalize_precision
from trainperf.importers.text import LineError, number
from trainperf.schema import INPUT_COLUMNS, PREFIXES, SIDECAR_SUFFIX, bound_problem
from trainperf.table_rules import CHOICES, FALSE, TRUE

STRUCTURAL = ("runs", "columns", "pattern", "tensorboard_tags")
MAX_YAML_BYTES = 1 << 20
"""The largest sidecar or column-mapping file read (1 MiB): a few hundred lines of settings are a few KiB."""
OVERRIDES = "the overrides (--set)"
MAPPING_KEY = "mapping"
"""Override naming a column-mapping file (YAML with ``columns:``) for a CSV."""


@dataclass
class Settings:
    """Values for every run and per run, a CSV column mapping, a pattern and a tag mapping, each with its source."""

    values: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    origins: dict[tuple[str | None, str], str] = field(default_factory=dict)
    columns: dict[str, Any] | None = None
    columns_source: Path | None = None
    pattern: str | None = None
    pattern_source: object = None
    tensorboard_tags: dict[str, Any] | None = None
    tensorboard_tags_source: object = None

    def for_run(self, run_id: str) -> dict[str, Any]:
        """The explicit values of one run (top level, then its ``runs`` entry)."""
        return {**self.values, **self.runs.get(run_id, {})}

    def origin(self, run_id: str, key: str) -> str:
        """Where the run's explicit value of ``key`` comes from."""
        return self.origins.get((run_id, key)) or self.origins.get((None, key), "the settings")


def sidecar_path(log: Path) -> Path:
    """``<log>.trainperf.yaml`` next to ``log``."""
    return log.with_name(log.name + SIDECAR_SUFFIX)


def load_settings(log: Path, overrides: Mapping[str, Any] | None = None) -> Settings:
    """The sidecar of ``log`` (if there is one) merged with ``overrides``."""
    settings = Settings()
    sidecar = sidecar_path(log)
    if sidecar.exists():
        _merge(settings, read_yaml(sidecar), sidecar)
    overrides = dict(overrides or {})
    mapping = overrides.pop(MAPPING_KEY, None)
    if mapping is not None:
        mapping_path = Path(str(mapping))
        data = read_yaml(mapping_path)
        if "columns" not in data:
            raise DataError("a column-mapping file needs a 'columns:' section", path=mapping_path)
        _merge(settings, data, mapping_path)
    _merge(settings, overrides, OVERRIDES)
    return settings


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a YAML file holds (DataError naming the file and line if it is not one). A file over
    :data:`MAX_YAML_BYTES`, or one with an anchor or an alias (``&name``, ``*name``: a few hundred bytes of aliases
    can stand for gigabytes of values), is refused before it is built."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    if len(raw) > MAX_YAML_BYTES:
        raise DataError(f"larger than {MAX_YAML_BYTES >> 20} MiB: not a settings file", path=path)
    try:
        data = yaml.load(raw.decode("utf-8", errors="replace"), Loader=_PlainLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", path=path,
                        line=mark.line + 1 if mark is not None else None) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError("expected a mapping of column names to values", path=path)
    return data


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases: a document costs memory in proportion to its size."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.MarkedYAMLError(problem="anchors and aliases (&name, *name) are not allowed in a settings "
                                               "file: write each value out", problem_mark=event.start_mark)
        return super().compose_node(parent, index)


def _merge(settings: Settings, data: Mapping[str, Any], where: object) -> None:
    for key, value in data.items():
        key = str(key)
        if key == "runs":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise DataError("'runs' must map run ids to mappings of column names to values",
                                path=where, column="runs")
            for run_id, values in value.items():
                entry = settings.runs.setdefault(str(run_id), {})
                for k, v in values.items():
                    entry[str(k)] = coerce(str(k), v, where)
                    settings.origins[(str(run_id), str(k))] = str(where)
        elif key == "columns":
            if not isinstance(value, dict) or not value:
                raise DataError("'columns' must map runs columns to CSV column names", path=where,
                                column="columns")
            settings.columns = {str(k): v for k, v in value.items()}
            settings.columns_source = where if isinstance(where, Path) else None
        elif key == "pattern":
            if not isinstance(value, str) or not value.strip():
                raise DataError("'pattern' must be a regular expression (a string)", path=where, column="pattern")
            settings.pattern, settings.pattern_source = value, where
        elif key == "tensorboard_tags":
            if not isinstance(value, dict):
                raise DataError("'tensorboard_tags' must map figures to tags, e.g. {step_time_s: train/step_time}",
                                path=where, column="tensorboard_tags")
            settings.tensorboard_tags = {**(settings.tensorboard_tags or {}), **{str(k): v for k, v in value.items()}}
            settings.tensorboard_tags_source = where
        else:
            settings.values[key] = coerce(key, value, where)
            settings.origins[(None, key)] = str(where)


def check_key(key: str, where: object) -> None:
    """DataError unless ``key`` is a canonical input column or a prefixed one."""
    if key in INPUT_COLUMNS or key.startswith(PREFIXES):
        return
    close = difflib.get_close_matches(key, [*INPUT_COLUMNS, *STRUCTURAL], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise DataError(f"unknown key: {hint}keys are runs columns (trainperf.schema), 'reported_*' / 'extra_*', "
                    f"or {', '.join(repr(s) for s in STRUCTURAL)}", path=where, column=key)


def as_number(value: Any) -> float | None:
    """A sidecar value as a number, whatever key it is under: a YAML number, or text that reads as one (PyYAML
    leaves ``1e9`` and ``7E9`` as text, as YAML 1.1 wants a dot in a float; ``1,000`` and ``1_000`` too); None
    for anything else (``true`` included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return number(str(value).strip())
    except LineError:
        return None


def coerce(key: str, value: Any, where: object) -> Any:
    """``value`` converted to the type of column ``key`` and checked (DataError naming ``where``)."""
    check_key(key, where)
    column = INPUT_COLUMNS.get(key)
    if column is None:
        number = as_number(value)
        return str(value) if number is None else number
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError("empty value", path=where, column=key)
    if column.kind == "str":
        text = str(value).strip()
        if key == "precision":
            try:
                return normalize_precision(text)
            except DataError as exc:
                raise DataError(str(exc).split(": ", 1)[-1], path=where, column=key) from exc
        if key in CHOICES:
            if text.lower() not in CHOICES[key]:
                raise DataError(f"{text!r} is not one of {', '.join(CHOICES[key])}", path=where, column=key)
            return text.lower()
        return text
    if column.kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in TRUE | FALSE:
            raise DataError(f"{value!r} is not true or false", path=where, column=key)
        return text in TRUE
    number = as_number(value)
    if number is None:
        raise DataError(f"{value!r} is not a number", path=where, column=key)
    problem = bound_problem(column, number)
    if problem:
        raise DataError(f"{number:g} {problem}", path=where, column=key)
    return int(number) if column.kind == "int" else number
