"""Damaged and hostile input: every value bounded and typed, duplicate step
records caught, hostile text (a regular expression, a YAML document) bounded
in time and memory. Each case is one a user or an attacker reported, with
its symptom before the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainperf import DataError
from trainperf.importers.settings import MAX_YAML_BYTES, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (the repository's), ended after ``timeout`` seconds: a generous bound,
    far above what the guarded code takes, that only a read without bound reaches."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# --- hostile text -------------------------------------------------------------------------------------------------

def test_a_backtracking_pattern_ends_in_seconds_with_an_error_naming_the_sidecar(tmp_path):
    """``(a|aa)+$`` backtracks through every split of a run of a's: with Python's ``re`` the time doubles about
    every 1.4 characters (60 a's: years). The read stops at the first line with a DataError naming the sidecar."""
    log = tmp_path / "train.log"
    log.write_text("step 1 " + "a" * 60 + "b\n")
    (tmp_path / "train.log.trainperf.yaml").write_text("pattern: '(?P<step_time_s>a|aa)+$'\n")
    done = run_python(f"""
        from trainperf import DataError
        from trainperf.importers import import_path
        try:
            import_path({str(log)!r})
        except DataError as exc:
            print("DataError:", exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "DataError: " + str(tmp_path / "train.log.trainperf.yaml") + ", column 'pattern'" in done.stdout
    assert "line 1 of" in done.stdout and "backtracks" in done.stdout


def test_the_nested_quantifier_of_the_report_ends_in_seconds(tmp_path):
    """``(a+)+$`` took 37 s at 30 characters with ``re``, doubling with each one: at 40, about ten hours. The
    log is read: its line does not match (a DataError saying no line did), not a wait."""
    log = tmp_path / "train.log"
    log.write_text("a" * 40 + "b\n")
    (tmp_path / "train.log.trainperf.yaml").write_text("pattern: '(?P<step_time_s>a+)+$'\n")
    done = run_python(f"""
        from trainperf import DataError
        from trainperf.importers import import_path
        try:
            import_path({str(log)!r})
        except DataError as exc:
            print("DataError:", exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "DataError:" in done.stdout and "backtracks" not in done.stdout


def test_a_yaml_alias_bomb_is_refused_before_it_is_built(tmp_path):
    """383 bytes of nested aliases stand for 9^9 strings (4.9 GB when PyYAML built them): refused at the first
    anchor, naming the file and line."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for name, before in zip("bcdefghi", "abcdefgh"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{before}"] * 9) + "]")
    sidecar = tmp_path / "train.log.trainperf.yaml"
    sidecar.write_text("\n".join(lines) + "\n")
    assert len(sidecar.read_bytes()) < 400
    with pytest.raises(DataError, match=r"train.log.trainperf.yaml, line 1: not valid YAML: anchors and aliases"):
        read_yaml(sidecar)


def test_an_alias_alone_is_refused_too(tmp_path):
    sidecar = tmp_path / "s.yaml"
    sidecar.write_text("model: m\nruns:\n  a: &cfg {gpus: 8}\n  b: *cfg\n")
    with pytest.raises(DataError, match=r"line 3: not valid YAML: anchors and aliases"):
        read_yaml(sidecar)


def test_a_sidecar_over_the_size_bound_is_refused_and_one_under_it_read(tmp_path):
    sidecar = tmp_path / "s.yaml"
    sidecar.write_text("model: m\n" + "# padding\n" * (MAX_YAML_BYTES // 10))
    with pytest.raises(DataError, match=r"s.yaml: larger than 1 MiB"):
        read_yaml(sidecar)
    sidecar.write_text("model: m\n" + "# padding\n" * (MAX_YAML_BYTES // 10 - 1))
    assert read_yaml(sidecar) == {"model": "m"}
