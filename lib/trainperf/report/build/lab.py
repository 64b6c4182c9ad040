"""``make lab``: ``python -m trainperf.report.build.lab [JUPYTER LAB FLAGS...]`` starts JupyterLab on
``notebooks/`` from this environment, with ``--allow-root`` as root (Jupyter refuses root otherwise) and
``--no-browser`` without a display (neither ``DISPLAY`` nor ``WAYLAND_DISPLAY``: a server, a container, SSH).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from trainperf.report.build.pipeline import NOTEBOOKS


def lab_command(extra: Sequence[str] = (), *, root: bool | None = None,
                env: Mapping[str, str] | None = None) -> list[str]:
    """The ``jupyter lab`` command line for ``notebooks/``; ``root`` and ``env``
    default to this process's user and environment."""
    root = os.geteuid() == 0 if root is None else root
    env = os.environ if env is None else env
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={NOTEBOOKS}"]
    if root:
        command.append("--allow-root")
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        command.append("--no-browser")
    return [*command, *extra]


def main(argv: Sequence[str] | None = None) -> None:
    command = lab_command(sys.argv[1:] if argv is None else argv)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
