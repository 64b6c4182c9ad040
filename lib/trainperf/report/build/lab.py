"""``make lab``: JupyterLab on ``notebooks/``, as root or as a user, with or without a display.

``python -m trainperf.report.build.lab [JUPYTER LAB FLAGS...]`` starts ``jupyter lab``
from the same environment with ``--allow-root`` when run as root (Jupyter
refuses root otherwise) and ``--no-browser`` when there is no display
(neither ``DISPLAY`` nor ``WAYLAND_DISPLAY`` is set: a server, a container,
an SSH session). Jupyter prints the URL to open, with its token. Extra flags
(``make lab ARGS="--port 9000"``) are passed on.
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
