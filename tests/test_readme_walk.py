"""The README's own paths, as a new user walks them: its example runs table
through ``trainperf report --data``, its profiler snippet on a training loop of
the user's own (a tiny CNN, not the bench model) under torchrun with 1 and 2
ranks, the reports on those run folders, and a rerun into a used folder.

The snippet and the table are read from README.md, so the test follows the
README as it is written; only the run folder of the snippet is replaced by the
one each run writes to.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# What a user defines before the README's snippet: a model that is not the bench's
# GPT, an optimizer, a loss and a loader; DDP when torchrun started the process.
USER_LOOP = '''
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

if "RANK" in os.environ:
    dist.init_process_group("gloo")
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                    nn.Linear(64, 10))
ddp_model = nn.parallel.DistributedDataParallel(net) if dist.is_initialized() else net
opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(1)
loader = [(torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(5)]
'''


def _block(language: str, containing: str) -> str:
    """The README's one fenced block in ``language`` ("" for none) that contains ``containing``."""
    blocks, current, open_language = [], [], None
    for line in README.splitlines():
        if line.startswith("```"):
            if open_language is None:
                open_language, current = line[3:].strip(), []
            else:
                blocks.append((open_language, "\n".join(current) + "\n"))
                open_language = None
        elif open_language is not None:
            current.append(line)
    (found,) = [text for lang, text in blocks if lang == language and containing in text]
    return found


def _visible(page: str) -> str:
    import html

    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "lib"), os.environ.get("PYTHONPATH")) if p)}


def _torchrun(script: Path, ranks: int, run_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                           str(script), str(run_dir)], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)


def _report(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainperf", "report", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_readme_example_table_builds_every_report(tmp_path):
    (tmp_path / "my_runs.csv").write_text(_block("csv", "run_id,"))
    command = _block("", "report --data").splitlines()
    (line,) = [c for c in command if "report --data" in c]
    assert line.split("#")[0].split() == [".venv/bin/trainperf", "report", "--data", "my_runs.csv"]
    done = _report(tmp_path, "--data", "my_runs.csv", "--out", "reports")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "failed" not in done.stderr
    index = _visible((tmp_path / "reports" / "index.html").read_text())
    assert "FAILED" not in index
    # two H100 runs without micro-batch sizes: the batch-size report cannot answer, and says why
    assert re.search(r"Batch size.*not applicable.*micro_batch_size", index), index
    assert "not applicable" in _visible((tmp_path / "reports" / "batch_size.html").read_text()).lower()


@pytest.mark.slow
def test_the_readme_profiler_snippet_on_a_users_own_loop(tmp_path):
    snippet = _block("python", "StepProfiler(")
    assert '"data/runs/my-run"' in snippet
    script = tmp_path / "train.py"
    script.write_text(USER_LOOP + snippet.replace('"data/runs/my-run"', "sys.argv[1]"))
    study = tmp_path / "my-study"
    for ranks in (1, 2):
        done = _torchrun(script, ranks, study / f"cnn-{ranks}", tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (study / "cnn-2").glob("steps-rank*.jsonl")) == [
        "steps-rank0.jsonl", "steps-rank1.jsonl"]
    manifest = json.loads((study / "cnn-1" / "manifest.json").read_text())
    assert manifest["environment"]["cpu_peak"]["tflops"] > 0  # a CPU run gets its peak, hence MFU

    # the rerun of a 2-rank job into the 1-rank run's folder is refused on both ranks, nothing written
    before = sorted(p.name for p in (study / "cnn-1").iterdir())
    rerun = _torchrun(script, 2, study / "cnn-1", tmp_path)
    assert rerun.returncode != 0
    assert f"{study / 'cnn-1'} already holds a run" in rerun.stderr
    assert sorted(p.name for p in (study / "cnn-1").iterdir()) == before

    import trainperf

    runs = trainperf.derive(trainperf.load_runs(study)).set_index("run_id")
    # 5 batches of 8 samples, the first 2 steps warm-up (the profiler's default): 3 measured steps
    assert runs.loc["cnn-2", "gpus"] == 2 and runs.loc["cnn-2", "samples"] == 2 * 3 * 8
    assert (runs.loc["cnn-2", "micro_batch_size"], runs.loc["cnn-2", "global_batch_size"]) == (8, 16)
    # an MFU, or none because 6N on this CNN gives more FLOP/s than the CPU's peak: emptied as impossible
    # (trainperf.invariants), never shown
    emptied = runs["notes"].fillna("").str.contains("mfu, hfu: impossible, emptied: mfu above 1", regex=False)
    assert (runs["mfu"].notna() ^ emptied).all(), runs[["mfu", "notes"]].to_string()

    done = _report(tmp_path, "--data", "my-study/cnn-1", "my-study/cnn-2", "--only", "scaling", "--out", "reports")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DataWarning" not in done.stderr and ".py:" not in done.stderr
    page = _visible((tmp_path / "reports" / "scaling.html").read_text())
    assert "No per-rank steps given" not in page and "seed_004" not in page
    assert re.search(r"cnn-2 2 \d", page), "the per-rank table lists cnn-2 with its 2 ranks"
    assert "changes more than the device count:" not in page  # the warning, not the section's explanation
