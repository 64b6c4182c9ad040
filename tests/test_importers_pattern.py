"""A log of a stack without a reader, read with the user's regular expression
(sidecar key ``pattern``, ``trainperf import --pattern``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from trainperf import DataError, derive
from trainperf.importers import import_path

DATA = Path(__file__).resolve().parent / "data" / "any_stack"
ROOT = Path(__file__).resolve().parents[1]


def test_nanochat_real_excerpt_gives_its_step_times_and_the_rate_of_its_whole_batch():
    """karpathy/nanochat run1000.sh quotes two steps of base_train on 8 H100 (524,288 tokens a step, 4
    accumulation steps). The excerpt starts at step 4, past the warm-up: both steps are measured."""
    result = import_path(DATA / "nanochat_d32.log")
    run = derive(result.runs).iloc[0]
    assert result.format == "pattern" and run["steps"] == 2
    assert run["elapsed_s"] == pytest.approx(1.57188 + 1.57276)
    assert run["tokens_per_s"] == pytest.approx(2 * 524_288 / (1.57188 + 1.57276))  # 333,456 tokens/s
    # the author's own estimate of the step: 1.574 s
    assert run["step_time_s"] == pytest.approx(1.574, abs=0.003)
    # nanochat's tok/sec counts one micro-batch of the 8 ranks (131,072 tokens): a quarter of the step's
    # tokens, while its MFU counts all of them (1.20796e10 FLOPs a token against 8 x 989 TFLOP/s)
    assert run["reported_tokens_per_s"] == pytest.approx((83_385 * 1.57188 + 83_338 * 1.57276) / 3.14464)
    assert run["tokens_per_s"] / run["reported_tokens_per_s"] == pytest.approx(4.0, rel=1e-3)
    assert 1.20796e10 * run["tokens_per_s"] / (8 * 989e12) == pytest.approx(run["reported_mfu"], rel=2e-3)
    assert result.steps["loss"].tolist() == [8.813754, 8.488074]


def write(tmp_path: Path, text: str, pattern: str, **sidecar: object) -> Path:
    log = tmp_path / "train.log"
    log.write_text(text)
    values = "".join(f"{key}: {value}\n" for key, value in sidecar.items())
    (tmp_path / "train.log.trainperf.yaml").write_text(f"pattern: '{pattern}'\n{values}")
    return log


LINES = "".join(f"[rank{r}]: it {s} | {t:,} tok/s | {0.5 + 0.1 * r:.1f} s\n" for s, t in
                ((1, 1200), (2, 2000), (3, 2100)) for r in (0, 1))


def test_ranks_warm_up_thousands_separators_and_a_matched_line_that_is_no_number(tmp_path):
    """A log from step 1: step 1 is warm-up; two ranks by their torchrun prefixes; the slowest rank
    (0.6 s a step) times the job; a matched line whose time is not a number is skipped and counted."""
    text = LINES + "[rank0]: it 4 | 2,100 tok/s | n/a s\n"
    log = write(tmp_path, text, r"it (?P<step>\d+) \| (?P<tokens_per_s>[\d,]+) tok/s \| (?P<step_time_s>\S+) s")
    result = import_path(log)
    run = result.runs.iloc[0]
    assert (run["ranks"], run["steps"], run["elapsed_s"]) == (2, 2, pytest.approx(1.2))
    assert run["reported_tokens_per_s"] == pytest.approx(2050.0)  # 2,000 and 2,100, by their equal times
    assert result.skipped_total == 1 and "'n/a' is not a number" in result.skipped[0][2]
    assert sorted(result.steps["rank"].unique()) == [0, 1]


def test_a_rate_alone_is_the_throughput_and_lines_without_a_step_are_counted(tmp_path):
    """Lines with a rate and no step time or step: numbered 1, 2, 3; after the warm-up line the
    throughput is the rates' total work / total time (equal work a step: 2 / (1/2000 + 1/2500))."""
    text = "tokens/s: 1000\nsomething else\ntokens/s: 2000\ntokens/s: 2500\n"
    run = derive(import_path(write(tmp_path, text, r"tokens/s: (?P<tokens_per_s>\d+)", gpus=1)).runs).iloc[0]
    assert run["tokens_per_s"] == pytest.approx(2 / (1 / 2000 + 1 / 2500))
    assert "reported throughput" in run["extra_time_source"]


