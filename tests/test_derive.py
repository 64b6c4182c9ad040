"""derive(): gaps stay empty with a reason, never a silent default."""

import math
import warnings
from pathlib import Path

import pandas as pd
import pytest

from trainperf import DataError, DataWarning, derive, load_runs
from trainperf.schema import DERIVED_COLUMNS
from trainperf.table_rules import check_runs


def runs(*rows: dict) -> pd.DataFrame:
    return check_runs(pd.DataFrame(rows).assign(experiment="e"))


def test_unknown_platform_leaves_mfu_empty_with_a_warning_and_a_note():
    table = runs({"run_id": "a", "gpus": 8, "tokens_per_s": 1e5, "n_params": 1e9,
                  "platform": "Acme Z9000", "precision": "bf16"})
    with pytest.warns(DataWarning, match="'Acme Z9000' is not in the peak table"):
        d = derive(table)
    assert d["tflops_total"].iloc[0] == pytest.approx(1e5 * 6e9 / 1e12)
    assert math.isnan(d["mfu"].iloc[0])
    notes = d["notes"].iloc[0].split("; ")
    assert "peak_tflops_per_gpu: platform 'Acme Z9000' at bf16 is not in the peak table" in notes
    assert "peak_source, mfu: no peak_tflops_per_gpu" in notes


def test_cpu_runs_use_their_measured_peak_and_say_so_without_it():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a cpu run: a note says what is missing
        d = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 100.0, "n_params": 1e6, "platform": "cpu",
                         "precision": "fp32"},
                        {"run_id": "b", "gpus": 2, "tokens_per_s": 150.0, "n_params": 1e6, "platform": "cpu",
                         "precision": "fp32", "peak_tflops_per_gpu": 0.1}))
    assert "measured peak_tflops_per_gpu" in d["notes"].iloc[0]
    # 150 tokens/s * 6e6 FLOPs / 2 devices = 4.5e8 FLOP/s per device = 0.00045 TFLOP/s of 0.1
    assert d["mfu"].iloc[1] == pytest.approx(0.0045)


def test_hfu_counts_recomputation_only_when_checkpointing_is_known():
    base = {"gpus": 8, "tokens_per_s": 1e5, "n_params": 7e9, "platform": "H100", "precision": "bf16"}
    d = derive(runs({**base, "run_id": "on", "activation_checkpointing": True},
                    {**base, "run_id": "off", "activation_checkpointing": False},
                    {**base, "run_id": "unknown"}))
    mfu = 1e5 * 42e9 / 8 / 1e12 / 989.5
    assert d["mfu"].tolist() == pytest.approx([mfu] * 3)
    assert d["hfu"].iloc[0] == pytest.approx(mfu * 4 / 3)
    assert d["hfu"].iloc[1] == pytest.approx(mfu)
    assert math.isnan(d["hfu"].iloc[2]) and "hfu: no activation_checkpointing" in d["notes"].iloc[2].split("; ")


def test_work_is_inferred_from_steps_and_batch_and_a_contradicting_rate_is_noted():
    d = derive(runs({"run_id": "a", "gpus": 4, "steps": 100, "global_batch_size": 32, "seq_len": 1024,
                     "elapsed_s": 50.0, "tokens_per_s": 80_000.0}))
    # 100 steps * 32 samples * 1024 tokens / 50 s = 65,536 tokens/s; the given 80,000 is 22 % off
    assert d["tokens"].iloc[0] == 3_276_800
    assert d["tokens_per_s"].iloc[0] == pytest.approx(65_536)
    assert d["samples_per_s"].iloc[0] == pytest.approx(64)
    assert d["step_time_s"].iloc[0] == pytest.approx(0.5)
    assert ("tokens_per_s: the given rate gives 80,000, 22.1 % off the 65,536 from tokens / elapsed_s, which is kept"
            in d["notes"].iloc[0])


