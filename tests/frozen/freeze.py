"""Freeze the frames of every input (see ``frames.py``):

    PYTHONPATH=lib .venv/bin/python tests/frozen/freeze.py
"""

from __future__ import annotations

import shutil

from frames import FROZEN, inputs, write

if __name__ == "__main__":
    shutil.rmtree(FROZEN, ignore_errors=True)
    for path in inputs():
        write(path)
        print(path)
