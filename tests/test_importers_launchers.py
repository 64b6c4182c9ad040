"""Every log format under the ways launchers and collectors change a log: ``srun -l`` task labels, torchrun
``[rankN]:`` prefixes nested in them, ANSI colours, the same step printed by every rank with or without a
prefix, gzip, CRLF line ends and unrelated lines in between. Each variant must read as the one run the plain
log is, with the same throughput (one step printed by many ranks is not many runs)."""

import gzip
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from trainperf import derive
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
