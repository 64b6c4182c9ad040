"""Lines that lack a field: every reader reads the fields a line has and needs only those its figures need;
a line that cannot be read is counted and skipped, never the whole log; a log is refused only when no line
measures anything, and the refusal names the first lines and what each lacked. Each reader is checked on the
figures of a real public log (its source cited) and on a variant of it that lacks a field."""

from pathlib import Path

import pandas as pd
import pytest

from trainperf import DataError
from trainperf.importers import import_path

DATA = Path(__file__).resolve().parent / "data" / "importers"


def one_run(result) -> dict:
    assert len(result.runs) == 1
    return result.runs.iloc[0].to_dict()


# --- torchtitan --------------------------------------------------------------------------------------------

# pytorch/torchtitan pull request #950 ("Conduct lr check only once"), a run's steps 22 to 29 as quoted by its
# author: each line's timestamp (ms of 11:10), tps, tflops, mfu % and loss; a dataset warning after step 23.
TITAN_950 = [(22, 21_511, 193_831, 18.36, 1.86, 6.2250), (23, 21_589, 212_462, 20.12, 2.03, 6.2236),
             (24, 21_667, 209_645, 19.86, 2.01, 6.1861), (25, 21_751, 197_367, 18.69, 1.89, 6.1657),
             (26, 21_848, 169_197, 16.03, 1.62, 6.1338), (27, 21_929, 203_673, 19.29, 1.95, 6.1061),
             (28, 22_009, 205_287, 19.44, 1.97, 6.0646), (29, 22_092, 196_687, 18.63, 1.88, 6.1441)]


def titan_line(step: int, ms: int, tps: int, tflops: float, mfu: float, loss: float, fields: str = "all") -> str:
    """A torchtitan step line as MetricsProcessor.log prints it; ``fields="no mfu"`` leaves out the mfu (a
    fork that computes none)."""
    head = (f"[rank0]:[titan] 2025-03-12 11:10:{ms // 1000:02d},{ms % 1000:03d} - root - INFO - step: {step:2d}  "
            f"loss: {loss:7.4f}  memory:  1.41GiB(1.79%)  tps: {tps:,}  tflops: {tflops:.2f}")
    return head + ("" if fields == "no mfu" else f"  mfu: {mfu:.2f}%")


def titan_log(tmp_path: Path, fields: str = "all", last: str = "") -> Path:
    lines = [titan_line(*step, fields=fields) for step in TITAN_950]
    lines.insert(2, "[rank0]:[titan] 2025-03-12 11:10:21,603 - root - WARNING - Dataset c4_test is being re-looped")
    log = tmp_path / "titan.log"
    log.write_text("\n".join(lines + ([last] if last else [])) + "\n")
    return log


def test_torchtitan_lines_without_mfu_are_timed_by_their_timestamps(tmp_path):
    """A line without `mfu` was refused ("truncated: no 'mfu:' field") although its timestamp times the step and
    its tps gives the rate: the whole log had no measured run. Read, it gives what the real lines give."""
    real = one_run(import_path(titan_log(tmp_path)))
    # an excerpt from step 22: its first line has no earlier one to time it; steps 23 to 29 took 22.092 - 21.511 s
    assert real["steps"] == 7 and real["elapsed_s"] == pytest.approx(0.581)
    # tps weighted by each line's interval: the tokens a device processed over the window's time
    seconds = [(b[1] - a[1]) / 1000 for a, b in zip(TITAN_950, TITAN_950[1:])]
    tokens = sum(s * step[2] for s, step in zip(seconds, TITAN_950[1:]))
    assert real["reported_tokens_per_s_per_gpu"] == pytest.approx(tokens / 0.581)
    result = import_path(titan_log(tmp_path, fields="no mfu"))
    run = one_run(result)
    assert result.skipped_total == 0 and (run["steps"], run["elapsed_s"]) == (7, pytest.approx(0.581))
    assert run["reported_tokens_per_s_per_gpu"] == pytest.approx(tokens / 0.581)
    # without its final field a line may be cut: its last field (here tflops) is not read
    assert pd.isna(run.get("reported_tflops_per_gpu")) and pd.isna(run.get("reported_mfu"))


def test_a_torchtitan_line_cut_inside_a_field_is_read_from_its_timestamp(tmp_path):
    cut = "[rank0]:[titan] 2025-03-12 11:10:22,174 - root - INFO - step: 30  loss:  6.0883  memory:  1.41"
    result = import_path(titan_log(tmp_path, last=cut))
    run = one_run(result)
    assert result.skipped_total == 0 and run["steps"] == 8 and run["elapsed_s"] == pytest.approx(0.663)
    assert run["peak_memory_gb"] == pytest.approx(1.41)  # from the whole lines: the cut one's memory is not read