def test_phases_give_compute_and_communication_overhead():
    d = derive(runs({"run_id": "a", "gpus": 2, "tokens": 1e6, "elapsed_s": 10.0, "forward_s": 3.0,
                     "loss_s": 0.5, "backward_s": 5.0, "optimizer_s": 0.5, "comm_s": 2.0, "comm_exposed_s": 0.5}))
    assert d["compute_s"].iloc[0] == 9.0
    assert d["comm_overhead"].iloc[0] == pytest.approx(0.05)  # exposed 0.5 s of 10 s
    assert d["compute_comm_ratio"].iloc[0] == pytest.approx(4.5)


def test_runs_alike_on_the_fewest_devices_are_the_baseline_together_and_a_named_one_is_used_alone():
    # a and b differ in nothing recorded: repeats, whose mean 110 tokens/s is the baseline
    tied = derive(runs({"run_id": "a", "gpus": 4, "tokens_per_s": 100.0},
                       {"run_id": "b", "gpus": 4, "tokens_per_s": 120.0},
                       {"run_id": "c", "gpus": 8, "tokens_per_s": 180.0}))
    assert tied["scaling_multiplier"].tolist() == pytest.approx([100 / 110, 120 / 110, 180 / 110])
    assert tied["scaling_efficiency"].iloc[2] == pytest.approx(180 / 110 / 2)
    assert tied["baseline_run_id"].tolist() == ["a"] * 3 and not tied["notes"].str.contains("scaling:").any()
    named = derive(runs({"run_id": "a", "gpus": 4, "tokens_per_s": 100.0, "baseline_run_id": "b"},
                        {"run_id": "b", "gpus": 4, "tokens_per_s": 120.0, "baseline_run_id": "b"},
                        {"run_id": "c", "gpus": 8, "tokens_per_s": 180.0, "baseline_run_id": "b"}))
    assert named["scaling_multiplier"].tolist() == pytest.approx([100 / 120, 1.0, 1.5])
    assert named["scaling_efficiency"].iloc[2] == pytest.approx(0.75)


def test_a_micro_batch_sweep_at_two_device_counts_holds_two_weak_studies_and_a_strong_one():
    # two micro-batch sizes, each at 1 and 2 processes: mb 8 scales 4,096 -> 7,447 tokens/s, mb 16
    # 4,551 -> 8,402. Per device 8 at 1 and 2 processes and 16 at 1 and 2 are weak studies; 1 x 16 and
    # 2 x 8 (global batch 16) a strong one, each run's row the strong study where it is in one
    sweep = derive(runs(*({"run_id": f"mb{b}-p{g}", "gpus": g, "micro_batch_size": b, "tokens_per_s": rate}
                          for (b, g), rate in {(8, 1): 4096.0, (8, 2): 7447.0, (16, 1): 4551.0,
                                               (16, 2): 8402.0}.items())))
    assert sweep["scaling_study"].tolist() == ["e (8 per device)", "e (global batch 16)", "e (global batch 16)",
                                               "e (16 per device)"]
    assert sweep["second_scaling_study"].fillna("").tolist() == ["", "e (8 per device)", "e (16 per device)", ""]
    assert sweep["scaling_type"].tolist() == ["weak", "strong", "strong", "weak"]
    assert sweep["baseline_run_id"].tolist() == ["mb8-p1", "mb16-p1", "mb16-p1", "mb16-p1"]
    assert sweep["scaling_multiplier"].tolist() == pytest.approx([1.0, 7447 / 4551, 1.0, 8402 / 4551])
    assert sweep["notes"].str.contains("scaling_study: grad_accum_steps unknown, taken as 1", regex=False).all()
    # a strong-scaling experiment (micro-batch halved as devices double) stays one series
    strong = derive(runs({"run_id": "p1", "gpus": 1, "micro_batch_size": 16, "tokens_per_s": 100.0},
                         {"run_id": "p2", "gpus": 2, "micro_batch_size": 8, "tokens_per_s": 190.0}))
    assert strong["scaling_study"].tolist() == ["e", "e"] and strong["scaling_multiplier"].iloc[1] == pytest.approx(1.9)
    # so does one whose precision changes with the device count; two precisions on one count split it
    split = derive(runs(*({"run_id": f"{p}-{g}", "gpus": g, "precision": p, "tokens_per_s": 100.0 * g}
                          for p in ("bf16", "fp32") for g in (1, 2))))
    assert split["scaling_study"].tolist() == ["e (precision bf16)"] * 2 + ["e (precision fp32)"] * 2