@pytest.mark.parametrize("pattern, message", [
    (r"step (?P<step>\d+)", "needs a step time or a rate"),
    (r"(?P<tok_s>\d+)", "unknown group(s) tok_s"),
    (r"(?P<tokens_per_s>\d+", "not a regular expression"),
])
def test_a_pattern_that_cannot_measure_is_refused_naming_the_sidecar(tmp_path, pattern, message):
    log = write(tmp_path, "step 1 100\n", pattern)
    with pytest.raises(DataError, match="pattern") as error:
        import_path(log)
    assert message in str(error.value) and "train.log.trainperf.yaml" in str(error.value)


def test_an_unknown_log_is_refused_with_a_pattern_example_and_the_minimal_runs_columns(tmp_path):
    log = tmp_path / "mine.log"
    log.write_text("epoch 1 | 12.3 samples per second\n")
    with pytest.raises(DataError) as error:
        import_path(log)
    text = str(error.value)
    assert "pattern" in text and "(?P<step>" in text and "run_id, gpus, tokens, elapsed_s" in text


def test_import_reads_with_a_pattern_given_on_the_command_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LINES)
    out = tmp_path / "runs.csv"
    done = subprocess.run([sys.executable, "-m", "trainperf", "import", str(log), "--out", str(out), "--pattern",
                           r"it (?P<step>\d+) \| (?P<tokens_per_s>[\d,]+) tok/s \| (?P<step_time_s>[\d.]+) s"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "lib"), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(out)["elapsed_s"].tolist() == pytest.approx([1.2])


def _docs_example(stack: str) -> tuple[str, str]:
    """The line and the sidecar of docs/importers.md's worked example for ``stack``."""
    text = (ROOT / "docs" / "importers.md").read_text()
    section = text.split(f"**{stack}**", 1)[1]
    blocks = section.split("```")
    return blocks[1].strip("\n") + "\n", blocks[3].removeprefix("yaml\n")


@pytest.mark.parametrize("stack, rate", [
    ("torchtune", 2871.4 * 8),           # the per-device rate it prints, times 8 devices
    ("fairseq", 41208.5),                # wps: the job's tokens/s; wpb / wps = 0.794 s an update
])
def test_the_docs_worked_examples_read_as_they_say(tmp_path, stack, rate):
    line, sidecar = _docs_example(stack)
    (tmp_path / "train.log").write_text(line)
    (tmp_path / "train.log.trainperf.yaml").write_text(sidecar)
    run = derive(import_path(tmp_path / "train.log").runs).iloc[0]
    assert run["tokens_per_s"] == pytest.approx(rate)
    if stack == "fairseq":
        assert run["elapsed_s"] == pytest.approx(32722.3 / 41208.5) and run["samples"] == pytest.approx(1046.8)


def test_an_epoch_group_keeps_a_counter_that_restarts_each_epoch_one_run(tmp_path):
    # fairseq-py 2018 progress lines (facebookresearch/fairseq#301, tests/data/zoo/generic): the counter restarts each
    # epoch (epoch 010 ... 8000 / 8223, then epoch 011 1000 / 8223); wps is the epoch's running mean, 961 to 963
    log = Path(__file__).resolve().parent / "data" / "zoo" / "generic" / "fairseq_2018_issue301_progress.log"
    copy = tmp_path / "fairseq.log"
    copy.write_bytes(log.read_bytes())
    counter = r"epoch (?P<epoch>\d+)\s+(?P<step>\d+) / \d+ .*wps=(?P<tokens_per_s>\d+), wpb=(?P<tokens>\d+)"
    without = import_path(copy, {"pattern": counter.replace("(?P<epoch>\\d+)", "\\d+")})
    assert len(without.runs) == 2  # the restart of the counter reads as a new run
    result = import_path(copy, {"pattern": counter})
    assert len(result.runs) == 1
    assert derive(result.runs)["tokens_per_s"].iat[0] == pytest.approx(962, rel=0.01)
