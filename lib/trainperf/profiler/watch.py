"""``trainperf watch RUN_DIR``: a live terminal view of a run (or of a folder of runs) while the
profiler writes it, from what each rank appended to its steps file (``trainperf.runfolder.tail``);
what it shows and when it ends: docs/profiler.md, "Watching a run live".
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from trainperf.derived import derive
from trainperf.errors import DataError
from trainperf.ranks import median_of_others, slowest
from trainperf.runfolder.manifest import MANIFEST_FILE, read_manifest
from trainperf.runfolder.rankfile import LINE_COLUMNS, STEPS_FILE_PATTERN
from trainperf.runfolder.reader import model_parallel
from trainperf.runfolder.tail import StepsTail

RECENT_STEPS = 20
"""Steps per rank the view summarizes (the most recent)."""
SHOWN_RANKS = 16
"""Rows of the rank table: the slowest ranks, and the fastest last."""
REFRESH_S = 1.0
WIDE = 160
"""Columns of a frame printed to a file or a pipe (a terminal's own width otherwise)."""
SHARES = ("data", "h2d", "forward", "loss", "backward", "optimizer", "comm_exposed", "validation")
"""Phases shown as shares of the step (``comm_exposed`` as ``comm``)."""
SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt", "comm_exposed": "comm", "validation": "val"}
_INDEX = {name: i for i, name in enumerate(LINE_COLUMNS)}


class RunWatch:
    """One run folder, followed: its manifest and each rank's recent steps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest: dict[str, Any] | None = None
        self._manifest_mtime = 0.0
        self.tails: dict[int, StepsTail] = {}
        self.recent: dict[int, deque[list[Any]]] = {}
        self.last_step: dict[int, int] = {}

    @property
    def world_size(self) -> int | None:
        world = ((self.manifest or {}).get("environment") or {}).get("world_size")
        return int(world) if world else None

    @property
    def closed(self) -> bool:
        """Every rank of the world wrote its end line."""
        world = self.world_size
        return bool(world) and len(self.tails) >= world and all(t.closed for t in self.tails.values())

    def update(self) -> None:
        """Read the manifest when it changed, find new ranks' files and read what each rank appended."""
        manifest = self.path / MANIFEST_FILE
        try:
            mtime = manifest.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime != self._manifest_mtime:
            self.manifest, self._manifest_mtime = read_manifest(manifest), mtime
        if self.world_size is None or len(self.tails) < self.world_size:
            for path in self.path.iterdir():
                if (match := STEPS_FILE_PATTERN.match(path.name)) and (rank := int(match.group(1))) not in self.tails:
                    self.tails[rank], self.recent[rank] = StepsTail(path), deque(maxlen=RECENT_STEPS)
        for rank, tail in self.tails.items():
            if rows := tail.read():
                position = [tail.columns.index(c) if c in tail.columns else None for c in LINE_COLUMNS]
                self.recent[rank].extend([row[i] if i is not None else None for i in position] for row in rows)
                self.last_step[rank] = int(rows[-1][0])

    def frame(self) -> dict[str, Any]:
        """The figures of one frame (:func:`render` draws them)."""
        config = dict((self.manifest or {}).get("config") or {})
        environment = (self.manifest or {}).get("environment") or {}
        ranks = sorted(r for r, rows in self.recent.items() if rows)
        out: dict[str, Any] = {"run": self.path.name, "model": config.get("model"), "world_size": self.world_size,
                               "ranks_seen": len(self.tails), "closed_ranks": sum(t.closed for t in self.tails.values()),
                               "bad_lines": sum(t.bad_lines for t in self.tails.values()), "closed": self.closed,
                               "last_step": max(self.last_step.values(), default=None), "ranks": []}
        if not ranks:
            return out
        values = np.array([_measured(self.recent[r]) for r in ranks], dtype=float)  # ranks x steps x columns
        column = {name: values[:, :, i] for name, i in _INDEX.items()}
        step_s = column["step_s"]
        total_s = np.nansum(step_s, axis=1)
        with warnings.catch_warnings(action="ignore", category=RuntimeWarning):  # a rank without a value: NaN
            median_s = np.nanmedian(step_s, axis=1)
            tokens_per_s = _per_second(column["tokens"], total_s)
            samples_per_s = _per_second(column["samples"], total_s)
            shares = {p: np.nansum(column[f"{p}_s"], axis=1) / total_s for p in SHARES}
            means = {p: np.nanmean(column[f"{p}_s"], axis=1) for p in SHARES if p != "comm_exposed"}
            waits = np.nan_to_num(np.nanmedian(column["comm_exposed_s"], axis=1))
            work = median_s - waits
            peak = _last(column["peak_memory_gb"])
            host = _last(column["host_memory_gb"])
        shares["other"] = 1 - sum(np.nan_to_num(s) for s in shares.values())
        devices = self.world_size or len(ranks)
        sharing = model_parallel(config)
        run_tokens, run_samples = (float(np.nansum(rate)) / sharing if np.isfinite(rate).any() else math.nan
                                   for rate in (tokens_per_s, samples_per_s))
        mfu = run_mfu(config, environment, run_tokens, run_samples, devices)
        per_rank_rate = tokens_per_s if np.isfinite(tokens_per_s).any() else samples_per_s
        mean_rate = float(np.nanmean(per_rank_rate)) if np.isfinite(per_rank_rate).any() else math.nan
        out.update(tokens_per_s=run_tokens, tokens_per_s_per_device=run_tokens / devices, mfu=mfu,
                   step_s=float(np.nanmedian(median_s)))
        slow = slowest(work)
        if slow is not None and len(ranks) > 1:
            excess = {p: float(m[slow] - median_of_others(m, slow)) for p, m in means.items() if np.isfinite(m[slow])}
            phase = max(excess, key=excess.get) if excess else None
            out["slowest"] = {"rank": ranks[slow], "work_s": float(work[slow]),
                              "median_work_s": median_of_others(work, slow),
                              "phase": phase, "phase_excess_s": excess.get(phase, math.nan) if phase else math.nan,
                              "others_wait_s": median_of_others(waits, slow)}
        for i in np.argsort(-np.nan_to_num(work, nan=-np.inf), kind="stable"):
            out["ranks"].append({"rank": ranks[i], "step": self.last_step.get(ranks[i]), "step_s": float(median_s[i]),
                                 "tokens_per_s": float(tokens_per_s[i]),
                                 "mfu": mfu * float(per_rank_rate[i]) / mean_rate if mean_rate else math.nan,
                                 "shares": {p: float(s[i]) for p, s in shares.items()},
                                 "peak_memory_gb": float(peak[i]), "host_memory_gb": float(host[i]),
                                 "closed": self.tails[ranks[i]].closed})
        return out


def _measured(rows: deque[list[Any]]) -> list[list[Any]]:
    """The rows of completed, measured steps (all completed ones while the
    run is still warming up), padded to :data:`RECENT_STEPS` with empty rows."""
    warmup, oom = _INDEX["warmup"], _INDEX["out_of_memory"]
    completed = [r for r in rows if not r[oom]]
    measured = [r for r in completed if not r[warmup]] or completed
    empty = [None] * len(LINE_COLUMNS)
    return [[math.nan if v is None else v for v in r] for r in measured] + [empty] * (RECENT_STEPS - len(measured))


def _per_second(counts: np.ndarray, total_s: np.ndarray) -> np.ndarray:
    """Per rank, sum of ``counts`` / seconds; NaN where no count was recorded."""
    known = np.isfinite(counts).any(axis=1)
    return np.where(known & (total_s > 0), np.nansum(counts, axis=1) / np.where(total_s > 0, total_s, 1), np.nan)


def _last(values: np.ndarray) -> np.ndarray:
    """Per rank, the last value that is not NaN (NaN where none)."""
    return pd.DataFrame(values).ffill(axis=1).iloc[:, -1].to_numpy()


def run_mfu(config: dict[str, Any], environment: dict[str, Any], tokens_per_s: float, samples_per_s: float,
            devices: int) -> float:
    """The run's MFU at these rates, by ``trainperf.derived``; NaN where it cannot be known, or is not
    plausible (above 1)."""
    row = {**{k: v for k, v in config.items() if not isinstance(v, (dict, list))}, "run_id": "watch", "gpus": devices,
           "tokens_per_s": tokens_per_s if math.isfinite(tokens_per_s) else None,
           "samples_per_s": samples_per_s if math.isfinite(samples_per_s) else None}
    row.setdefault("platform", environment.get("device"))
    if (peak := (environment.get("cpu_peak") or {}).get("tflops")) is not None:
        row.setdefault("peak_tflops_per_gpu", peak)
    try:
        with warnings.catch_warnings(action="ignore"):
            mfu = float(derive(pd.DataFrame([row]))["mfu"].iloc[0])
    except (ValueError, TypeError, KeyError):
        return math.nan
    return mfu if 0 < mfu <= 1 else math.nan


def render(frames: list[dict[str, Any]]) -> Group:
    """One frame of the view: per run, a line of run figures, the slowest rank and a table of ranks."""
    parts: list[Any] = []
    for f in frames:
        state = "closed" if f["closed"] else "running"
        parts.append(Text.from_markup(
            f"[bold]{f['run']}[/bold] {f['model'] or ''}  {state}  ranks {f['ranks_seen']}/{f['world_size'] or '?'} "
            f"({f['closed_ranks']} closed)  last step {_shown(f['last_step'])}"
            + (f"  [red]{f['bad_lines']} unreadable line(s)[/red]" if f["bad_lines"] else "")))
        if not f["ranks"]:
            parts.append(Text("  no step written yet"))
            continue
        parts.append(Text(f"  step {_ms(f['step_s'])}   tokens/s {_shown(f['tokens_per_s'], ',.0f')} total, "
                          f"{_shown(f['tokens_per_s_per_device'], ',.0f')} per device   "
                          f"MFU {_shown(f['mfu'] * 100, '.2g', '%')}"))
        if slow := f.get("slowest"):
            where = (f", +{_ms(slow['phase_excess_s'])} in {slow['phase']} beyond the others' median"
                     if slow["phase"] and slow["phase_excess_s"] > 0 else "")
            parts.append(Text(f"  slowest: rank {slow['rank']}, {_ms(slow['work_s'])} of work a step against "
                              f"{_ms(slow['median_work_s'])} for the others' median{where}; the others wait "
                              f"{_ms(slow['others_wait_s'])} a step for communication"))
        rows = f["ranks"]
        phases = [p for p in (*SHARES, "other") if any(r["shares"][p] > 0 for r in rows)]
        table = Table(box=None, pad_edge=False)
        for name in ("rank", "step", "ms", "tokens/s", "MFU", *(SHORT.get(p, p) for p in phases), "peak GiB",
                     "host GiB"):
            table.add_column(name, justify="right", no_wrap=True)
        shown = rows if len(rows) <= SHOWN_RANKS else rows[:SHOWN_RANKS - 1] + rows[-1:]
        for i, r in enumerate(shown):
            if len(rows) > SHOWN_RANKS and i == SHOWN_RANKS - 1:
                table.add_row(f"({len(rows) - SHOWN_RANKS} more)", *[""] * (len(table.columns) - 1))
            table.add_row(str(r["rank"]), _shown(r["step"]), f"{r['step_s'] * 1e3:.1f}",
                          _shown(r["tokens_per_s"], ",.0f"), _shown(r["mfu"] * 100, ".2g", "%"),
                          *(_shown(r["shares"][p], ".0%") for p in phases),
                          _shown(r["peak_memory_gb"], ".2f"), _shown(r["host_memory_gb"], ".2f"))
        parts.append(table)
    return Group(*parts)


def _shown(value: Any, spec: str = "", unit: str = "") -> str:
    """``value`` formatted by ``spec``, then ``unit``; ``-`` where it is None or not finite."""
    return "-" if value is None or not math.isfinite(value) else f"{value:{spec}}{unit}"


def _ms(seconds: float) -> str:
    return _shown(seconds * 1e3, ".1f", " ms")


def watch(path: str | Path, once: bool = False, console: Console | None = None) -> int:
    """Show the runs of ``path`` until every one is closed (``once``: one
    frame). DataError when ``path`` is not a folder, or with ``once`` holds no run."""
    path = Path(path)
    if not path.is_dir():
        raise DataError("no such folder", path=path)
    console = console or Console(width=None if sys.stdout.isatty() else WIDE)
    watches: dict[Path, RunWatch] = {}

    def frame() -> Group:
        runs = [path] if (path / MANIFEST_FILE).exists() else sorted(p.parent for p in path.glob(f"*/{MANIFEST_FILE}"))
        for run in runs:  # ``path`` itself, or the run folders in it
            watches.setdefault(run, RunWatch(run))
        for run_watch in watches.values():
            run_watch.update()
        return render([w.frame() for w in watches.values()]) if watches else Group(Text(f"waiting for a run in {path}"))

    if once:
        shown = frame()
        if not watches:
            raise DataError("no run folder (no manifest.json here or in its folders)", path=path)
        console.print(shown)
        return 0
    with Live(frame(), console=console, refresh_per_second=4, auto_refresh=False) as live:
        while not watches or not all(w.closed for w in watches.values()):
            time.sleep(REFRESH_S)
            live.update(frame(), refresh=True)
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Register ``watch``."""
    parser = subparsers.add_parser(
        "watch", help="a live view of a run (or a folder of runs) while it is written",
        description="Follow the run folder(s) StepProfiler writes: per rank the recent step time, tokens/s, MFU, "
                    "phase shares and memory, the slowest rank and what the others wait for; refreshed every "
                    "second from what was appended, until every run is closed.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder, or a folder of run folders")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.set_defaults(run=lambda args: watch(args.run_dir, args.once))
