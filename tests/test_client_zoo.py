"""A zoo of public training clients this project did not write (``zoo_clients.py`` names each: package, version,
file), instrumented as the README says, run short on CPU alone and on two ranks (torchrun, gloo). Every figure is
checked against the client's own timers and counters or a hand computation, each rank's from its own files:

* samples and tokens: the clients' batch sizes, accumulation and sequence lengths, by hand;
* step times: Lightning's ``ThroughputMonitor`` clock, and the plain loop's own clock read after each step
  (both read at the step's end, as the profiler is: within 10 ms + 2 %);
* time outside the steps: the ``Trainer``'s ``eval_runtime`` (inside the profiler's ``validation``, which adds the
  ``Trainer``'s logging at that step: within 0.5 s) and the rank-0 evaluation's own clock in the plain loop (inside
  the phase: within 10 ms + 5 %);
* FLOPs: none of the models is a decoder-only transformer (an encoder-decoder LM, an encoder classifier, a CNN),
  so each is counted, and the count equals Lightning's own ``measure_flops`` on the same model and batch, or the
  hand count below (exactly: both count the same matmuls and convolutions);
* MFU: the run's samples/s times its counted FLOPs per sample over its peak, in (0, 1].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainperf import derive, load_runs, load_steps
from trainperf.runfolder.eventfile import read_events

sys.path.insert(0, str(Path(__file__).parent))
import zoo_clients as zoo  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:When using the `ThroughputMonitor`"),
              pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TIMEOUT_S = 300


def run_client(name: str, tmp_path: Path, ranks: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[dict]]:
    """Run client ``name`` on ``ranks`` ranks (one: in this process); its run folder and what each rank's client
    reported."""
    run_dir = tmp_path / "run"
    if ranks == 1:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "work").mkdir()
        return run_dir, [json.loads(json.dumps(zoo.CLIENTS[name](run_dir, tmp_path / "work"), default=float))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([*TORCHRUN, str(Path(zoo.__file__)), name, str(run_dir), str(tmp_path / "found.json")],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir, [json.loads((tmp_path / f"found-rank{r}.json").read_text()) for r in range(ranks)]


def counted_run(run_dir: Path, ranks: int, flops_per_sample: float) -> dict[str, Any]:
    """The run's row, checked: counted FLOPs as given, MFU from them, in (0, 1]."""
    row = derive(load_runs(run_dir)).iloc[0].to_dict()
    assert row["gpus"] == ranks and row["complete"]
    assert row["flops_convention_used"] == "counted" and row["flops_per_sample"] == flops_per_sample
    assert row["mfu"] == pytest.approx(row["samples_per_s"] * flops_per_sample / 1e12 / ranks
                                       / row["peak_tflops_per_gpu"], rel=1e-9)
    assert 0 < row["mfu"] <= 1
    return row


def phases_within_steps(steps: Any) -> None:
    timed = steps[["data_s", "forward_s", "loss_s", "backward_s", "optimizer_s"]].sum(axis=1)
    assert (steps[["forward_s", "backward_s", "optimizer_s"]] > 0).all().all()
    assert (timed <= steps["step_s"] + 1e-6).all()


def within(measured: float, reference: float, absolute: float, relative: float) -> bool:
    return abs(measured - reference) <= absolute + relative * reference


# -- lightning-lm ----------------------------------------------------------------------------------------------------


