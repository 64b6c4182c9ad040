"""The generic reader: real log lines of stacks without a reader of their own, read through one vocabulary of
field names (``trainperf.importers.vocabulary``) after its front end (``vocabulary.fields_of``).

Every line here is a real one; where it comes from and the hand computation of each expected figure are in
``tests/data/generic_reader/README.md`` and ``tests/data/zoo/generic/README.md``."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import pytest

from trainperf import derive
from trainperf.errors import DataError, DataWarning
from trainperf.importers import FORMATS, import_path
from trainperf.importers.text import LineError
from trainperf.importers.vocabulary import VOCABULARY, fields_of, lookup, normal, value

DATA = Path(__file__).resolve().parent / "data"
ZOO = DATA / "zoo" / "generic"

MODDED = "step:125/3250 val_loss:4.58616 train_time:21.243s step_avg:169.94ms"
"""KellerJordan/modded-nanogpt, records/track_3_optimization/results/20260610_tuned_baseline_3250/263ea3c4-...txt"""
MODDED_2024 = "step:1/6200 train_loss:10.9184 train_time:74701ms step_avg:nanms"
"""KellerJordan/modded-nanogpt, records/track_1_short/2024-10-10_Muon/eb5659d0-...txt (tests/data/zoo/generic)"""
NANOCHAT = ("step 00004/21400 (0.02%) | loss: 8.893647 | lrm: 1.00 | dt: 989.44ms | tok/sec: 529,882 | mfu: 74.13 | "
            "total time: 0.00m")
"""karpathy/nanochat#147 (tests/data/zoo/generic)"""
FAIRSEQ = ("| epoch 030 | loss 3.736 | nll_loss 2.045 | ppl 4.13 | wps 1.18305e+06 | ups 2.8 | wpb 417527 | bsz 14131 | "
           "num_updates 11001 | lr 0.000602995 | gnorm 0.434 | clip 100% | oom 0 | loss_scale 2.000 | wall 4464")
"""facebookresearch/fairseq#506 (tests/data/zoo/generic)"""
FAIRSEQ_PROGRESS = ("| epoch 010  2000 / 8223 loss=1.27 (1.50), wps=962, wpb=908, bsz=32, lr=0.001, clip=100%, "
                    "gnorm=2.1427")
"""facebookresearch/fairseq#301 (tests/data/zoo/generic)"""
MLLOG = ('0: :::MLLOG {"namespace": "", "time_ms": 1714965817401, "event_type": "INTERVAL_START", "key": '
         '"block_start", "value": null, "metadata": {"file": "/workspace/ft-llm/custom_callbacks.py", "lineno": 119, '
         '"samples_count": 1536}}')
"""mlcommons/training_results_v4.0 GigaComputing/results/G593-SD1_pytorch/llama2_70b_lora/result_0.txt, line 28 of
the zoo's copy (tests/data/zoo/generic/mlperf_v40_gigacomputing_llama2_lora.log)."""


@pytest.mark.parametrize(("text", "key", "expected"), [
    ("74701ms", "train time", (74701.0, "ms")),          # modded-nanogpt 2024
    ("21.243s", "train time", (21.243, "s")),            # modded-nanogpt track 3
    ("169.94ms", "step avg", (169.94, "ms")),
    ("529,882", "tok/sec", (529882.0, "")),              # nanochat: thousands separators
    ("989.44ms", "dt", (989.44, "ms")),
    ("0.00m", "total time", (0.0, "m")),
    ("1.18305e+06", "wps", (1183050.0, "")),             # fairseq 0.6: scientific notation
    ("100%", "clip", (100.0, "%")),
    ("00004/21400", "step", (4.0, "")),                   # N of M
    ("2000", "progress", (2000.0, "")),
])
def test_value_reads_numbers_as_logs_print_them(text, key, expected):
    assert value(text, key) == expected


def test_value_takes_the_unit_from_the_key_and_the_current_of_a_pair():
    # NeMo's `train_step_timing in s=3.130` (tests/data/importers/nemo_nemotron4_15b.log), Megatron's `(ms)`
    assert value("3.130", "train step timing in s") == (3.130, "s")
    assert value("13100.0/13240.9", "elapsed time per iteration (ms)") == (13100.0, "ms")
    assert value("38.49GB", "maxmemallocated") == (38.49, "gb")    # DeepSpeed's MaxMemAllocated
    assert value("1.2K", "") == (1200.0, "") and value("3M", "") == (3e6, "") and value("2B", "") == (2e9, "")
    found, unit = value("nanms", "step avg")                         # modded-nanogpt's first step_avg
    assert math.isnan(found) and unit == "ms"
    with pytest.raises(LineError):
        value("n/a", "loss")


