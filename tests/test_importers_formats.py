"""Formats added for the logs users have: llm.c, Hugging Face Trainer, DeepSpeed, MaxText, NeMo, Composer,
Lightning's CSVLogger. Each is read from a real public log (tests/data/importers/README.md gives its source and
what is known about its run) and the figures that tool printed are reproduced; synthetic variants cover the rest."""

from pathlib import Path

import pytest

from trainperf import derive
from trainperf.importers import compare_reported, import_path

DATA = Path(__file__).resolve().parent / "data" / "importers"


def one_run(path: Path, overrides: dict | None = None) -> dict:
    result = import_path(path, overrides)
    assert len(result.runs) == 1
    return derive(result.runs).iloc[0].to_dict()


def compared(path: Path, overrides: dict | None = None) -> dict:
    table = compare_reported(derive(import_path(path, overrides).runs))
    return {row.metric: row for row in table.itertuples(index=False)}


# --- llm.c -------------------------------------------------------------------------------------------------

def test_llmc_real_log_gives_the_throughput_and_mfu_it_printed():
    path = DATA / "llmc_gpt2_1558m.log"
    run = one_run(path)
    assert import_path(path).format == "llmc"
    assert (run["n_params"], run["micro_batch_size"], run["seq_len"], run["gpus"], run["grad_accum_steps"]) == \
        (1_557_686_400, 16, 1024, 8, 8)
    # step 1 is warm-up; steps 2..10 each process 1,048,576 tokens
    times = [2747.19, 2753.25, 2741.47, 2752.07, 2751.01, 2753.03, 2748.91, 2748.73, 2749.40]
    assert run["steps"] == 9 and run["elapsed_s"] == pytest.approx(sum(times) / 1000)
    assert run["tokens_per_s"] == pytest.approx(9 * 1_048_576 / (sum(times) / 1000))
    # the log printed "47.3% bf16 MFU" (llm.c's H100 peak is 988.8, trainperf's dense 989.5) and ~381.4k tok/s
    assert run["mfu"] == pytest.approx(0.473, abs=0.001)
    figures = compared(path)
    assert figures["mfu"].convention == "llmc" and not figures["mfu"].flagged
    assert not figures["tokens_per_s"].flagged


def test_llmc_older_lines_and_unknown_mfu(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("batch_size B=4 * seq_len T=64 * num_processes=1 and total_batch_size=256\n"
                   "| device                | NVIDIA A100-SXM4-80GB                              |\n"
                   "| peak TFlops           | 312.0                                              |\n"
                   + "".join(f"step {i}/5: train loss 4.{i} (acc 4.{i}) ({100 + i}.00 ms, 2500 tok/s)\n"
                             for i in range(1, 6))
                   + "step    6/9 | loss 3.9 (+nanz)| norm 1.0 (+nanz)| lr 1e-4 | 99.00 ms | -100.0% bf16 MFU | 2600 tok/s\n")
    run = one_run(log)
    assert run["platform"] == "NVIDIA A100-SXM4-80GB" and run["reported_peak_tflops_per_gpu"] == 312.0
    assert run["steps"] == 5 and run["elapsed_s"] == pytest.approx((102 + 103 + 104 + 105 + 99) / 1000)
    assert run["tokens_per_s"] == pytest.approx(5 * 256 / run["elapsed_s"])
    assert "reported_mfu" not in run or run["reported_mfu"] != run["reported_mfu"]  # -100 % means unknown