def check_lightning_lm(run_dir: Path, found: list[dict], ranks: int) -> None:
    from lightning.fabric.utilities.throughput import measure_flops
    from lightning.pytorch.demos.transformer import Transformer
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # Lightning's own count of one micro-batch of 2 sequences of 35 tokens on the same model, per sequence
    model = Transformer(vocab_size=found[0]["vocab_size"])
    ids = torch.randint(0, found[0]["vocab_size"], (2, zoo.BLOCK))
    with sdpa_kernel(SDPBackend.MATH):
        lightning_count = measure_flops(model, lambda: model(ids, ids),
                                        lambda out: torch.nn.functional.nll_loss(out, ids.view(-1))) / 2
    row = counted_run(run_dir, ranks, lightning_count)
    assert row["flops_per_token"] == lightning_count / zoo.BLOCK and row["grad_accum_steps"] == 2
    steps = load_steps(run_dir)
    # by hand: 5 steps of 2 micro-batches of 2 sequences of 35 tokens on each rank
    assert len(steps) == 5 * ranks and (steps["micro_steps"] == 2).all()
    assert (steps["samples"] == 4).all() and (steps["tokens"] == 4 * zoo.BLOCK).all()
    phases_within_steps(steps)
    # Lightning's ThroughputMonitor (rank 0): its clock at each optimizer step's end, since training started
    clock = found[0]["time"]
    assert found[0]["samples"] == [4.0 * (i + 1) for i in range(5)]
    mine = steps[steps["rank"] == 0].sort_values("step")["step_s"].tolist()
    for i in range(1, 5):
        assert within(mine[i], clock[i] - clock[i - 1], 0.01, 0.02), (i, mine[i], clock[i] - clock[i - 1])


def test_lightning_demo_language_model(tmp_path, monkeypatch):
    run_dir, found = run_client("lightning-lm", tmp_path, 1, monkeypatch)
    check_lightning_lm(run_dir, found, 1)


@pytest.mark.slow
def test_lightning_demo_language_model_two_ranks(tmp_path, monkeypatch):
    run_dir, found = run_client("lightning-lm", tmp_path, 2, monkeypatch)
    check_lightning_lm(run_dir, found, 2)
    assert load_runs(run_dir).iloc[0]["strategy"] == "ddp"


# -- hf-classifier -------------------------------------------------------------------------------------------------


def bert_flops_per_sample() -> int:
    """By hand, forward per sequence of T = 16 tokens (L = 2 layers of width d = 32, MLP I = 64 wide, C = 3
    classes): per token and layer, q, k, v and output projections 4 · 2·d², the MLP 2 · 2·d·I, attention scores
    and their product with v 2 · 2·T·d (the whole T × T); then the pooler 2·d² and the classifier 2·d·C.
    Backward is twice the forward (the embeddings train, so every matmul's input needs its gradient): 3 × forward."""
    L, d, I, T, C = 2, 32, 64, zoo.SEQ, 3
    forward = T * L * (8 * d * d + 4 * d * I + 4 * T * d) + 2 * d * d + 2 * d * C
    assert forward == 592_064
    return 3 * forward


def check_hf_classifier(run_dir: Path, found: list[dict], ranks: int) -> None:
    row = counted_run(run_dir, ranks, bert_flops_per_sample())
    assert row["flops_per_token"] == bert_flops_per_sample() / zoo.SEQ and row["grad_accum_steps"] == 2
    steps = load_steps(run_dir)
    assert len(steps) == 6 * ranks and (steps["samples"] == 8).all() and (steps["tokens"] == 8 * zoo.SEQ).all()
    phases_within_steps(steps)
    for rank, client in enumerate(found):
        train = client["train"]
        # the Trainer's own rate over its own runtime: every sample of every rank, 6 steps of 2 × 4
        assert train["train_samples_per_second"] * train["train_runtime"] == pytest.approx(48 * ranks, rel=2e-3)
        mine = steps[steps["rank"] == rank]
        assert mine["samples"].sum() == 48  # this rank's: 6 steps of 2 micro-batches of 4
        events, bad = read_events(run_dir / f"events-rank{rank}.jsonl")
        validations = [e.seconds for e in events if e.name == "validation"]
        assert bad == [] and len(validations) == len(client["eval_runtime"]) == 2
        for seconds, runtime in zip(validations, client["eval_runtime"]):
            assert runtime - 1e-3 <= seconds <= runtime + 0.5
        # the Trainer's runtime holds every step and evaluation it timed
        assert mine["step_s"].sum() + sum(validations) <= train["train_runtime"] + 1e-3