def test_megatron_deepspeed_convention_on_request():
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 1.0, "n_layers": 2, "d_model": 64,
                     "seq_len": 128, "vocab_size": 256, "flops_convention": "megatron-deepspeed"}))
    # 72*2*64^2 + 12*2*64*128 + 4.5*64*256 = 589,824 + 196,608 + 73,728
    assert d["flops_per_token"].iloc[0] == pytest.approx(860_160)
    assert d["flops_convention_used"].iloc[0] == "megatron-deepspeed"


def test_megatron_convention_halves_causal_attention_and_counts_logits_six_times():
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 1.0, "n_layers": 2, "d_model": 64,
                     "seq_len": 128, "vocab_size": 256, "flops_convention": "megatron"}))
    # 72*2*64^2 + 6*2*64*128 + 6*64*256 = 589,824 + 98,304 + 98,304
    assert d["flops_per_token"].iloc[0] == pytest.approx(786_432)


def test_data_parallel_and_global_batch_from_micro_batch_and_accumulation():
    d = derive(runs({"run_id": "a", "gpus": 16, "tensor_parallel": 2, "pipeline_parallel": 2, "elapsed_s": 10.0,
                     "steps": 5, "micro_batch_size": 4, "grad_accum_steps": 8, "seq_len": 1024}))
    assert d["data_parallel"].iat[0] == 4
    assert d["global_batch_size"].iat[0] == 4 * 8 * 4
    assert d["tokens_per_s"].iat[0] == pytest.approx(5 * 128 * 1024 / 10.0)


def test_degrees_that_do_not_divide_the_devices_are_noted_and_unknown_devices_are_not():
    d = derive(runs({"run_id": "a", "gpus": 12, "tensor_parallel": 8, "tokens_per_s": 1.0},
                    {"run_id": "b", "tensor_parallel": 8, "tokens_per_s": 1.0}))
    assert pd.isna(d["data_parallel"]).all()
    assert "not a multiple" in d["notes"].iat[0] and "not a multiple" not in d["notes"].iat[1]


def test_a_nanogpt_style_row_with_micro_batch_and_accumulation_gets_tokens_per_second():
    # nanoGPT's train_gpt2.py config: batch_size 12, block_size 1024, 5 accumulation steps per process on 8 GPUs
    # gives "tokens per iteration will be: 491,520"; at 0.25 s per iteration that is 1,966,080 tokens/s
    d = derive(runs({"run_id": "a", "gpus": 8, "elapsed_s": 2.5, "steps": 10, "micro_batch_size": 12,
                     "grad_accum_steps": 5, "seq_len": 1024}))
    assert d["tokens_per_s"].iat[0] == pytest.approx(491_520 / 0.25)


def test_an_mfu_above_three_quarters_of_the_dense_peak_is_noted_with_its_likely_causes():
    # Mixtral 8x7B counted with all 46.7e9 parameters instead of the 12.9e9 each token uses
    row = {"run_id": "moe", "gpus": 8, "tokens_per_s": 8 * 3000.0, "n_params": 46.7e9, "platform": "NVIDIA H100 SXM",
           "precision": "bf16"}
    noted = derive(runs(row))
    assert noted["mfu"].iat[0] == pytest.approx(6 * 46.7e9 * 3000 / 989.5e12, rel=1e-3)  # 0.85
    assert "n_active_params" in noted["notes"].iat[0] and "gpus" in noted["notes"].iat[0]
    active = derive(runs({**row, "n_active_params": 12.9e9}))
    assert active["mfu"].iat[0] == pytest.approx(6 * 12.9e9 * 3000 / 989.5e12, rel=1e-3)
    assert pd.isna(active["notes"].iat[0]) or "implausible" not in active["notes"].iat[0]


