"""Every model gets MFU from FLOPs that fit it: watch(model) records its
parameters, keeps the per-token formulas for decoder-only transformers and
counts one step's FLOPs with PyTorch's FLOP counter for any other model
(count_flops=True counts whatever the model); checked against counts worked
out by hand."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

import trainperf
from trainperf import derive
from trainperf.bench.model import GPT, model_config
from trainperf.profiler import step_profiler
from trainperf.profiler.flop_count import StepFlopCounter, decoder_only_transformer, needs_counting
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


class BagOfWords(nn.Module):
    """A text classifier: mean of the token embeddings, one linear layer to the classes (no attention)."""

    def __init__(self, vocab: int = 1000, width: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(vocab, width), nn.Linear(width, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids).mean(1))


def test_an_embedding_and_linear_classifier_gets_counted_flops_not_six_n(tmp_path):
    """watch() alone, as the README shows: the model is no transformer, so its first step is counted. By hand:
    the 64 → 4 layer's forward is 2 · 8 · 64 · 4 = 4,096 FLOPs a step, its backward (input and weight gradients)
    8,192: 12,288 a step of 8 sequences of 32 tokens = 1,536 a sample, 48 a token (the embedding lookup and the
    mean are no matmul). 6N would say 6 · 64,260 = 385,560 a token, 8,033 times as much (MFU 462-499 %)."""
    torch.manual_seed(0)
    net = BagOfWords()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    prof = trainperf.StepProfiler(tmp_path / "bag", config={"model": "bag", "precision": "fp32",
                                                              "peak_tflops_per_gpu": 0.05})
    model = prof.watch(net)
    for _ in range(4):
        ids, labels = torch.randint(0, 1000, (8, 32)), torch.randint(0, 4, (8,))
        with prof.step(tokens=ids.numel(), samples=8):
            nn.functional.cross_entropy(model(ids), labels).backward()
            opt.step()
            opt.zero_grad()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "bag")).iloc[0]
    assert run["n_params"] == 1000 * 64 + 64 * 4 + 4
    assert run["flops_convention_used"] == "counted" and run["flops_per_sample"] == 1536
    assert run["flops_per_token"] == 48  # no seq_len given: the run's tokens per sample, 32
    assert run["tflops_per_gpu"] == pytest.approx(run["tokens_per_s"] * 48 / 1e12)
    assert run["mfu"] == pytest.approx(run["tflops_per_gpu"] / 0.05)


def test_decoder_only_transformers_are_recognised_from_their_config_or_module_tree():
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    small = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32,
             "vocab_size": 50}
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    bert = BertForSequenceClassification(BertConfig(**small))
    encoder_layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    causal_stack = nn.Sequential(nn.Embedding(50, 16), nn.TransformerEncoder(encoder_layer, 1), nn.Linear(16, 50))
    seq2seq = nn.Sequential(nn.Embedding(50, 16), nn.Transformer(16, 2, 1, 1, 32, batch_first=True), nn.Linear(16, 50))
    assert decoder_only_transformer(gpt2) and decoder_only_transformer(GPT(model_config("tiny", 16)))
    assert decoder_only_transformer(causal_stack)  # self-attention blocks between a token embedding and an LM head
    assert not decoder_only_transformer(bert)  # an encoder (model_type bert) with a classifier
    assert not decoder_only_transformer(seq2seq)  # cross-attention: an encoder-decoder
    assert not decoder_only_transformer(BagOfWords()) and not decoder_only_transformer(cnn())
    assert not decoder_only_transformer(TinyTransformer())  # attention by a function call: counted, still right
    assert needs_counting(bert, {}) and not needs_counting(bert, {"flops_convention": "6n"})
    assert not needs_counting(gpt2, {})


def test_a_transformer_keeps_its_formula_and_nothing_is_counted(tmp_path):
    config = model_config("tiny", 16)
    torch.manual_seed(0)
    net = GPT(config)
    prof = trainperf.StepProfiler(tmp_path / "gpt", config={"precision": "fp32", "n_layers": config.n_layers,
                                                              "d_model": config.d_model, "seq_len": 16})
    model = prof.watch(net)
    for _ in range(3):
        ids = torch.randint(0, config.vocab_size, (2, 16))
        with prof.step(tokens=ids.numel(), samples=2):
            nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "gpt")).iloc[0]
    assert run["flops_convention_used"] == "palm" and pd.isna(run.get("flops_per_sample"))


def test_a_model_without_matmuls_is_counted_once_and_gets_no_mfu(tmp_path, monkeypatch):
    """An element-wise model: the counter sees no FLOPs; one counted step, a warning, no figure."""
    counters = []
    monkeypatch.setattr(step_profiler, "StepFlopCounter", lambda: counters.append(1) or StepFlopCounter())
    scale = nn.Parameter(torch.ones(4))
    prof = trainperf.StepProfiler(tmp_path / "scale", config={"precision": "fp32", "peak_tflops_per_gpu": 0.05})
    prof.watch(nn.ParameterList([scale]))
    with pytest.warns(step_profiler.ProfilerWarning, match="no operation the FLOP counter counts"):
        for _ in range(3):
            with prof.step(samples=4):
                (torch.randn(4, 4) * scale).sum().backward()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "scale")).iloc[0]
    assert len(counters) == 1 and run["flops_convention_used"] == "counted" and pd.isna(run["mfu"])


def test_a_counter_that_fails_warns_and_the_step_goes_on(tmp_path, monkeypatch):
    """The FLOP counter's own failure (here: entering it) never reaches the training step: a warning, no MFU."""
    from torch.utils import flop_counter

    def broken(self: object) -> None:
        raise RuntimeError("no dispatch mode here")

    monkeypatch.setattr(flop_counter.FlopCounterMode, "__enter__", broken)
    prof = trainperf.StepProfiler(tmp_path / "broken", config={"precision": "fp32", "peak_tflops_per_gpu": 0.05})
    model = prof.watch(cnn())
    with pytest.warns(step_profiler.ProfilerWarning, match="the FLOP counter failed: RuntimeError: no dispatch"):
        for _ in range(3):
            with prof.step(samples=8):
                model(torch.randn(8, 1, 8, 8)).sum().backward()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "broken")).iloc[0]
    assert run["steps"] >= 1 and run["flops_convention_used"] == "counted" and pd.isna(run["mfu"])