def test_hf_trainer_encoder_classifier(tmp_path, monkeypatch):
    run_dir, found = run_client("hf-classifier", tmp_path, 1, monkeypatch)
    check_hf_classifier(run_dir, found, 1)


@pytest.mark.slow
def test_hf_trainer_encoder_classifier_two_ranks(tmp_path, monkeypatch):
    run_dir, found = run_client("hf-classifier", tmp_path, 2, monkeypatch)
    check_hf_classifier(run_dir, found, 2)


# -- fabric-loop ---------------------------------------------------------------------------------------------------


def check_fabric_loop(run_dir: Path, found: list[dict], ranks: int) -> None:
    from lightning.fabric.utilities.throughput import measure_flops

    model, images = zoo.resnet(), torch.randn(4, 3, zoo.IMAGE, zoo.IMAGE)
    labels = torch.randint(0, 3, (4,))
    lightning_count = measure_flops(model, lambda: model(images), lambda out: zoo.loss_fn(out, labels)) / 4
    row = counted_run(run_dir, ranks, lightning_count)
    assert row["samples_per_s"] == pytest.approx(row["samples"] / row["elapsed_s"])  # images: no tokens
    steps = load_steps(run_dir)
    # by hand: 20 images, split between the ranks by Fabric's distributed sampler, in batches of 4, 2 epochs
    share = 20 // ranks
    epoch = [4] * (share // 4) + ([share % 4] if share % 4 else [])  # one rank: 5 × 4; two: 4, 4, 2
    assert steps["tokens"].isna().all()
    phases_within_steps(steps)
    for rank, client in enumerate(found):
        mine = steps[steps["rank"] == rank].sort_values("step")
        assert mine["samples"].tolist() == epoch * 2
        stamps, seconds = client["stamps"], mine["step_s"].tolist()
        for i in range(1, 2 * len(epoch)):
            if i != len(epoch):  # the first step of the second epoch begins after the evaluation
                assert within(seconds[i], stamps[i] - stamps[i - 1], 0.01, 0.02), (rank, i, seconds[i])
        events, bad = read_events(run_dir / f"events-rank{rank}.jsonl") \
            if (run_dir / f"events-rank{rank}.jsonl").exists() else ([], [])
        validations = [e.seconds for e in events if e.name == "validation"]
        assert len(validations) == len(client["evaluations"]) == (2 if rank == 0 else 0)
        for seconds, timed in zip(validations, client["evaluations"]):  # the evaluation's clock, inside the phase
            assert timed <= seconds <= timed + 0.01 + 0.05 * timed


def test_fabric_readme_loop_training_a_cnn(tmp_path, monkeypatch):
    run_dir, found = run_client("fabric-loop", tmp_path, 1, monkeypatch)
    check_fabric_loop(run_dir, found, 1)


@pytest.mark.slow
def test_fabric_readme_loop_training_a_cnn_two_ranks(tmp_path, monkeypatch):
    run_dir, found = run_client("fabric-loop", tmp_path, 2, monkeypatch)
    check_fabric_loop(run_dir, found, 2)
    # watch() looks through Fabric's wrapper to the DDP module it runs: the gradient all-reduces are timed. Rank 1's
    # all-reduce after rank 0's evaluation waits for that evaluation: booked as wait_outside_s, not communication
    steps = load_steps(run_dir)
    waited = steps["wait_outside_s"].fillna(0) > 0
    assert load_runs(run_dir).iloc[0]["strategy"] == "ddp" and (steps["comm_s"] + steps["wait_outside_s"].fillna(0) > 0).all()
    assert waited.any() and (steps.loc[waited, "rank"] == 1).all()


def test_an_anchor_the_source_lacks_stops_the_instrumentation():
    with pytest.raises(RuntimeError, match="anchor 'for batch in loader:' found 0 times"):
        zoo.instrument(zoo.fabric_source(), [("replace", "for batch in loader:", ["x"])])