def test_fields_of_splits_each_shape_of_real_line():
    assert fields_of(MODDED_2024)[1] == {"step": "1/6200", "train loss": "10.9184", "train time": "74701ms",
                                         "step avg": "nanms"}
    nanochat = fields_of(NANOCHAT)[1]
    assert nanochat["dt"] == "989.44ms" and nanochat["tok/sec"] == "529,882" and nanochat["step"] == "00004/21400"
    fairseq = fields_of(FAIRSEQ)[1]
    assert fairseq["wps"] == "1.18305e+06" and fairseq["num updates"] == "11001" and fairseq["epoch"] == "030"
    progress = fields_of(FAIRSEQ_PROGRESS)[1]
    assert progress["epoch"] == "010" and progress["progress"] == "2000" and progress["wps"] == "962"
    rank, mllog = fields_of(MLLOG)
    assert rank == 0 and mllog["key"] == "block_start" and mllog["metadata samples count"] == "1536"


def test_each_name_means_one_field_and_lookup_finds_it_in_a_longer_key():
    names = [normal(name) for entry in VOCABULARY for name in entry.synonyms]
    assert len(names) == len(set(names))
    assert lookup("train step timing in s").name == "step_time_s"
    assert lookup("train time").name == "cumulative_time_s"
    assert lookup("step avg").name == "average_time_s"
    assert lookup("tok/sec").name == "tokens_per_s"
    assert lookup("num updates").name == "step"
    assert lookup("training epoch").name == "epoch"           # NeMo 2's "Training epoch 0": its leading word dropped
    assert lookup("metadata step").name == "step"             # a JSON object's nesting