def test_a_baseline_that_was_not_loaded_is_noted_and_the_fewest_devices_used():
    d = derive(runs({"run_id": "b", "gpus": 2, "tokens_per_s": 190.0, "baseline_run_id": "a"},
                    {"run_id": "c", "gpus": 4, "tokens_per_s": 300.0, "baseline_run_id": "a"}))
    assert d["baseline_run_id"].tolist() == ["b", "b"]
    assert d["scaling_multiplier"].tolist() == pytest.approx([1.0, 300 / 190])
    assert "baseline_run_id 'a' is not among the loaded runs" in d["notes"].iloc[1]


def test_a_run_without_the_experiments_throughput_gets_no_scaling_rather_than_an_elapsed_ratio():
    # a and b measured tokens: b does 4,000 tokens in 20 s = 200 tokens/s, twice a's 1,000 in 10 s.
    # c has only an elapsed time; comparing elapsed times (equal work) would make b 10/20 = 0.5x.
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens": 1000, "elapsed_s": 10.0},
                    {"run_id": "b", "gpus": 2, "tokens": 4000, "elapsed_s": 20.0},
                    {"run_id": "c", "gpus": 4, "elapsed_s": 5.0}))
    assert d["scaling_multiplier"].iloc[:2].tolist() == pytest.approx([1.0, 2.0])
    assert (d["scaling_basis"] == "throughput").all()
    assert math.isnan(d["scaling_multiplier"].iloc[2])
    assert "scaling: no tokens_per_s in this run" in d["notes"].iloc[2]
    # tokens in one run, samples in the other, no seq_len: not comparable
    mixed = derive(runs({"run_id": "a", "gpus": 1, "tokens": 1000, "elapsed_s": 10.0},
                        {"run_id": "b", "gpus": 2, "samples": 4000, "elapsed_s": 20.0}))
    assert math.isnan(mixed["scaling_multiplier"].iloc[1])


def test_a_baseline_without_positive_throughput_gives_no_scaling_instead_of_infinity():
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens": 0, "elapsed_s": 10.0},
                    {"run_id": "b", "gpus": 2, "tokens": 4000, "elapsed_s": 20.0}))
    assert d["scaling_multiplier"].isna().all()
    assert "the baseline 'a' has no positive tokens_per_s" in d["notes"].iloc[1]


def test_runs_naming_different_baselines_are_noted_not_silently_ignored():
    d = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 100.0, "baseline_run_id": "b"},
                    {"run_id": "b", "gpus": 2, "tokens_per_s": 150.0, "baseline_run_id": "c"},
                    {"run_id": "c", "gpus": 4, "tokens_per_s": 300.0}))
    assert d["baseline_run_id"].tolist() == ["a", "a", "a"]
    assert "different baseline_run_ids ('b', 'c')" in d["notes"].iloc[0]


def test_unknown_gpus_leaves_per_device_figures_empty_with_a_reason():
    d = derive(runs({"run_id": "a", "gpus": None, "tokens_per_s": 1e5, "n_params": 1e9, "platform": "H100",
                     "precision": "bf16", "elapsed_s": 10.0}))
    assert d["tflops_total"].iloc[0] == pytest.approx(1e5 * 6e9 / 1e12)
    assert math.isnan(d["mfu"].iloc[0]) and math.isnan(d["gpu_hours"].iloc[0])
    assert d["notes"].iloc[0].split("; ")[0] == (
        "data_parallel, tokens_per_s_per_gpu, tflops_per_gpu, mfu, gpu_hours, baseline_run_id, scaling_basis, "
        "scaling_multiplier, scaling_efficiency, serial_fraction, scaling_type: no gpus")


