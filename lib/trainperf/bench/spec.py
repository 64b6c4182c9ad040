"""One bench run: everything a worker needs to train and to describe its run, and the line by which it reports each
optimizer step."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

STEP_MARK: str = "trainperf-bench step "
"""Prefix of the line the main worker prints after each optimizer step."""
STRATEGIES: tuple[str, ...] = ("single", "ddp", "fsdp")


@dataclass(frozen=True)
class RunSpec:
    """A bench run's configuration. Batch sizes in samples of ``seq_len`` tokens (``micro_batch_size`` per process
    per forward pass); ``steps`` measured after ``warmup_steps``; ``device`` ``cpu`` or ``cuda``;
    ``peak_tflops_per_gpu``: one process's share of the CPU's dense peak (TFLOP/s), None where the datasheet's
    applies; ``baseline_run_id`` None: the fewest processes; ``extra``: ``extra_*`` columns for the manifest."""

    experiment: str
    run_id: str
    out_dir: str
    model: str
    seq_len: int
    device: str
    strategy: str
    nprocs: int
    micro_batch_size: int
    grad_accum_steps: int
    steps: int
    warmup_steps: int
    precision: str
    threads_per_process: int
    peak_tflops_per_gpu: float | None = None
    baseline_run_id: str | None = None
    learning_rate: float = 1e-3
    seed: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("seq_len", "nprocs", "micro_batch_size", "grad_accum_steps", "steps", "threads_per_process"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must not be negative, got {self.warmup_steps}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        if self.strategy == "single" and self.nprocs != 1:
            raise ValueError(f"strategy 'single' runs one process, got {self.nprocs}")

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step, all processes together."""
        return self.micro_batch_size * self.grad_accum_steps * self.nprocs

    @property
    def run_dir(self) -> Path:
        """The profiler's run folder: ``<out_dir>/<experiment>/<run_id>``."""
        return Path(self.out_dir) / self.experiment / self.run_id

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls(**json.loads(text))
