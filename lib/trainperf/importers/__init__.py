"""Log importers: training logs into canonical runs (and steps) tables (docs/importers.md)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.errors import DataError
from trainperf.importers.reported import TOLERANCE, compare_reported
from trainperf.importers.composer import COMPOSER
from trainperf.importers.core import Format, ImportResult, Missing, Unmeasured, build_result
from trainperf.importers.csv_tables import CSV_MAPPING, LIGHTNING_CSV, csv_header
from trainperf.importers.deepspeed import DEEPSPEED
from trainperf.importers.generic import GENERIC, stack_format
from trainperf.importers.hf_trainer import HF_TRAINER
from trainperf.importers.megatron import MEGATRON, MegatronParser
from trainperf.importers.pattern import EXAMPLE, PATTERN
from trainperf.importers.event_files import is_event_file, is_event_file_name, log_dir_files
from trainperf.importers.settings import Settings, load_settings, read_yaml, sidecar_path
from trainperf.importers.stacks import LLMC, MAXTEXT, NANOGPT, NEMO
from trainperf.importers.summary_logs import EPOCH_TIMING, TIMING_SUMMARY
from trainperf.importers.tensorboard_log import TENSORBOARD
from trainperf.importers.text import clean, iter_chunks, read_head
from trainperf.importers.torchtitan import TORCHTITAN

FORMATS: tuple[Format, ...] = (
    CSV_MAPPING, LIGHTNING_CSV, stack_format(NEMO), stack_format(MEGATRON, MegatronParser), TORCHTITAN,
    stack_format(NANOGPT), stack_format(LLMC), HF_TRAINER, stack_format(MAXTEXT), DEEPSPEED, COMPOSER, EPOCH_TIMING,
    TIMING_SUMMARY, TENSORBOARD, GENERIC)
"""Every format, in order of preference when two score alike (NeMo 2 lines also look like
Megatron iteration lines: NeMo first); TensorBoard event files are told by content, not by text. ``generic``
(last) is tried only where no stack's own reader recognises the file."""
SNIFF_BYTES = 1 << 20

__all__ = ["FORMATS", "TOLERANCE", "ImportResult", "Missing", "compare_reported", "detect",
           "has_column_mapping", "import_path", "import_runs", "reads_as_log", "sidecar_path", "tensorboard_parts"]


def import_path(path: str | Path, overrides: Mapping[str, Any] | None = None) -> ImportResult:
    """One log file, or one TensorBoard log dir (event files, directly or in ``rank_<N>`` folders), read into
    canonical runs (and steps) tables. ``overrides`` (runs column -> value, strings converted as from ``--set``; the
    key ``mapping``: a CSV's column-mapping file) win over the sidecar and the log. DataError for a missing or
    unreadable file, one no format recognises (naming those tried), a bad sidecar or override, or no measured run."""
    path = Path(path)
    if not path.exists():
        raise DataError("no such file", path=path)
    settings = load_settings(path, overrides)
    fmt = detect(path, settings)
    try:
        return build_result(path, fmt, fmt.parse(path, settings), settings)
    except Unmeasured as unmeasured:  # e.g. DeepSpeed timer lines in a log whose Hugging Face dicts give no runtime
        other = None if fmt in (PATTERN, TENSORBOARD) else _best(_text(read_head(path, SNIFF_BYTES)), settings, but=fmt)
        if other in (None, GENERIC):
            raise
        with suppress(Unmeasured):
            return build_result(path, other, other.parse(path, settings), settings)
        raise unmeasured from None  # what the format that fits best says


def import_runs(path: Path) -> pd.DataFrame:
    """The checked runs of one log (:func:`import_path` without overrides)."""
    return import_path(path).runs


def has_column_mapping(path: str | Path) -> bool:
    """Whether ``path`` (a CSV) has a sidecar with a ``columns:`` mapping, so that it is read by :func:`import_path`
    rather than as a canonical table. A sidecar that is not valid YAML raises ``DataError`` naming it."""
    sidecar = sidecar_path(Path(path))
    return sidecar.is_file() and "columns" in read_yaml(sidecar)


def reads_as_log(path: str | Path) -> bool:
    """Whether a table file (CSV) is read by :func:`import_path` rather than as a canonical table: it has a column
    mapping, or an importer recognises its header (a Lightning ``metrics.csv``)."""
    path = Path(path)
    if has_column_mapping(path):
        return True
    if path.suffix.lower() != ".csv":
        return False
    head = _text(read_head(path, 1 << 16))
    return LIGHTNING_CSV.sniff(head, Settings()) > 0


def tensorboard_parts(folder: Path) -> set[Path]:
    """The event files and rank folders that make ``folder`` a TensorBoard log dir, read with it (empty: it is
    none); DataError for a folder holding event files both directly and in rank folders."""
    return {file if file.parent == folder else file.parent for files in log_dir_files(folder).values()
            for file in files}


def detect(path: Path, settings: Settings | None = None) -> Format:
    """The format of ``path`` (a file, or a TensorBoard log dir), by content; DataError if none fits."""
    settings = settings or Settings()
    if path.is_dir():
        return TENSORBOARD
    head_bytes = read_head(path, SNIFF_BYTES)
    if b"\x00" in head_bytes[:8192] or is_event_file_name(path):
        if is_event_file(path):
            return TENSORBOARD
        what = "named as a TensorBoard event file but its first record is none" if is_event_file_name(path) \
            else "a binary file, not a log, a CSV table or a TensorBoard event file"
        raise DataError(what, path=path)
    if settings.pattern is not None:
        return PATTERN
    head = _text(head_bytes)
    fmt = _best(head, settings)
    if fmt is None and len(head_bytes) == SNIFF_BYTES:
        found = (_best("\n".join(lines), settings, csv=False) for lines in iter_chunks(path))
        fmt = next((chosen for chosen in found if chosen is not None), None)
    if fmt is None:
        if csv_header(head) is not None and settings.columns is None:
            how = (f"it parses as a CSV table: map its columns in {sidecar_path(path).name} "
                   "(columns: {runs column: CSV column})")
        else:
            how = (f"to read it, give a regular expression with named groups as 'pattern' in "
                   f"{sidecar_path(path).name} or with trainperf import --pattern, e.g. {EXAMPLE!r} "
                   "(groups: docs/importers.md), or write a runs CSV with the columns run_id, gpus, tokens, "
                   "elapsed_s")
        logs = ", ".join(f"{f.name} ({f.title})" for f in FORMATS)
        raise DataError("not a log trainperf can read; it reads runs tables (CSV, JSON, JSON lines or Parquet with "
                        f"the runs columns), profiler run folders and logs; formats tried: {logs}; {how}", path=path)
    return fmt


def _text(head: bytes) -> str:
    """The first bytes of a file as cleaned text (undecodable bytes replaced)."""
    return clean(head.decode("utf-8", errors="replace"))


def _best(text: str, settings: Settings, csv: bool = True, but: Format | None = None) -> Format | None:
    scores = [(f.sniff(text, settings), -i, f) for i, f in enumerate(FORMATS[:-1])
              if (csv or f is not CSV_MAPPING) and f is not but]
    score, _, fmt = max(scores, key=lambda s: s[:2])
    if score > 0:
        return fmt
    return FORMATS[-1] if FORMATS[-1].sniff(text, settings) > 0 else None
