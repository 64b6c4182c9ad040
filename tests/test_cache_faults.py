"""Faults in trainperf's caches (the input cache and the step-intervals store):
a changed byte or a cut file of every kind an entry holds, planted pickles, a
malformed record, a lock whose holder stopped or died, what a killed writer
left. Each ends in the numbers a clean cache gives (the entry built again,
with one warning) or a clear message; never other numbers, never a hang."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import trainperf
from trainperf import DataWarning
from trainperf.reading import cache
from trainperf.reading.input_cache import input_key
from test_store import assert_same, write_run

SEED = 29


@pytest.fixture
def clean(tmp_path, monkeypatch):
    """A run of two ranks, read once into a cache of this test: the run, the
    cache folder and what a clean cache gives (:func:`read_all`)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(folder))
    monkeypatch.delenv("TRAINPERF_INPUT_CACHE", raising=False)
    run = write_run(tmp_path / "run", ranks=2, steps=12)
    return run, folder, read_all(run)


def entry_of(folder: Path) -> Path:
    (found,) = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return found


def stored_files(cache_folder: Path) -> list[Path]:
    """Every file of both entries: the input cache's frame and entry.json, the
    store's parts, summaries and entry.json."""
    return sorted(p for kind in ("inputs", "store") for p in entry_of(cache_folder / kind).rglob("*") if p.is_file())


def read_all(run: Path) -> tuple[pd.DataFrame, trainperf.Summaries, pd.DataFrame, pd.DataFrame]:
    """What a report reads: the runs, the summaries, the intervals, and the intervals through Dask."""
    return (trainperf.load_runs(run), trainperf.load_summaries(run), trainperf.load_steps(run),
            trainperf.load_steps(run, lazy=True).compute().reset_index(drop=True))


def assert_figures(found, figures) -> None:
    runs, summaries, steps, lazy = figures
    pd.testing.assert_frame_equal(found[0], runs)
    assert_same(found[1], summaries)
    pd.testing.assert_frame_equal(found[2], steps)
    pd.testing.assert_frame_equal(found[3], lazy)


def test_a_changed_byte_anywhere_in_an_entry_is_caught_or_changes_nothing(clean):
    """Seeded single-bit flips at 120 places of every file kind (Parquet pages,
    footers, entry.json): the entry's check raises, or what is read is what was
    stored. Checked at the file level, where thousands of faults cost a second."""
    _, folder, _ = clean
    rng = np.random.default_rng(SEED)
    for kind in ("inputs", "store"):
        entry = entry_of(folder / kind)
        record = cache.open_entry(entry)
        for path in [entry / name for name in record["files"]] + [entry / cache.ENTRY_FILE]:
            data = path.read_bytes()
            stored = None if path.name == cache.ENTRY_FILE else cache.read_frame(path)
            for place in rng.integers(0, len(data), 120):
                damaged = bytearray(data)
                damaged[place] ^= 1 << int(rng.integers(0, 8))
                path.write_bytes(damaged)
                try:
                    checked = cache.open_entry(entry)
                    found = checked if stored is None else cache.read_checked(entry, path.relative_to(entry).as_posix(),
                                                                              checked["files"])
                except Exception:
                    continue
                if stored is None:
                    assert found == record, (path, place)
                else:
                    pd.testing.assert_frame_equal(found, stored, obj=f"{path} with byte {place} flipped")
            path.write_bytes(data)


