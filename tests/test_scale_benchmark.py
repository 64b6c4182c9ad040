"""The scale benchmark's run folder (``benchmarks/load_scale.py``) is one that both this version and the previous
one read: steps files of the first version, every line read (a header of the current version over lines of the
first once made every line a bad one, and the benchmark timed reading nothing)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import load_scale  # noqa: E402

from trainperf.runfolder import rankfile  # noqa: E402


def test_the_synthetic_rank_files_are_version_1_and_read_whole(tmp_path):
    load_scale.write_rank(tmp_path, rank=3, ranks=8, steps=50)
    read = rankfile.read_rank_file(tmp_path / "steps-rank3.jsonl")
    assert read.bad_lines == [] and read.closed
    assert read.written == rankfile.VERSION_1_COLUMNS and len(read.columns["step"]) == 50
    # 9 phases of 1 to 20 ms, each 10 % longer on the straggler, plus 0.5 ms: steps of 10 to 199 ms
    assert np.all((read.columns["step_s"] > 0.0005 + 9 * 0.0011) & (read.columns["step_s"] < 0.0005 + 9 * 0.022))