def read(path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        result = import_path(path)
    return result, derive(result.runs).iloc[0], [str(w.message) for w in caught]


def test_a_cumulative_clock_times_the_steps_since_the_previous_line():
    result, run, said = read(DATA / "generic_reader" / "modded_nanogpt_track3.log")
    assert result.format == "generic" and len(result.runs) == 1
    # 3125 steps x 524,288 tokens / (503.169 - 21.243) s, see tests/data/generic_reader/README.md
    assert run["tokens_per_s"] == pytest.approx(3_125 * 524_288 / 481.926, rel=0.01)
    note = next(s for s in said if "read generically" in s)
    assert "step from 'step'" in note and "'train time (s)'" in note
    assert run["val_loss"] == 3.27722  # the last validation the log prints (its final line)


def test_mlperf_blocks_are_timed_from_block_start_to_block_stop():
    result, run, said = read(ZOO / "mlperf_v40_asus_llama2_lora.log")
    assert result.format == "generic"
    # blocks after the first: 1536 samples x 8192 tokens in 784.698 s (tests/data/zoo/generic/README.md)
    assert run["tokens_per_s"] == pytest.approx(1536 * 8192 / 784.698, rel=0.01)
    assert any("block_start" in s for s in said)


def test_an_mlperf_log_timed_between_its_train_loss_events_says_so():
    # its block_start lines print steps as samples_count, so it is timed between its train_loss events
    # (tests/data/zoo/generic/README.md: 38 plain 80-sample intervals, 5,229.1 tokens/s, the zoo's 3 % band)
    result, run, said = read(ZOO / "mlperf_v40_juniper_deepspeed_llama2_lora.log")
    assert run["tokens_per_s"] == pytest.approx(5229.1, rel=0.03)
    note = next(s for s in said if "read generically" in s)
    assert "step from 'train_loss'" in note and "'time_ms of consecutive train_loss events'" in note
    assert "block_stop" not in note


def test_an_interval_time_that_is_a_running_total_times_each_line_by_its_increase(tmp_path):
    """fairseq before 0.9 prints ``train_wall`` as the training clock since the start: each line's time is its
    increase over the line before (facebookresearch/fairseq#940: 1094 − 756 s for 4 × 50 updates, 62,040 tokens/s,
    tests/data/zoo/generic/README.md). A series that grows but is no running total stays the intervals' own times:
    the same lines with each interval a second slower than the one before (84, 85, 86, 87 s). Two lines are one
    increase, enough to tell."""
    result, run, _ = read(ZOO / "fairseq_2019_issue940_train_wall.log")
    assert run["elapsed_s"] == 338 and run["tokens_per_s"] == pytest.approx(20_969_400 / 338)
    assert "'train wall' a running total" in run["extra_time_source"]
    text = (ZOO / "fairseq_2019_issue940_train_wall.log").read_text(encoding="utf-8")
    for total, own in (("756", "83"), ("840", "84"), ("925", "85"), ("1010", "86"), ("1094", "87")):
        text = text.replace(f"train_wall={total}", f"train_wall={own}")
    slower = tmp_path / "fairseq_intervals.log"
    slower.write_text(text, encoding="utf-8")
    _, run, _ = read(slower)
    assert run["elapsed_s"] == 84 + 85 + 86 + 87 and "running total" not in run["extra_time_source"]
    lines = (ZOO / "fairseq_2019_issue940_train_wall.log").read_text(encoding="utf-8").splitlines(keepends=True)
    slower.write_text("".join(lines[:2]), encoding="utf-8")  # one increase: 840 − 756 s for 50 × 104,872 tokens
    _, run, _ = read(slower)
    assert run["elapsed_s"] == 84 and run["tokens_per_s"] == pytest.approx(50 * 104_872 / 84)


def test_a_counter_that_restarts_each_epoch_is_one_run():
    result, run, _ = read(ZOO / "fairseq_2018_issue301_progress.log")
    assert result.format == "generic" and len(result.runs) == 1
    assert run["tokens_per_s"] == pytest.approx(962, rel=0.01)   # the printed wps, all 961-963


def test_a_stack_with_a_reader_of_its_own_is_not_read_generically():
    assert FORMATS[-1].name == "generic"
    assert import_path(DATA / "importers" / "maxtext_mixtral_8x7b_v6e.log").format == "maxtext"
    assert import_path(DATA / "importers" / "nemo_nemotron4_15b.log").format == "nemo"


def test_text_without_a_step_and_a_time_or_rate_is_refused_with_the_formats_and_a_pattern(tmp_path):
    log = tmp_path / "notes.log"
    log.write_text("epoch 3 finished\nloss 2.5\n")
    with pytest.raises(DataError, match=r"generic \(.*pattern"):
        import_path(log)


def test_hostile_text_costs_bounded_time():
    """Not a log sample: text made to make a field splitter backtrack (a long run of words with no value,
    JSON nested deeper than Python's stack). Each costs linear time and gives no fields."""
    assert fields_of("word " * 200_000) == (None, {})
    assert fields_of("step " + "word " * 12_000)[1] == {}
    assert fields_of('DLLL {"data": ' + "[" * 5000 + "]" * 5000 + "}") == (None, {})


def test_a_log_numbering_its_steps_from_1_sets_its_first_step_aside_as_one_numbering_them_from_0(tmp_path):
    # modded-nanogpt's Muon record (the zoo's) prints step:0 to step:6200, step 1 at train_time 74,701 ms (the
    # compilation); its steps renumbered from 1 are the same run, not an excerpt whose warm-up happened before it
    # (read so, step 1's 74.4 s stayed in: 6,199 steps in 1,416.2 s, 5.6 % longer)
    original = ZOO / "modded_nanogpt_2024_muon.log"
    shifted = tmp_path / original.name
    shifted.write_text(re.sub(r"step:(\d+)/", lambda m: f"step:{int(m[1]) + 1}/", original.read_text()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        runs = [import_path(path).runs.iloc[0] for path in (original, shifted)]
    # the original's throughput is the zoo's hand-computed figure (tests/data/zoo/generic/expected.csv)
    assert (runs[1]["steps"], runs[1]["elapsed_s"]) == (runs[0]["steps"], pytest.approx(runs[0]["elapsed_s"]))


def test_a_start_up_or_evaluation_time_is_no_step_time():
    # wordplay (the zoo's): "  0%| | 0/100 [00:00<?, ?it/s][...] - Startup time: 18.3313", glued behind the bar's 0/100,
    # was a record of step 0 lasting 18.3 s; DLLogger nests its step time under "data" (the zoo's NeMo recipe log)
    assert lookup(normal("Startup time")) is None and lookup(normal("eval_time")) is None
    assert lookup(normal("data.train_step_timing in s")).name == "step_time_s"
    with warnings.catch_warnings(action="ignore", category=DataWarning):
        steps = import_path(ZOO / "wordplay_2024_ezpz_ddp8_dt_in_ms.log").steps
    assert steps["step"].tolist() == list(range(5, 101, 5))