def test_a_log_without_a_line_that_measures_is_refused_naming_its_first_lines_and_what_they_lack(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text("".join(f"step: {s}  loss:  6.1000  memory:  1.41GiB(1.79%)  tflops: 18.00  mfu: 1.80%\n"
                           for s in (10, 20, 30, 40)))
    with pytest.raises(DataError) as caught:
        import_path(log)
    message = str(caught.value)
    assert "no run has a measured window (4 problem(s); first: line 1: step line: no timestamp and no 'tps:'" \
           in message and message.count("nothing times the step") == 3


# --- nanoGPT -----------------------------------------------------------------------------------------------

def test_nanogpt_reads_a_line_without_loss_and_joins_one_wrapped_before_its_mfu(tmp_path):
    """karpathy/nanoGPT issue #110's times (8 A100, iterations 1631 to 1634, past the warm-up: all measured),
    printed with an mfu as today's train.py does (the mfu figures are made up); one line wraps before its mfu,
    one has no loss."""
    times = [561.94, 563.15, 562.11, 562.80]
    mfu = [0.301, 0.302, 0.303, 0.304]
    log = tmp_path / "train.log"
    log.write_text("iter 1631: loss 4.0863, time 561.94ms, mfu 30.10%\n"
                   "iter 1632: loss 3.7441, time 563.15ms, mf\n"
                   "u 30.20%\n"
                   "iter 1633: time 562.11ms, mfu 30.30%\n"
                   "iter 1634: loss 3.8716, time 562.80ms, mfu 30.40%\n")
    result = import_path(log)
    run = one_run(result)
    assert result.skipped_total == 0 and run["steps"] == 4 and run["elapsed_s"] == pytest.approx(sum(times) / 1000)
    assert run["reported_mfu"] == pytest.approx(sum(t * m for t, m in zip(times, mfu)) / sum(times))
    assert run["train_loss"] == pytest.approx(3.8716)


# --- NeMo --------------------------------------------------------------------------------------------------

def test_nemo_lines_without_global_step_are_the_next_steps_of_their_rank(tmp_path):
    """The NeMo 2 line of NVIDIA-BioNeMo/bionemo-recipes#740's shape without its global_step: each line is the
    next step, the first the training's first (warm-up)."""
    times = [2.505, 0.512, 0.498, 0.503]
    log = tmp_path / "nemo.log"
    log.write_text("".join(f"Training epoch 0, iteration {s}/249 | lr: 3.922e-06 | global_batch_size: 8 | "
                           f"reduced_train_loss: 1.653 | train_step_timing in s: {t} | consumed_samples: "
                           f"{8 * (s + 1)}\n" for s, t in enumerate(times)))
    result = import_path(log)
    run = one_run(result)
    assert result.skipped_total == 0 and run["steps"] == 3 and run["elapsed_s"] == pytest.approx(sum(times[1:]))
    assert run["samples"] == 3 * 8


def test_a_nemo_step_number_that_is_no_whole_number_is_a_line_skipped(tmp_path):
    """`global_step: inf` raised OverflowError out of the reader: the line is counted and skipped."""
    log = tmp_path / "nemo.log"
    log.write_text("".join(f"global_step: {s} | train_step_timing in s: 0.5\n" for s in ("0", "1", "inf", "3", "4")))
    result = import_path(log)
    assert result.skipped_total == 1 and result.skipped[0][1:] == (3, "step line: global_step inf is not a step number")
    assert one_run(result)["steps"] == 3


# --- DeepSpeed ---------------------------------------------------------------------------------------------

def test_deepspeed_line_with_a_rate_that_is_no_number_is_timed_by_its_timestamp(tmp_path):
    """The ThroughputTimer lines of the real DeepSpeed-Chat log (tests/data/importers), one of them printed with
    a rate of nan: its timestamp still times the steps since the line before."""
    real = (DATA / "deepspeed_chat_opt350m_reward.log").read_text().splitlines()
    timers = [i for i, line in enumerate(real) if "RunningAvgSamplesPerSec=" in line]
    line = real[timers[2]]
    start = line.index("CurrSamplesPerSec=") + len("CurrSamplesPerSec=")
    real[timers[2]] = line[:start] + "nan" + line[line.index(",", start):]
    log = tmp_path / "ds.log"
    log.write_text("\n".join(real) + "\n")
    whole = one_run(import_path(DATA / "deepspeed_chat_opt350m_reward.log"))
    result = import_path(log)
    assert result.skipped_total == import_path(DATA / "deepspeed_chat_opt350m_reward.log").skipped_total
    run = one_run(result)
    assert (run["steps"], run["elapsed_s"]) == (whole["steps"], pytest.approx(whole["elapsed_s"]))
