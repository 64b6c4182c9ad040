"""Make sure the report browser tests have a Chromium: ``make test`` runs
``python -m trainperf.report.browser_install`` before the tests.

An installed Chrome or Chromium on ``PATH`` is used as it is. Otherwise
Debian's ``chromium`` package is installed with apt-get where that is
possible: as root, or through ``sudo`` when it needs no password. Otherwise
the command stops with one line saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from trainperf.report.browser import find_chromium

PACKAGE = "chromium"
WHAT_TO_INSTALL = (f"the report browser tests need Chromium or Chrome on PATH: install the Debian package "
                   f"`{PACKAGE}` (sudo apt-get install {PACKAGE}) or Google Chrome, then run make test again")


def installer() -> list[str] | None:
    """The command prefix that runs apt-get with root rights here, or ``None``:
    ``["apt-get"]`` as root, ``["sudo", "-n", "apt-get"]`` with passwordless sudo."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n", "apt-get"]
    return None


def ensure_chromium() -> str:
    """The path of a Chromium, installed with apt-get first if none is on ``PATH``.
    Raises ``RuntimeError`` (:data:`WHAT_TO_INSTALL`) when there is none and it cannot be installed."""
    found = find_chromium()
    if found:
        return found
    apt = installer()
    if apt is None:
        raise RuntimeError(WHAT_TO_INSTALL)
    print(f"installing {PACKAGE} for the report browser tests: {' '.join(apt)} install {PACKAGE}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["update", "-qq"], ["install", "-y", "-qq", "--no-install-recommends", PACKAGE]):
        done = subprocess.run([*apt, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{' '.join(apt)} {args[0]} failed ({last}); {WHAT_TO_INSTALL}")
    found = find_chromium()
    if found is None:
        raise RuntimeError(f"{PACKAGE} was installed but no Chromium is on PATH; {WHAT_TO_INSTALL}")
    return found


def main() -> int:
    try:
        ensure_chromium()
    except RuntimeError as exc:
        print(f"make test: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
