"""One process of a bench run: ``python -m trainperf.bench.worker '<RunSpec JSON>'`` under torchrun.

Trains the bench model on the bench corpus for the spec's warm-up and
measured steps, every step instrumented with the ``StepProfiler``, which
writes the run folder.
"""

from __future__ import annotations

import os
import platform as host
import sys

import torch
import torch.nn.functional as F

from trainperf import StepProfiler
from trainperf.bench import distributed
from trainperf.bench.corpus import VOCAB_SIZE, RandomWindows, corpus_bytes, corpus_name, train_val_split
from trainperf.bench.launch import STEP_MARK
from trainperf.bench.model import GPT, ModelConfig, model_config
from trainperf.bench.spec import RunSpec


def run_columns(spec: RunSpec, config: ModelConfig, worker: distributed.Worker) -> dict[str, object]:
    """The run's configuration as canonical run columns (and ``extra_*``) for the profiler's manifest.

    ``extra_load_average_1min`` is the host's load average when the run
    starts: above the core count, other work competed for the CPU.
    """
    platform = torch.cuda.get_device_name(worker.device) if worker.device.type == "cuda" else "cpu"
    columns: dict[str, object] = {
        "run_id": spec.run_id, "experiment": spec.experiment, "platform": platform,
        "model": f"trainperf-gpt-{spec.model}", "n_params": config.n_params, "n_layers": config.n_layers,
        "d_model": config.d_model, "n_heads": config.n_heads, "vocab_size": config.vocab_size,
        "seq_len": config.seq_len, "precision": spec.precision, "strategy": spec.strategy,
        "micro_batch_size": spec.micro_batch_size, "grad_accum_steps": spec.grad_accum_steps,
        "global_batch_size": spec.global_batch_size, "activation_checkpointing": False,
        "source": f"trainperf bench on {host.node()} (torch {torch.__version__})",
        "extra_corpus": corpus_name(), "extra_threads_per_process": spec.threads_per_process,
        "extra_load_average_1min": os.getloadavg()[0], **spec.extra,
    }
    if spec.peak_tflops_per_gpu is not None:
        columns["peak_tflops_per_gpu"] = spec.peak_tflops_per_gpu
    if spec.baseline_run_id is not None:
        columns["baseline_run_id"] = spec.baseline_run_id
    return columns


def train(spec: RunSpec) -> None:
    """Train for ``spec.warmup_steps + spec.steps`` optimizer steps under the profiler."""
    worker = distributed.start(spec.strategy, spec.device)
    torch.manual_seed(spec.seed)  # same initial weights on every rank
    config = model_config(spec.model, spec.seq_len, VOCAB_SIZE)
    model = distributed.wrap(GPT(config), spec.strategy, worker)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)
    train_tokens, _ = train_val_split(corpus_bytes())
    loader = RandomWindows(train_tokens, spec.micro_batch_size, config.seq_len, seed=spec.seed + worker.rank + 1)
    autocast = torch.autocast(worker.device.type, dtype=torch.bfloat16, enabled=spec.precision == "bf16")
    profiler = StepProfiler(spec.run_dir, config=run_columns(spec, config, worker),
                            warmup_steps=spec.warmup_steps, warmup="mser", trace=False, device=worker.device)
    model = profiler.watch(model)
    batches = iter(profiler.batches(loader))
    total_steps = spec.warmup_steps + spec.steps
    try:
        for step_index in range(total_steps):
            with profiler.step() as step:
                step_loss = torch.zeros((), device=worker.device)
                for micro in range(spec.grad_accum_steps):
                    inputs, targets = next(batches)
                    with profiler.phase("h2d"):
                        inputs = inputs.to(worker.device, non_blocking=True)
                        targets = targets.to(worker.device, non_blocking=True)
                    with distributed.gradient_sync(model, sync=micro == spec.grad_accum_steps - 1):
                        with autocast, profiler.phase("forward"):
                            logits = model(inputs)
                        with autocast, profiler.phase("loss"):
                            loss = F.cross_entropy(logits.view(-1, config.vocab_size), targets.reshape(-1))
                        with profiler.phase("backward"):
                            (loss / spec.grad_accum_steps).backward()
                    step_loss += loss.detach() / spec.grad_accum_steps
                    step.micro_step(tokens=inputs.numel(), samples=len(inputs))
                with profiler.phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                step.loss = step_loss
            if worker.is_main:
                print(f"{STEP_MARK}{step_index + 1}/{total_steps}", flush=True)
    finally:  # also after an out-of-memory error, which the profiler has written: the run folder ends cleanly
        profiler.close()
    del model, optimizer, profiler
    distributed.finish()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trainperf.bench.worker '<RunSpec JSON>' (started by torchrun)", file=sys.stderr)
        return 2
    train(RunSpec.from_json(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
