"""Every model gets MFU: watch(model) records its parameters, and
count_flops=True counts one step's FLOPs with PyTorch's FLOP counter; both
checked against counts worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

import trainperf
from trainperf import derive
from trainperf.profiler.flop_count import StepFlopCounter
from trainperf.table_rules import check_runs

B, T, D, V = 2, 16, 32, 50


def cnn() -> nn.Module:
    """The README walk's CNN: conv 1 → 4 channels (3 × 3, padding 1), pooled to 4 × 4, a 64 → 10 layer."""
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(64, 10))


# 8 images of 8 × 8: the conv's forward is 2 · (8 · 4 · 8 · 8 outputs) · (1 · 3 · 3) = 36,864 FLOPs and its
# weight gradient as many (its input needs no gradient); the linear layer's forward is 2 · 8 · 64 · 10 = 10,240,
# its two gradients (input, weight) as many each: 73,728 + 30,720 = 104,448 a step, 13,056 a sample
CNN_FLOPS_PER_SAMPLE = (2 * 36_864 + 3 * 10_240) / 8


class TinyTransformer(nn.Module):
    """Embedding, one causal self-attention (q, k, v in one projection, an output projection), a vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.qkv = nn.Embedding(V, D), nn.Linear(D, 3 * D)
        self.out, self.head = nn.Linear(D, D), nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.emb(ids)).split(D, -1)
        return self.head(self.out(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)))


# forward per sequence of T tokens: q, k, v 2·T·D·3D, scores and their product with v 2 · 2·T·T·D (the counter
# counts the whole T × T matrix), output 2·T·D·D, head 2·T·D·V; backward twice that (every input needs its
# gradient): 3 × forward
TRANSFORMER_FLOPS_PER_SAMPLE = 3 * (2 * T * D * 3 * D + 2 * 2 * T * T * D + 2 * T * D * D + 2 * T * D * V)


def test_the_counter_counts_a_cnn_and_a_transformer_step_as_worked_out_by_hand():
    torch.manual_seed(0)
    net = cnn()
    with StepFlopCounter() as counter:
        nn.functional.cross_entropy(net(torch.randn(8, 1, 8, 8)), torch.randint(0, 10, (8,))).backward()
    assert counter.total == CNN_FLOPS_PER_SAMPLE * 8
    model, ids = TinyTransformer(), torch.randint(0, V, (B, T))
    with StepFlopCounter() as counter:
        nn.functional.cross_entropy(model(ids).reshape(-1, V), ids.reshape(-1)).backward()
    assert counter.total == TRANSFORMER_FLOPS_PER_SAMPLE * B


def test_a_cnn_profiled_with_count_flops_gets_its_parameters_flops_and_mfu(tmp_path):
    """No n_params, no FLOPs convention in the configuration: watch() records the parameters, the first
    (warm-up) step is counted, and the run's MFU follows from its samples/s, with the counted convention."""
    torch.manual_seed(0)
    net = cnn()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    prof = trainperf.StepProfiler(tmp_path / "cnn", config={"model": "cnn", "precision": "fp32",
                                                              "peak_tflops_per_gpu": 0.05}, count_flops=True)
    model = prof.watch(net)
    for _ in range(4):
        x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
        with prof.step(samples=8):
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "cnn")).iloc[0]
    assert run["n_params"] == 4 * 9 + 4 + 64 * 10 + 10 and run["extra_trainable_params"] == run["n_params"]
    assert run["flops_per_sample"] == CNN_FLOPS_PER_SAMPLE and run["flops_convention_used"] == "counted"
    assert run["tflops_per_gpu"] == pytest.approx(run["samples_per_s"] * CNN_FLOPS_PER_SAMPLE / 1e12)
    assert run["mfu"] == pytest.approx(run["tflops_per_gpu"] / 0.05)


def test_a_transformer_keeps_its_formula_and_the_counted_convention_gives_its_flops_per_token():
    row = {"run_id": "t", "gpus": 1, "tokens_per_s": 1000.0, "n_params": 1e6, "n_layers": 1, "d_model": D,
           "seq_len": T, "flops_per_sample": float(TRANSFORMER_FLOPS_PER_SAMPLE)}
    palm, counted = derive(check_runs(pd.DataFrame([row, {**row, "run_id": "c", "flops_convention": "counted"}]))
                           ).to_dict("records")
    assert palm["flops_convention_used"] == "palm"  # a formula that fits the model is not replaced
    assert counted["flops_per_token"] == pytest.approx(TRANSFORMER_FLOPS_PER_SAMPLE / T)
    assert counted["tflops_total"] == pytest.approx(1000.0 * TRANSFORMER_FLOPS_PER_SAMPLE / T / 1e12)