@pytest.mark.parametrize("fault", ["flip", "truncate", "empty"])
def test_every_stored_file_damaged_is_built_again_with_one_warning_and_the_same_numbers(clean, tmp_path, fault):
    """Each file of both entries damaged in turn (a seeded byte flipped in the
    first half, cut to half, or emptied): the next reads give the clean
    cache's numbers; a warning says the entry is built again."""
    run, folder, figures = clean
    pristine = tmp_path / "pristine"
    shutil.copytree(folder, pristine)
    rng = np.random.default_rng(SEED)
    for index, path in enumerate(stored_files(pristine)):
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder)
        target = folder / path.relative_to(pristine)
        data = target.read_bytes()
        cache._warned.clear()  # each entry says once per process that it is built again
        if fault == "flip":  # a byte of the first half: pages and record, not unused padding at the end
            damaged = bytearray(data)
            damaged[int(rng.integers(0, len(data) // 2))] ^= 0xFF
            target.write_bytes(damaged)
        else:
            target.write_bytes(data[:len(data) // 2] if fault == "truncate" else b"")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = read_all(run)
        assert_figures(found, figures)
        rebuilt = [str(w.message) for w in caught if "is not readable" in str(w.message)]
        # a flipped byte the format does not use (a page's statistics) changes nothing and is not noticed
        assert len(rebuilt) == 1 or (fault == "flip" and not rebuilt), (target, [str(w.message) for w in caught])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert_figures(read_all(run), figures)  # built again: read without a warning
        assert not [w for w in caught if "is not readable" in str(w.message)], index


class Marker:
    """A pickle that, unpickled, creates the file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_planted_pickle_under_any_cache_path_never_runs(clean, tmp_path):
    """Pickles that would create a marker file, planted where the old layout
    kept pickles and in place of every file an entry holds: nothing creates
    the marker, and the numbers are the clean cache's."""
    run, folder, figures = clean
    marker = tmp_path / "ran"
    planted = pickle.dumps(Marker(marker))
    key = input_key(run, "run")
    for path in [folder / "inputs" / f"{key}.pkl", folder / "store" / key / "summaries.pkl",
                 *stored_files(folder)]:
        path.write_bytes(planted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        assert_figures(read_all(run), figures)
    assert not marker.exists()
    assert not (folder / "inputs" / f"{key}.pkl").exists()  # what the old layout left is removed


def reseal(entry: Path, **changes) -> None:
    """Seal ``entry`` again with ``changes`` to its content, as a writer would (a valid checksum)."""
    content = {k: v for k, v in cache.open_entry(entry).items() if k != "files"}
    cache.seal(entry, {**content, **changes})


@pytest.mark.parametrize("facts", [[1, 2], {"bad_lines": 3}, "closed"])
def test_malformed_facts_with_a_valid_checksum_are_built_again(clean, facts):
    run, folder, figures = clean
    reseal(entry_of(folder / "store"), facts=facts)
    shutil.rmtree(folder / "inputs")  # the runs are read from the store again
    with pytest.warns(DataWarning, match="its facts are not lists by name"):
        assert_figures(read_all(run), figures)


def test_an_entry_naming_a_warning_class_trainperf_does_not_know_is_read_again(clean):
    """A class is never looked up by the name a file gives: one not in the known set makes the entry unreadable."""
    run, folder, figures = clean
    reseal(entry_of(folder / "inputs"), warnings=[["os.system", "echo ran"]])
    with pytest.warns(DataWarning, match=r"input cache entry .* is not readable \(KeyError: 'os.system'\)"):
        pd.testing.assert_frame_equal(trainperf.load_runs(run), figures[0])


def test_a_part_damaged_after_its_entry_was_opened_is_read_from_the_source_in_its_task(clean):
    """A lazy read whose part file is cut before Dask reads it: the task reads
    that part from the run folder, flags its warm-up as stored, and warns once."""
    run, folder, figures = clean
    lazy = trainperf.load_steps(run, lazy=True)
    (part,) = (entry_of(folder / "store") / "intervals").glob("part-*.parquet")
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # cut: no byte of it can be read as before
    with pytest.warns(DataWarning, match="is not readable"):
        pd.testing.assert_frame_equal(lazy.compute().reset_index(drop=True), figures[3])


def test_cache_folders_are_private(clean, tmp_path):
    _, folder, _ = clean
    old = os.umask(0o022)
    try:
        for path in (folder, folder / "inputs", folder / "store"):
            assert path.stat().st_mode & 0o777 == 0o700, path
    finally:
        os.umask(old)


HOLD = """
import os, signal, sys
from pathlib import Path
from trainperf.reading.cache import holding
with holding(Path(sys.argv[1])):
    print("held", flush=True)
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
"""


def hold(lock: Path, then: str) -> subprocess.Popen:
    """A process that takes ``lock`` and then sends itself signal ``then`` (SIGSTOP: stopped holding it)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), then], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_stopped_holder_of_the_lock_is_named_and_not_waited_for(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cache.LOCK_TIMEOUT, "1")
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    holder = hold(tmp_path / "cache" / "store" / f".{input_key(run, 'run')}.lock", "SIGSTOP")
    try:
        with pytest.warns(DataWarning, match=rf"is held by pid {holder.pid} on {socket.gethostname()} since .*"
                                             r"no sign of life .*going on without it"):
            assert trainperf.load_summaries(run).rows == 20
    finally:
        holder.kill()
        holder.wait()
    assert trainperf.load_summaries(run).rows == 20  # the entry built meanwhile is read


def broken_lock_of_an_ended_holder(tmp_path: Path, host: str) -> None:
    """The lock of the cache entry of a run is held (an open file another process inherited, say) and names a
    process of this host, ``host``, that has ended: the run is read without waiting and without a warning."""
    import fcntl

    run = write_run(tmp_path / "run", ranks=2, steps=10)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = tmp_path / "cache" / "store" / f".{input_key(run, 'run')}.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write(json.dumps({"pid": int(ended.stdout), "host": host, "since": "then"}))
        held.flush()
        with warnings.catch_warnings():
            warnings.simplefilter("error", DataWarning)  # neither waited for nor given up on
            assert trainperf.load_summaries(run).rows == 20


def test_the_lock_of_a_holder_that_is_gone_is_broken(tmp_path, monkeypatch):
    """The lock is held (an open file another process inherited, say) but names a
    process of this host that has ended: it is broken, not waited for."""
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cache.LOCK_TIMEOUT, "600")
    broken_lock_of_an_ended_holder(tmp_path, socket.gethostname())


def test_the_lock_of_a_holder_that_is_gone_is_broken_on_a_host_named_with_hyphens(tmp_path, monkeypatch):
    """As above on a host named as clusters name them (``gpu-node-1``): the lock file names the host as it is,
    and the holder that has ended is still known for one of this host's processes (else the waiter would
    wait the lock's timeout, here 5 s, and then warn)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-node-1")
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cache.LOCK_TIMEOUT, "5")
    broken_lock_of_an_ended_holder(tmp_path, "gpu-node-1")


def test_what_a_killed_writer_left_neither_blocks_nor_stays(tmp_path, monkeypatch):
    """A writer killed (SIGKILL) holding the lock, its temporary folder half
    written; a folder of another host's writer a day old; one of a live writer:
    the next build takes the lock at once and sweeps the first two."""
    root = tmp_path / "cache" / "store"
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    key = input_key(run, "run")
    killed = hold(root / f".{key}.lock", "SIGKILL")
    killed.wait()
    left = root / f".{key}-{cache._host()}-{killed.pid}-abc123"
    (left / "intervals").mkdir(parents=True)
    elsewhere = root / f".{key}-another.host-1-xyz"
    elsewhere.mkdir()
    os.utime(elsewhere, (0, 0))
    live = cache.temp_folder(root, key)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # no wait, no broken entry
        assert trainperf.load_summaries(run).rows == 20
    assert not left.exists() and not elsewhere.exists() and live.exists()
    assert (root / key).is_dir() and not (root / f".{key}.lock").exists()


def test_the_key_holds_the_versions_of_the_libraries_that_shape_what_is_stored(tmp_path, monkeypatch):
    (tmp_path / "runs.csv").write_text("run_id,gpus\na,1\n")
    before = input_key(tmp_path / "runs.csv", "table")
    monkeypatch.setattr(cache, "version", lambda name: "0" if name == "pyarrow" else "1")
    cache.library_versions.cache_clear()
    try:
        assert input_key(tmp_path / "runs.csv", "table") != before
    finally:
        cache.library_versions.cache_clear()
    assert cache.VERSIONED == ("pandas", "numpy", "pyarrow", "dask")


def held_lock(lock: Path, content: bytes):
    """``lock`` held by this process through a file of its own (another holder, as far as flock is concerned)."""
    import fcntl

    lock.parent.mkdir(parents=True, exist_ok=True)
    held = lock.open("wb")
    fcntl.flock(held.fileno(), fcntl.LOCK_EX)
    held.write(content)
    held.flush()
    return held


def test_a_waiter_names_the_holder_once_and_reads_what_it_built(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "TELL_AFTER_S", 0.0)
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    lock = tmp_path / "cache" / "store" / f".{input_key(run, 'run')}.lock"
    held = held_lock(lock, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "now"}).encode())
    threading.Timer(1.0, held.close).start()  # the holder is done a second later
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert trainperf.load_summaries(run).rows == 20
    assert [str(w.message) for w in caught] == [
        f"waiting for {lock}, held by pid {os.getpid()} on {socket.gethostname()} since now (gives up after 30 s "
        f"without a sign of life: ${cache.LOCK_TIMEOUT})"]


@pytest.mark.parametrize("content", [b"\xff\x00garbage", b'{"pid": ', b"[1, 2]", b""])
def test_a_lock_file_damaged_or_cut_neither_blocks_nor_misleads(tmp_path, monkeypatch, content):
    """Left behind (nobody holds it): taken at once. Held: its holder is a process
    that did not say who it is, given up on after the bound like any other."""
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cache.LOCK_TIMEOUT, "1")
    run = write_run(tmp_path / "run", ranks=2, steps=10)
    lock = tmp_path / "cache" / "store" / f".{input_key(run, 'run')}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(content)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert trainperf.load_summaries(run).rows == 20
    shutil.rmtree(tmp_path / "cache")
    held = held_lock(lock, content)
    try:
        os.utime(lock, (0, 0))  # no sign of life for long
        with pytest.warns(DataWarning, match="held by a process that did not say who it is"):
            assert trainperf.load_summaries(run).rows == 20
    finally:
        held.close()
