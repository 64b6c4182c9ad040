"""Every log format under the ways launchers and collectors change a log: ``srun -l`` task labels, torchrun
``[rankN]:`` prefixes nested in them, ANSI colours, the same step printed by every rank with or without a
prefix, gzip, CRLF line ends and unrelated lines in between. Each variant must read as the one run the plain
log is, with the same throughput (one step printed by many ranks is not many runs)."""

import gzip
import re
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from trainperf import derive
from trainperf.errors import DataWarning
from trainperf.importers import import_path
from trainperf.importers.text import rank_prefix

DATA = Path(__file__).resolve().parent / "data" / "importers"
PLAIN = {
    # format: (sample log, lines of one rank only)
    "composer": ("composer_mpt30b_mi300x.log", None),
    "deepspeed": ("deepspeed_chat_opt350m_reward.log", None),
    "hf_trainer": ("hf_trainer_gaudi_mrpc.log", None),
    "lightning_csv": ("lightning_metrics.csv", None),
    "llmc": ("llmc_gpt2_1558m.log", None),
    "maxtext": ("maxtext_mixtral_8x7b_v6e.log", None),
    "megatron": ("megatron_lm.log", None),
    "nanogpt": ("nanogpt.log", None),
    "nemo": ("nemo_nemotron4_15b.log", None),
    "torchtitan": ("torchtitan.log", "[rank0]:"),
}
"""Sample logs of one rank (a prefix keeps only that rank's lines, without it)."""

NOISE = "NCCL INFO Channel 00/02 :    0   1   2   3"


def colour(text: str) -> str:
    return f"\x1b[32m{text}\x1b[0m"


VARIANTS: dict[str, Callable[[list[str]], list[str]]] = {
    "srun -l, colours, nine ranks": lambda lines: [f"{r}: {colour(line)}" for line in lines for r in range(9)],
    "srun -l over torchrun prefixes": lambda lines: [f"{r // 4}: [rank{r}]:{line}" for line in lines for r in range(8)],
    "every rank, no prefix": lambda lines: [line for line in lines for _ in range(4)],
    "one srun task for a node's processes": lambda lines: [f"{n}: {line}" for line in lines for n in (0, 1)
                                                           for _ in range(4)],
    "interleaved non-metric lines": lambda lines: [x for line in lines for x in (line, NOISE, "")],
}


def one_rank(name: str, prefix: str | None) -> list[str]:
    lines = (DATA / name).read_text().splitlines()
    if prefix is None:
        return lines
    return [rank_prefix(line)[1] for line in lines if line.startswith(prefix)]


def rates(path: Path, sidecar: Path) -> tuple[int, float, float]:
    if sidecar.exists():
        path.with_name(path.name + ".trainperf.yaml").write_text(sidecar.read_text())
    result = import_path(path)
    derived = derive(result.runs)
    return len(result.runs), float(derived["elapsed_s"].iat[0]), float(derived["tokens_per_s"].iat[0])


@pytest.mark.parametrize("fmt", sorted(PLAIN))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_launcher_variants_read_as_the_plain_log(tmp_path, fmt, variant):
    name, prefix = PLAIN[fmt]
    sidecar = DATA / f"{name}.trainperf.yaml"
    lines = one_rank(name, prefix)
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    plain.write_text("\n".join(lines) + "\n")
    expected = rates(plain, sidecar)
    assert expected[0] == 1 and (math.isfinite(expected[1]) or math.isfinite(expected[2]))
    mangled = tmp_path / "mangled" / name
    mangled.parent.mkdir()
    mangled.write_text("\n".join(VARIANTS[variant](lines)) + "\n")
    got = rates(mangled, sidecar)
    assert got[0] == 1, f"{variant}: {got[0]} runs"
    assert got[1:] == pytest.approx(expected[1:], nan_ok=True)


@pytest.mark.parametrize("fmt", sorted(PLAIN))
def test_gzip_and_crlf_read_as_the_plain_log(tmp_path, fmt):
    name, prefix = PLAIN[fmt]
    sidecar = DATA / f"{name}.trainperf.yaml"
    text = "\n".join(one_rank(name, prefix)) + "\n"
    plain = tmp_path / name
    plain.write_text(text)
    compressed = tmp_path / "gz" / (name + ".gz")
    compressed.parent.mkdir()
    compressed.write_bytes(gzip.compress(text.replace("\n", "\r\n").encode()))
    sidecar_gz = compressed.with_name(compressed.name + ".trainperf.yaml")
    if sidecar.exists():
        sidecar_gz.write_text(sidecar.read_text())
    assert rates(compressed, sidecar_gz)[1:] == pytest.approx(rates(plain, sidecar)[1:], nan_ok=True)