def test_an_impossible_mfu_is_emptied_with_its_reason():
    # 1.6e9 tokens / 3600 s = 444,444 tokens/s; 6 * 6.7e9 + 12 * 32 * 4096 * 2048 = 4.3421e10 FLOPs per token;
    # / 8 GPUs = 2,412 TFLOP/s per H100 against a dense 989.5 (its datasheet's): 2.44, more than the device can do,
    # so the TFLOP/s cannot be true either; on a peak given or measured (which may be the figure too low),
    # they are kept
    row = {"run_id": "a", "gpus": 8, "tokens": 1.6e9, "elapsed_s": 3600.0, "n_params": 6.7e9, "n_layers": 32,
           "d_model": 4096, "seq_len": 2048, "platform": "H100", "precision": "bf16", "activation_checkpointing": False}
    d = derive(runs(row, {**row, "run_id": "b", "peak_tflops_per_gpu": 989.5}))  # given: a peak not from a datasheet
    assert d["tflops_per_gpu"].iloc[1] / 989.5 == pytest.approx(1.6e9 / 3600 * 4.3421e10 / 8 / 1e12 / 989.5, rel=1e-4)
    assert d["mfu"].isna().all() and d["hfu"].isna().all() and d["tflops_per_gpu"].isna().iloc[0]
    assert ("mfu, hfu, tflops_per_gpu, tflops_total: impossible, emptied: mfu above 1, more FLOP/s than the device's "
            "peak: likely causes: " in d["notes"].iloc[0])
    assert "mfu, hfu: impossible, emptied: mfu above 1" in d["notes"].iloc[1]



def test_a_cpu_near_its_measured_peak_is_not_doubted_but_above_it_is_emptied():
    # a CPU's peak is the matmul rate measured on it (given in the run): 0.8 of it is reachable, 1.05 is not;
    # 6 x 1e6 params x tokens/s / 1e12 against a given 0.06 TFLOP/s: 8,000 tokens/s = 0.8, 10,500 = 1.05
    rows = [{"run_id": f"r{i}", "gpus": 1, "tokens_per_s": rate, "n_params": 1e6, "platform": "cpu",
             "precision": "fp32", "peak_tflops_per_gpu": 0.06} for i, rate in enumerate((8_000.0, 10_500.0))]
    d = derive(runs(*rows))
    assert d["mfu"].iat[0] == pytest.approx(0.8) and pd.isna(d["mfu"].iat[1])
    assert pd.isna(d["notes"].iat[0]) or "mfu" not in d["notes"].iat[0]
    assert "mfu, hfu: impossible, emptied: mfu above 1" in d["notes"].iat[1]


def test_a_doubtful_mfu_is_one_note_whatever_its_value():
    # two H100 runs at 0.85 and 0.91 of the dense 989.5 TFLOP/s: the same note, so the report counts it once
    rows = [{"run_id": f"r{i}", "gpus": 8, "tokens_per_s": 8 * rate, "n_params": 46.7e9, "platform": "NVIDIA H100 SXM",
             "precision": "bf16"} for i, rate in enumerate((3000.0, 3200.0))]
    found = [[n for n in notes.split("; ") if n.startswith("mfu")] for notes in derive(runs(*rows))["notes"]]
    assert len(found[0]) == 1 and found[0] == found[1]  # "; " separates a run's notes: none inside this one

def test_a_step_time_or_token_count_that_contradicts_the_run_is_noted():
    d = derive(runs({"run_id": "a", "gpus": 8, "steps": 100, "global_batch_size": 64, "seq_len": 2048,
                     "tokens": 10_000_000.0, "elapsed_s": 200.0, "step_time_s": 2.5}))
    # 100 steps of 64 x 2048 tokens = 13,107,200 tokens, 31 % more than the 10,000,000 counted
    assert d["tokens"].iloc[0] == 10_000_000
    assert "tokens: steps · global_batch_size · seq_len gives 1.31072e+07, 31.1 % off" in d["notes"].iloc[0]
    # 200 s / 100 steps = 2.0 s per step; the published 2.5 s is 25 % off
    assert d["step_time_s"].iloc[0] == pytest.approx(2.0)
    assert "step_time_s: the given step time gives 2.5, 25.0 % off the 2 from elapsed_s / steps" in d["notes"].iloc[0]


