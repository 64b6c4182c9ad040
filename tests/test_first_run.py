"""What a new user's first commands need: ``make test`` finds or installs
Chromium, ``make lab`` starts as root or as a user and prints its URL, and
the tests leave the user's ``reports/`` alone."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainperf.report.build.lab import lab_command

import browser  # tests/browser.py: headless Chromium

ROOT = Path(__file__).resolve().parents[1]
SH, CHMOD = shutil.which("sh"), shutil.which("chmod")


# --- make test: Chromium -----------------------------------------------------------

def _script(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{SH}\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH holding only a folder of fake commands: no Chromium, no apt-get, no sudo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def _fake_apt(bin_dir: Path) -> None:
    """An apt-get that logs its arguments and, on install, puts a `chromium` on PATH."""
    _script(bin_dir, "apt-get", f'echo "$@" >> {bin_dir}/apt.log\n'
                                f'if [ "$1" = install ]; then echo "#!/bin/sh" > {bin_dir}/chromium; '
                                f'{CHMOD} +x {bin_dir}/chromium; fi\n')


def test_an_installed_chromium_is_used_as_it_is(bare_path):
    _script(bare_path, "google-chrome", "exit 0\n")
    _fake_apt(bare_path)
    assert browser.ensure_chromium() == str(bare_path / "google-chrome")
    assert not (bare_path / "apt.log").exists()


def test_root_installs_debian_chromium(bare_path, monkeypatch):
    _fake_apt(bare_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert browser.ensure_chromium() == str(bare_path / "chromium")
    assert (bare_path / "apt.log").read_text().splitlines() == [
        "update -qq", "install -y -qq --no-install-recommends chromium"]


def test_a_user_with_passwordless_sudo_installs_through_sudo(bare_path, monkeypatch):
    _fake_apt(bare_path)
    _script(bare_path, "sudo", f'echo "sudo $@" >> {bare_path}/sudo.log\n'
                                   f'[ "$1" = -n ] && shift\n[ "$1" = true ] && exit 0\nexec "$@"\n')
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert browser.ensure_chromium() == str(bare_path / "chromium")
    assert "sudo -n apt-get install -y -qq --no-install-recommends chromium" in (bare_path / "sudo.log").read_text()


@pytest.mark.parametrize("sudo", ["asks for a password", "absent"])
def test_otherwise_one_line_says_what_to_install(bare_path, monkeypatch, capsys, sudo):
    _fake_apt(bare_path)
    if sudo != "absent":
        _script(bare_path, "sudo", "echo 'sudo: a password is required' >&2\nexit 1\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert browser.main() == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "install the Debian package `chromium`" in err
    assert not (bare_path / "apt.log").exists()


def test_no_apt_get_says_what_to_install(bare_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(RuntimeError, match="need Chromium or Chrome on PATH"):
        browser.ensure_chromium()


def test_make_test_gets_chromium_and_checks_the_layers_before_the_tests_and_ci_only_calls_it():
    dry = subprocess.run(["make", "--no-print-directory", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = dry.strip().splitlines()
    assert lines[-3:] == [".venv/bin/python tests/browser.py", ".venv/bin/lint-imports --no-cache",
                          ".venv/bin/python -m pytest -n 2 -q"]
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert commands == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "make test"]


# --- make lab ------------------------------------------------------------------------

@pytest.mark.parametrize("root, env, allow_root, no_browser", [
    (True, {}, True, True),
    (False, {}, False, True),
    (False, {"DISPLAY": ":0"}, False, False),
    (True, {"WAYLAND_DISPLAY": "wayland-0"}, True, False),
])
def test_lab_flags_follow_the_user_and_the_display(root, env, allow_root, no_browser):
    command = lab_command(["--port", "9000"], root=root, env=env)
    assert ("--allow-root" in command) == allow_root
    assert ("--no-browser" in command) == no_browser
    assert command[-2:] == ["--port", "9000"] and f"--ServerApp.root_dir={ROOT / 'notebooks'}" in command


def test_make_lab_passes_args():
    dry = subprocess.run(["make", "--no-print-directory", "-n", "lab", "ARGS=--port 9000"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert dry.strip().splitlines()[-1] == ".venv/bin/python -m trainperf.report.build.lab --port 9000"


@pytest.mark.slow
def test_lab_starts_here_and_prints_its_url(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path)
    lab = subprocess.Popen([sys.executable, "-m", "trainperf.report.build.lab", "--port", str(port)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = lab.stdout.readline()
            if not line:
                break
            seen.append(line)
            if re.search(rf"http://(localhost|127\.0\.0\.1):{port}/lab\?token=\w+", line):
                break
        output = "".join(seen)
        assert re.search(rf"http://(localhost|127\.0\.0\.1):{port}/lab\?token=\w+", output), output
        assert "Running as root is not recommended" not in output and lab.poll() is None
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()


# --- the user's reports/ ---------------------------------------------------------------

def test_no_test_writes_into_the_projects_reports_folder():
    writers = [p.name for p in (ROOT / "tests").glob("*.py")
               if re.search(r"""ROOT\s*/\s*["']reports["']""", p.read_text())]
    assert writers == []