def test_rank_prefixes_nest_and_may_follow_a_collector_timestamp():
    assert rank_prefix("3: [rank17]:step: 10") == (17, "step: 10")
    assert rank_prefix("[default2]:iteration 5/ 10 |") == (2, "iteration 5/ 10 |")
    assert rank_prefix("2025-01-15T10:00:01.5Z 4: step: 10") == (4, "2025-01-15T10:00:01.5Z step: 10")
    assert rank_prefix("2025-01-15 10:00:01 step: 10") == (None, "2025-01-15 10:00:01 step: 10")


def other_rank(line: str) -> str:
    """The same step printed by another rank, whose own rate is one token/s apart."""
    return re.sub(r"tps: ([\d,]+)", lambda m: f"tps: {int(m[1].replace(',', '')) + 1:,}", line)


def test_ranks_printing_a_step_without_a_prefix_stay_ranks_where_two_of_their_lines_are_the_same(tmp_path):
    # four ranks print each torchtitan step, no prefix; some ranks' lines are the same as the line before them,
    # which ranks changes from step to step (a b b a, then a b a b): each line is still its rank's, not an echo
    name, sidecar = "torchtitan.log", DATA / "torchtitan.log.trainperf.yaml"
    lines = one_rank(name, "[rank0]:")
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    plain.write_text("\n".join(lines) + "\n")
    mangled = tmp_path / "mangled" / name
    mangled.parent.mkdir()
    orders = [(0, 1, 1, 0), (0, 1, 0, 1)]
    mangled.write_text("\n".join((line, other_rank(line))[pick] for i, line in enumerate(lines)
                                 for pick in orders[i % 2]) + "\n")
    assert rates(mangled, sidecar) == pytest.approx(rates(plain, sidecar))
    runs = import_path(mangled).runs
    assert runs["ranks"].iat[0] == 4 and bool(runs["complete"].iat[0]) and runs["rank_imbalance"].iat[0] == 1.0


UNPREFIXED = DATA.parent / "zoo" / "unprefixed_ranks" / "torchtitan_pr2389_moe_every_rank_unprefixed_2026_02.log"


@pytest.mark.parametrize("printed", [1, 2])
def test_a_real_log_of_ranks_without_a_prefix_reads_each_line_as_its_rank(tmp_path, printed):
    # pytorch/torchtitan#2389 (its README beside it): seven lines of step 4, lines 3 and 4 the same as the line
    # before them, then rank 0's step 5, 19:46:19,145 − 19:46:17,508 = 1.637 s later; the text is cut there.
    # Printed twice (every line echoed by a wrapper), it reads the same.
    log = tmp_path / UNPREFIXED.name
    log.write_text("".join(line * printed for line in UNPREFIXED.read_text().splitlines(keepends=True)))
    with pytest.warns(DataWarning, match="rank.s. 1, 2, 3, 4, 5, 6 stopped early"):
        result = import_path(log)
    steps = result.steps
    assert sorted(steps.loc[steps["step"] == 4, "rank"]) == list(range(7))
    assert steps.loc[steps["step"] == 5, ["rank", "step_s"]].values.tolist() == [[0, pytest.approx(1.637)]]
    run = result.runs.iloc[0]
    assert run["ranks"] == 7 and run["elapsed_s"] == pytest.approx(1.637) and not run["complete"]


REDRAWN = UNPREFIXED.with_name("nemo1_skypilot_bar_redrawn_unprefixed_2024_07.log")


def test_a_progress_bar_drawn_again_without_its_prefix_is_no_other_rank():
    # SkyPilot's NeMo 1.x log (README beside it): the bar of global step 9 is drawn twice, once without the
    # "(task, pid=6678)" prefix at [33:46] and once with it at [35:00], the same figures. One rank, five steps timed
    # by train_step_timing: 10.40 + 10.90 + 8.440 + 8.710 + 8.610 = 47.06 s, 9.412 s a step.
    with pytest.warns(DataWarning, match="1 line.s. the same as the line just before them"):
        result = import_path(REDRAWN)
    run = derive(result.runs).iloc[0]
    assert run["ranks"] == 1 and run["steps"] == 5 and run["rank_imbalance"] == 1.0
    assert run["elapsed_s"] == pytest.approx(47.06) and run["step_time_s"] == pytest.approx(9.412)
