"""Three public training clients that this project did not write, instrumented as the README's "Profile your own
training loop" says, for ``tests/test_client_zoo.py``. Run alone or under ``torchrun`` (CPU, gloo):

    python tests/zoo_clients.py CLIENT RUN_DIR OUT_JSON

Nothing of the clients' code is kept here: each is imported from the installed package, or its source is read
from the installed package at run time and instrumented by the edits below (our lines only; a missing anchor
stops the run). What each client's own timers and counters said is written to ``OUT_JSON`` (one per rank:
``OUT_JSON`` with ``-rank{R}`` before its suffix).

* ``lightning-lm``: lightning 2.6.6, ``lightning/pytorch/demos/transformer.py``: ``LightningTransformer`` (an
  ``nn.Transformer`` encoder-decoder language model, width 200, 2 + 2 layers) on ``WikiText2`` read from a text
  file made here (``download=False``), trained by ``lightning.Trainer`` with ``LightningCallback`` (the
  package's callback API) and Lightning's own ``ThroughputMonitor`` (its timer); 2 micro-batches a step.
* ``hf-classifier``: transformers 5.23.0, ``transformers/trainer.py``'s ``Trainer`` training
  ``BertForSequenceClassification`` (``transformers/models/bert/modeling_bert.py``) built from a small config, with
  ``HFCallback``; 2 micro-batches a step, evaluation every 3 steps; the ``Trainer``'s own metrics
  (``train_runtime``, ``train_samples_per_second``, ``eval_runtime``).
* ``fabric-loop``: lightning 2.6.6's README (the wheel's ``lightning-2.6.6.dist-info/METADATA``, "Build your own
  custom Trainer using Fabric primitives": ``class MyCustomTrainer``), a plain Fabric training loop, with the
  README's ``StepProfiler`` lines inserted (:data:`FABRIC_EDITS`) and an evaluation on rank 0 after each epoch;
  it trains transformers' ``ResNetForImageClassification`` (``transformers/models/resnet/modeling_resnet.py``, a
  CNN) on random images.
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers|LeafSpec|flops_per_batch)")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WORDS = 150
"""Distinct words of the made-up WikiText2 text (its vocabulary: these and ``<eos>``)."""
BLOCK = 35
"""``WikiText2``'s default ``block_size``: tokens of one sample."""


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def made_up_text(path: Path, lines: int = 120, seed: int = 0) -> Path:
    """A WikiText2-like text file of ``lines`` lines of 12 words drawn from :data:`WORDS` words."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(" ".join(f"w{rng.randrange(WORDS)}" for _ in range(12)) + "\n" for _ in range(lines)))
    return path


# -- lightning-lm -------------------------------------------------------------------------------------------------


def lightning_lm(run_dir: Path, work: Path, *, batch: int = 2, accum: int = 2, steps: int = 5) -> dict[str, Any]:
    """Train the demo language model; return the ``ThroughputMonitor``'s per-step ``train/time`` and
    ``train/samples`` (rank 0 only: the monitor logs there)."""
    import lightning as L
    from lightning.pytorch.callbacks import ThroughputMonitor
    from lightning.pytorch.demos.transformer import LightningTransformer, WikiText2
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    from trainperf.integrations import LightningCallback

    rank, size = world()
    torch.manual_seed(0)
    # the module's prepare_data reads ./data/wikitext-2.txt and downloads only where that file is missing
    os.chdir(work)
    dataset = WikiText2(made_up_text(work / "data" / "wikitext-2.txt").parent, download=False)
    module = LightningTransformer(vocab_size=dataset.vocab_size)
    logs = work / "logs"
    trainer = L.Trainer(accelerator="cpu", devices=size, strategy="ddp" if size > 1 else "auto", max_steps=steps,
                        accumulate_grad_batches=accum, logger=CSVLogger(logs, name="lm", version=0),
                        log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False,
                        callbacks=[LightningCallback(run_dir, {"model": "lightning-demo-transformer"}),
                                   ThroughputMonitor(batch_size_fn=lambda b: b[0].size(0))])
    trainer.fit(module, DataLoader(dataset, batch_size=batch))
    found: dict[str, Any] = {"vocab_size": dataset.vocab_size}
    metrics = logs / "lm" / "version_0" / "metrics.csv"
    if rank == 0 and metrics.exists():
        import pandas as pd

        table = pd.read_csv(metrics).dropna(subset=["train/time"])
        found.update(time=table["train/time"].tolist(), samples=table["train/samples"].tolist())
    return found


# -- hf-classifier ------------------------------------------------------------------------------------------------

BERT = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 100, "num_labels": 3, "max_position_embeddings": 32}
"""The classifier's configuration (``BertConfig`` keyword arguments)."""
SEQ = 16