def test_strong_and_weak_scaling_are_told_from_the_batch_and_a_given_type_wins():
    # strong: global batch 64 at 1, 2 and 4 devices; weak: 16 per device (16, 32, 64); e = (1/S - 1/p) / (1 - 1/p)
    strong = derive(runs(*({"run_id": f"s{g}", "gpus": g, "global_batch_size": 64, "tokens_per_s": t}
                           for g, t in ((1, 100.0), (2, 190.0), (4, 340.0)))))
    assert strong["scaling_type"].tolist() == ["strong"] * 3
    assert strong["serial_fraction"].iloc[2] == pytest.approx((100 / 340 - 1 / 4) / (1 - 1 / 4))
    weak = derive(runs(*({"run_id": f"w{g}", "gpus": g, "global_batch_size": 16 * g, "tokens_per_s": t}
                         for g, t in ((1, 100.0), (2, 190.0), (4, 340.0)))))
    assert weak["scaling_type"].tolist() == ["weak"] * 3 and weak["serial_fraction"].isna().all()
    assert weak["scaling_multiplier"].iloc[2] == pytest.approx(3.4)  # Gustafson's scaled speedup
    assert "Karp–Flatt serial fraction assumes the same total work" in weak["notes"].iloc[2]
    # no batch: not known, unless the runs say; elapsed times alone compare equal work: strong
    unknown = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 1.0},
                          {"run_id": "b", "gpus": 2, "tokens_per_s": 1.8}))
    assert unknown["scaling_type"].isna().all()
    given = derive(runs({"run_id": "a", "gpus": 1, "tokens_per_s": 1.0, "scaling_type": "Weak"},
                        {"run_id": "b", "gpus": 2, "tokens_per_s": 1.8, "scaling_type": "weak"}))
    assert given["scaling_type"].tolist() == ["weak", "weak"] and given["serial_fraction"].isna().all()
    elapsed = derive(runs({"run_id": "a", "gpus": 1, "elapsed_s": 100.0}, {"run_id": "b", "gpus": 2, "elapsed_s": 55.0}))
    assert elapsed["scaling_type"].tolist() == ["strong", "strong"]
    with pytest.raises(DataError, match="'sideways' is not one of strong, weak"):
        runs({"run_id": "a", "gpus": 1, "scaling_type": "sideways"})


# --- every empty derived value says why ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def unexplained(derived: pd.DataFrame) -> dict[str, list[str]]:
    """Per derived column, the runs that leave it empty with no note naming it (a note's key, before ': ',
    names the columns it is about; a 'scaling:' note those of the scaling multiplier)."""
    found: dict[str, list[str]] = {}
    for row in derived.to_dict("records"):
        named = set()
        for note in ([] if pd.isna(row["notes"]) else row["notes"].split("; ")):
            key = note.split(": ", 1)[0]
            named.update(("baseline_run_id", "scaling_basis", "scaling_multiplier", "scaling_efficiency")
                         if key == "scaling" else key.split(", "))
        for column in DERIVED_COLUMNS:
            if column not in ("notes", "second_scaling_study") and pd.isna(row[column]) and column not in named:
                found.setdefault(column, []).append(row["run_id"])
    return found


@pytest.mark.parametrize("path", [*sorted((ROOT / "data" / "reference").glob("seed_00[0-3]*.csv")),
                                  ROOT / "data" / "reference" / "seed_004_scaling.csv",
                                  ROOT / "data" / "reference" / "llmfoundry_mpt.csv", ROOT / "data" / "runs"],
                         ids=lambda p: p.name)