@pytest.mark.parametrize("tied", [False, True])
def test_a_transformer_with_learned_positions_and_an_untied_head_gets_palm_flops_that_match_the_counter(tmp_path, tied):
    """GPT-2 shaped (2 layers, d 64, 4 heads, T 256, vocabulary 8,192; untied: GPT-NeoX, Llama): its 6·N counts what
    a matmul multiplies, so PaLM's formula lands on PyTorch's FLOP counter (4,128,768 FLOPs a token, fwd + bwd);
    with every parameter as N (the position table and an untied token embedding too) it was 7,383,552: 1.79 ×."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=8192, n_positions=256,
                                     tie_word_embeddings=tied)
    torch.manual_seed(0)
    net = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 8192, (2, 256))
    with StepFlopCounter() as counter:
        net(ids, labels=ids).loss.backward()
    prof = trainperf.StepProfiler(tmp_path / "gpt", config={"n_layers": 2, "d_model": 64, "seq_len": 256})
    model = prof.watch(net)
    for _ in range(3):
        with prof.step(tokens=ids.numel(), samples=2):
            model(ids, labels=ids).loss.backward()
    prof.close()
    run = derive(trainperf.load_runs(tmp_path / "gpt")).iloc[0]
    assert run["flops_convention_used"] == "palm" and run["n_params"] < sum(p.numel() for p in net.parameters())
    assert run["flops_per_token"] == pytest.approx(counter.total / ids.numel(), rel=0.005)