def hf_classifier(run_dir: Path, work: Path, *, batch: int = 4, accum: int = 2, steps: int = 6,
                  eval_every: int = 3) -> dict[str, Any]:
    """Train the classifier; return the ``Trainer``'s own train metrics and its evaluations' ``eval_runtime``."""
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from trainperf.integrations import HFCallback

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    rows = [{"input_ids": torch.randint(1, BERT["vocab_size"], (SEQ,), generator=generator),
             "labels": torch.randint(0, BERT["num_labels"], (), generator=generator)} for _ in range(96)]
    args = TrainingArguments(output_dir=str(work / "hf"), per_device_train_batch_size=batch,
                             per_device_eval_batch_size=8, gradient_accumulation_steps=accum, max_steps=steps,
                             eval_strategy="steps", eval_steps=eval_every, save_strategy="no", report_to=[],
                             use_cpu=True, logging_steps=1, disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=BertForSequenceClassification(BertConfig(**BERT)), args=args, train_dataset=rows,
                      eval_dataset=rows[:16], callbacks=[HFCallback(run_dir, {"model": "bert-classifier"})])
    metrics = trainer.train().metrics
    evaluations = [entry["eval_runtime"] for entry in trainer.state.log_history if "eval_runtime" in entry]
    return {"train": metrics, "eval_runtime": evaluations}


# -- fabric-loop ----------------------------------------------------------------------------------------------------

FABRIC_EDITS: list[tuple[str, str, list[str]]] = [
    ("after", "model, optimizer = self.fabric.setup(model, optimizer)",
     ["prof = trainperf.StepProfiler(RUN_DIR, config=CONFIG)", "model = prof.watch(model)"]),
    ("replace", "for batch in dataloader:", ["for batch in prof.batches(dataloader):"]),
    ("after", "optimizer.step()", ["step.loss = loss"]),
    ("wrap_rest", "optimizer.zero_grad()", ["with prof.step(samples=input.shape[0]) as step:",
                                            "STAMPS.append(time.perf_counter())"]),
    ("wrap", "output = model(input)", ["with prof.phase(\"forward\"):"]),
    ("wrap", "loss = loss_fn(output, target)", ["with prof.phase(\"loss\"):"]),
    ("wrap", "self.fabric.backward(loss)", ["with prof.phase(\"backward\"):"]),
    ("wrap", "optimizer.step()", ["with prof.phase(\"optimizer\"):"]),
    ("end", "", ["if self.fabric.global_rank == 0:", "    with prof.phase(\"validation\"):",
                 "        EVALUATE(model)", "prof.close()"]),
]
"""The README's instrumentation of the Fabric loop, as (edit, anchor, our lines): ``after`` inserts our lines after
the anchor's line at its indentation; ``replace`` puts our line in its place; ``wrap`` opens our ``with`` line at
the anchor line's indentation and indents the anchor's line under it; ``wrap_rest`` does so for the anchor's line
and every line after it in its block, then adds our other lines after the block; ``end`` adds lines at the end of
the ``for epoch`` loop's body (the evaluation on rank 0 ends each epoch), and ``prof.close()`` after the loop.
``STAMPS`` is the test's own clock at each step's end; ``EVALUATE`` the evaluation, which times itself."""


def fabric_source() -> str:
    """The ``MyCustomTrainer`` code block of lightning's README, as the installed wheel ships it."""
    readme = importlib.metadata.distribution("lightning").read_text("METADATA") or ""
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    found = [b for b in blocks if "class MyCustomTrainer" in b]
    if len(found) != 1:
        raise RuntimeError(f"lightning {importlib.metadata.version('lightning')}'s README: expected one code block "
                           f"with class MyCustomTrainer, found {len(found)}")
    return found[0]


