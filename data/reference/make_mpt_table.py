"""Convert the published MosaicML llm-foundry MPT benchmarks into a trainperf runs table.

Input: ``llmfoundry_mpt_benchmarks.csv`` (216 rows transcribed from llm-foundry's
``scripts/train/benchmarking/README.md``, tables dated 2024-01; columns described
in the README next to it). Output: ``llmfoundry_mpt.csv`` in this folder.

Usage (from the repository root; both arguments optional)::

    .venv/bin/python data/reference/make_mpt_table.py [INPUT.csv] [OUTPUT.csv]

INPUT defaults to ``../shared/reference/llmfoundry_mpt_benchmarks.csv`` beside
the repository. The script is deterministic: rerunning it rewrites the same file.

Before writing, it checks that every published MFU (and HFU) reproduces from the
row's own inputs as ``trainperf.derive`` computes them: ``(6·n_params +
12·n_layers·d_model·seq_len) · tokens_per_s / (gpus · peak)`` (the PaLM
convention of ``trainperf.flops``), peak the dense one of ``trainperf.hardware``
(BF16 989.5 TFLOP/s on H100 SXM, 312 on A100, FP8 1979 on H100), HFU ``× 4/3``
with activation checkpointing, within 0.01 percentage point. It exits non-zero when a check fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from trainperf.derived import derive
from trainperf.hardware import normalize_precision

HERE = Path(__file__).resolve().parent
DEFAULT_INPUT = HERE.parents[2] / "shared" / "reference" / "llmfoundry_mpt_benchmarks.csv"
DEFAULT_OUTPUT = HERE / "llmfoundry_mpt.csv"
GPUS_PER_NODE = 8
"""Every published configuration uses 8-GPU nodes (multiples of 8 GPUs)."""
TOLERANCE_PP = 0.01
"""Largest accepted |recomputed − published| MFU or HFU, in percentage points."""

TABLE_TAGS = {
    "H100 80GB BF16 (Large Scale, >= 128 GPUs)": "h100-bf16-large",
    "H100 80GB BF16": "h100-bf16",
    "H100 80GB FP8": "h100-fp8",
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": "a100-80gb",
    "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": "a100-40gb",
}
"""Short, readable tag of each published table, used in run and experiment ids."""

CONFIG = ["platform", "model", "n_params", "n_layers", "d_model", "seq_len", "precision", "gpus",
          "micro_batch_size", "grad_accum_steps", "global_batch_size", "activation_checkpointing"]
"""Input columns copied as they are (precision normalised)."""


def convert(published: pd.DataFrame) -> pd.DataFrame:
    """The runs table of ``published`` (the input CSV's columns)."""
    unknown = sorted(set(published["table"]) - set(TABLE_TAGS))
    if unknown:
        raise SystemExit(f"unknown table(s) {unknown}: add a tag to TABLE_TAGS")
    runs = published[CONFIG].copy()
    runs["precision"] = published["precision"].map(normalize_precision)
    model = published["model"].str.lower().str.removeprefix("mpt-")
    runs.insert(0, "experiment", "mpt-" + published["table"].map(TABLE_TAGS) + "-" + model
                + "-seq" + published["seq_len"].astype(str) + "-mb" + published["micro_batch_size"].astype(str))
    runs.insert(0, "run_id", runs["experiment"] + "-g" + published["gpus"].astype(str))
    runs["strategy"] = "fsdp"
    runs["nodes"] = published["gpus"] // GPUS_PER_NODE
    runs["flops_convention"] = "palm"
    runs["tokens_per_s"] = published["tokens_per_s"]
    runs["reported_samples_per_s"] = published["samples_per_s_rounded"]
    runs["reported_tokens_per_s_per_gpu"] = published["tokens_per_s_per_gpu"]
    runs["reported_mfu"] = (published["published_mfu_pct"] / 100).round(6)
    runs["reported_hfu"] = (published["published_hfu_pct"] / 100).round(6)
    runs["reported_tflops_per_gpu"] = published["published_model_tflops_per_gpu"]
    runs["extra_sharding_strategy"] = published["sharding_strategy"]
    runs["source"] = ("MosaicML llm-foundry scripts/train/benchmarking/README.md (2024-01), table '"
                      + published["table"] + "'; transcribed in reference/llmfoundry_mpt_benchmarks.csv")
    return runs


def check(runs: pd.DataFrame) -> list[str]:
    """Problems in ``runs``: duplicate ids, an experiment with two rows at one
    GPU count, nodes not whole, a published MFU or HFU that does not reproduce."""
    problems = []
    if runs["run_id"].duplicated().any():
        problems.append(f"duplicate run_id: {sorted(runs.loc[runs['run_id'].duplicated(), 'run_id'])}")
    twice = runs[runs.duplicated(["experiment", "gpus"], keep=False)]
    if len(twice):
        problems.append(f"experiments with two rows at one GPU count: {sorted(set(twice['experiment']))}")
    if (runs["nodes"] * GPUS_PER_NODE != runs["gpus"]).any():
        problems.append("a GPU count that is not a multiple of 8")
    for row in derive(runs).to_dict("records"):
        if pd.isna(row["mfu"]):
            problems.append(f"{row['run_id']}: no dense peak for {row['platform']} {row['precision']}")
            continue
        for name in ("mfu", "hfu"):
            value = row[name]
            error_pp = abs(value - row[f"reported_{name}"]) * 100
            if error_pp > TOLERANCE_PP:
                problems.append(f"{row['run_id']}: {name} {value:.4%} vs published "
                                f"{row[f'reported_{name}']:.2%} ({error_pp:.3f} pp)")
    return problems


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else DEFAULT_INPUT
    target = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    runs = convert(pd.read_csv(source))
    problems = check(runs)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    runs.to_csv(target, index=False)
    print(f"{len(runs)} runs in {runs['experiment'].nunique()} experiments written to {target}; "
          f"every published MFU and HFU reproduces within {TOLERANCE_PP} percentage point")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