def test_every_derived_value_left_empty_is_named_in_a_note(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        assert unexplained(derive(load_runs(path))) == {}


def test_elapsed_only_rows_say_why_they_have_no_throughput():
    """Seed 004's runs give an epoch's elapsed time, the global batch and the phases, but no token, sample or
    step count and no sequence length (data/reference/seed_004_scaling.csv): no rate can be computed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        d = derive(load_runs(ROOT / "data" / "reference" / "seed_004_scaling.csv"))
    for notes in d["notes"]:
        found = notes.split("; ")
        assert "tokens_per_s, tokens_per_s_per_gpu, tokens_per_day: not given, and no tokens, samples_per_s or " \
               "seq_len" in found
        assert "step_time_s: not given, and no steps or samples_per_s" in found
        assert "tflops_total, tflops_per_gpu: no tokens_per_s or flops_per_token" in found


def test_an_mlperf_style_row_names_each_input_it_lacks_once():
    """A row of a published table with only devices and time to train: one note per missing cause, the
    columns that follow from an empty one listed with it."""
    d = derive(runs({"run_id": "a", "gpus": 8, "elapsed_s": 3600.0, "platform": "NVIDIA H100 SXM",
                     "precision": "bf16", "n_params": 1e9, "activation_checkpointing": False,
                     "price_per_gpu_hour": 2.0}))
    assert d["gpu_hours"].iat[0] == 8.0 and d["cost_usd"].iat[0] == 16.0
    assert d["notes"].iat[0].split("; ") == [
        "scaling_type: the study has runs on one device count",
        "serial_fraction: not above the baseline's device count (Karp–Flatt compares more devices with fewer)",
        "global_batch_size: not given, and no micro_batch_size or grad_accum_steps",
        "tokens_per_s, tokens_per_s_per_gpu, tokens_per_day, tflops_total, tflops_per_gpu, mfu, hfu: not given, "
        "and no tokens, samples_per_s or seq_len",
        "samples_per_s, samples_per_s_per_gpu, samples_per_day: not given, and no samples, global_batch_size, "
        "step_time_s, tokens_per_s or seq_len",
        "step_time_s: not given, and no steps, global_batch_size or samples_per_s",
        "comm_overhead: no comm_s",
        "compute_comm_ratio: no compute_s or comm_s",
        "energy_j_per_token: no energy_j or tokens",
        "power_w_per_gpu, energy_kwh: no energy_j",
        "energy_cost_usd: no energy_kwh or price_per_kwh",
        "energy_cost_usd_per_million_tokens: no energy_cost_usd or tokens",
        "memory_headroom_gb: no peak_memory_gb",
    ]


def test_accumulation_steps_follow_from_the_global_batch_where_not_given():
    """256 samples a step at micro-batch 2 on 16 GPUs with TP 2: 8 replicas, 256 / (2 x 8) = 16 micro-batches. A
    global batch that no whole number of micro-batches makes is noted, not rounded."""
    d = derive(runs({"run_id": "a", "gpus": 16, "tensor_parallel": 2, "micro_batch_size": 2,
                     "global_batch_size": 256, "elapsed_s": 10.0, "steps": 5},
                    {"run_id": "b", "gpus": 16, "tensor_parallel": 2, "micro_batch_size": 3,
                     "global_batch_size": 256, "elapsed_s": 10.0, "steps": 5}))
    assert d["grad_accum_steps"].iat[0] == 16 and pd.isna(d["grad_accum_steps"].iat[1])
    assert "grad_accum_steps: global_batch_size / (micro_batch_size · data_parallel) is 10.6667, not a whole " \
           "number: check the batch sizes and the parallel degrees" in d["notes"].iat[1].split("; ")


def test_memory_headroom_against_the_recorded_or_the_datasheet_capacity():
    runs = check_runs(pd.DataFrame({
        "run_id": ["sheet", "recorded", "cpu", "unknown"], "gpus": [8, 8, 1, 8], "elapsed_s": [10.0] * 4,
        "platform": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "cpu", "V100"],
        "peak_memory_gb": [61.5, 61.5, 2.0, 20.0], "device_memory_gb": [None, 79.19, None, None]}))
    out = derive(runs).set_index("run_id")
    assert out.loc["sheet", "device_memory_gb"] == 80 and out.loc["sheet", "memory_headroom_gb"] == 18.5
    # the profiler records what the driver offers, which wins over the datasheet
    assert out.loc["recorded", "memory_headroom_gb"] == pytest.approx(79.19 - 61.5)
    assert math.isnan(out.loc["cpu", "memory_headroom_gb"]) and math.isnan(out.loc["unknown", "memory_headroom_gb"])
    # a CPU has no device memory to look up; a V100 named without its size is named as such
    assert "no memory size" not in out.loc["cpu", "notes"]
    assert "no memory size for V100" in out.loc["unknown", "notes"]


def test_energy_per_token_power_and_cost():
    # 8 GPUs for 100 s used 400 kJ on 2 million tokens; electricity at 0.15 USD/kWh
    runs = check_runs(pd.DataFrame({"run_id": ["a", "no-tokens"], "gpus": [8, 8], "elapsed_s": [100.0, 100.0],
                                    "tokens": [2e6, None], "energy_j": [4e5, 4e5], "price_per_kwh": [0.15, None]}))
    out = derive(runs).set_index("run_id")
    a = out.loc["a"]
    assert a["energy_j_per_token"] == pytest.approx(0.2) and a["power_w_per_gpu"] == pytest.approx(500.0)
    assert a["energy_kwh"] == pytest.approx(4e5 / 3.6e6)  # 0.111 kWh
    assert a["energy_cost_usd"] == pytest.approx(4e5 / 3.6e6 * 0.15)
    assert a["energy_cost_usd_per_million_tokens"] == pytest.approx(4e5 / 3.6e6 * 0.15 / 2)
    assert math.isnan(out.loc["no-tokens", "energy_j_per_token"])
    assert "energy_j_per_token: no tokens" in out.loc["no-tokens", "notes"].split("; ")


def test_a_run_that_did_not_fit_needs_no_speed_and_says_so():
    runs = check_runs(pd.DataFrame({"run_id": ["mb64"], "gpus": [1], "fits": [False],
                                    "extra_out_of_memory": ["rank 0 step 0"]}))
    (row,) = derive(runs).to_dict("records")
    assert "out of memory: the configuration does not fit the device (rank 0 step 0); no step was measured" \
        in row["notes"]
    with pytest.raises(DataError, match="no measure of speed"):
        check_runs(pd.DataFrame({"run_id": ["mb64"], "gpus": [1], "fits": [True]}))
def test_strong_and_weak_scaling_are_told_from_the_work_done_per_step_where_no_batch_is_given():
    # 1,000 steps of 4,096 tokens per device (weak): 4.096e6, 8.192e6 and 1.6384e7 tokens at 1, 2 and 4 devices
    weak = derive(runs(*({"run_id": f"w{g}", "gpus": g, "steps": 1000, "tokens": 4.096e6 * g, "elapsed_s": e}
                         for g, e in ((1, 100.0), (2, 105.0), (4, 120.0)))))
    assert weak["scaling_type"].tolist() == ["weak"] * 3 and weak["serial_fraction"].isna().all()
    # the same 8,192 tokens per step on every device count (strong)
    strong = derive(runs(*({"run_id": f"s{g}", "gpus": g, "steps": 1000, "tokens": 8.192e6, "elapsed_s": e}
                           for g, e in ((1, 100.0), (2, 55.0), (4, 31.0)))))
    assert strong["scaling_type"].tolist() == ["strong"] * 3
    assert strong["serial_fraction"].iloc[2] == pytest.approx((31 / 100 - 1 / 4) / (1 - 1 / 4))
    # per data-parallel replica: 8 devices at tensor parallel 2 are 4 replicas of 2,048 tokens per step
    replicas = derive(runs(*({"run_id": f"t{g}", "gpus": g, "tensor_parallel": 2, "steps": 10,
                              "tokens": 2048 * 10 * g / 2, "elapsed_s": 1.0} for g in (2, 4, 8))))
    assert replicas["scaling_type"].tolist() == ["weak"] * 3
    # a published rate and step time, rounded as printed (31.97 to 32.04 samples per device per step): weak
    printed = derive(runs(*({"run_id": f"p{g}", "gpus": g, "samples_per_s": x, "step_time_s": t}
                            for g, x, t in ((1, 1150.0, 0.0278), (8, 8510.0, 0.0301), (256, 184_320.0, 0.0445)))))
    assert printed["scaling_type"].tolist() == ["weak"] * 3
    # neither the work per step nor per device is held (12 %, 50 % apart): not known
    neither = derive(runs(*({"run_id": f"n{g}", "gpus": g, "steps": 10, "tokens": w, "elapsed_s": 1.0}
                            for g, w in ((1, 1000.0), (2, 1120.0), (4, 3000.0)))))
    assert neither["scaling_type"].isna().all()