def instrument(source: str, edits: list[tuple[str, str, list[str]]]) -> str:
    """``source`` with ``edits`` (see :data:`FABRIC_EDITS`) applied; a ``RuntimeError`` names an anchor found
    no time or more than once. The lines from a ``wrap`` anchor to the loop body's end move under the ``with``."""
    lines = source.splitlines()
    for kind, anchor, ours in edits:
        if kind == "end":
            loop = next(i for i, line in enumerate(lines) if line.strip().startswith("for epoch"))
            body = _indent(lines[loop]) + "    "
            lines += [(_indent(lines[loop]) if line.startswith("prof.") else body) + line for line in ours]
            continue
        at = [i for i, line in enumerate(lines) if line.strip() == anchor]
        if len(at) != 1:
            raise RuntimeError(f"instrumenting: anchor {anchor!r} found {len(at)} times, expected once")
        i = at[0]
        indent = _indent(lines[i])
        if kind == "after":
            lines[i + 1:i + 1] = [indent + line for line in ours]
        elif kind == "replace":
            lines[i] = indent + ours[0]
        elif kind == "wrap":
            lines[i:i + 1] = [indent + ours[0], "    " + lines[i]]
        elif kind == "wrap_rest":
            end = i + 1
            while end < len(lines) and lines[end].strip() and len(_indent(lines[end])) >= len(indent):
                end += 1
            lines[i:end] = [indent + ours[0]] + ["    " + line for line in lines[i:end]] + [
                indent + line for line in ours[1:]]
    return "\n".join(lines) + "\n"


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


RESNET = {"num_channels": 3, "embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1], "layer_type": "basic",
          "num_labels": 3}
"""The CNN's configuration (``ResNetConfig`` keyword arguments)."""
IMAGE = 32


def resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    return ResNetForImageClassification(ResNetConfig(**RESNET))


def loss_fn(output: Any, target: torch.Tensor) -> torch.Tensor:
    """The loss the README's loop leaves to its user: cross-entropy of the classifier's logits."""
    return torch.nn.functional.cross_entropy(output.logits, target)


def fabric_loop(run_dir: Path, work: Path, *, batch: int = 4, batches: int = 5, epochs: int = 2) -> dict[str, Any]:
    """Train the CNN with the instrumented README loop; return the step-end stamps and the evaluations' times."""
    from torch.utils.data import DataLoader, TensorDataset

    rank, size = world()
    path = work / "fabric_trainer.py"
    path.write_text("import time\nimport trainperf\n" + instrument(fabric_source(), FABRIC_EDITS))
    spec = importlib.util.spec_from_file_location("fabric_trainer", path)
    assert spec is not None and spec.loader is not None
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    stamps: list[float] = []
    evaluations: list[float] = []

    def evaluate(model: torch.nn.Module) -> None:
        """The user's evaluation: 16 images through the model, timed on its own clock."""
        started = time.perf_counter()
        with torch.no_grad():
            model.module.eval()
            model.module(torch.randn(16, 3, IMAGE, IMAGE))
            model.module.train()
        evaluations.append(time.perf_counter() - started)

    client.__dict__.update(RUN_DIR=run_dir, CONFIG={"model": "resnet-tiny", "precision": "fp32"}, loss_fn=loss_fn,
                           STAMPS=stamps, EVALUATE=evaluate)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(rank)
    data = TensorDataset(torch.randn(batch * batches, 3, IMAGE, IMAGE, generator=generator),
                         torch.randint(0, RESNET["num_labels"], (batch * batches,), generator=generator))
    model = resnet()
    trainer = client.MyCustomTrainer(accelerator="cpu", strategy="ddp" if size > 1 else "auto", devices=size)
    trainer.fit(model, torch.optim.SGD(model.parameters(), lr=0.01), DataLoader(data, batch_size=batch), epochs)
    return {"stamps": stamps, "evaluations": evaluations}


CLIENTS = {"lightning-lm": lightning_lm, "hf-classifier": hf_classifier, "fabric-loop": fabric_loop}


def main() -> None:
    client, run_dir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    rank, _ = world()
    work = out.parent / f"work-{client}-rank{rank}"
    work.mkdir(parents=True, exist_ok=True)
    found = CLIENTS[client](run_dir, work)
    out.with_name(f"{out.stem}-rank{rank}{out.suffix}").write_text(json.dumps(found, default=float))
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
