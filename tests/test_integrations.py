"""HFCallback and LightningCallback on real Trainer and Lightning runs of a
tiny GPT-2 built from a config: the run folders they write hold one line per
optimizer step, with every micro-batch of every rank counted.

Expected counts are independent arithmetic on what the jobs are configured
with: per optimizer step a rank processes ``batch * accum`` sequences of
``seq_len`` tokens; the run, ``world`` times that per step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from trainperf import StepProfiler, load_runs, load_steps
from trainperf.goodput import PARTS
from trainperf.profiler import ProfilerWarning
from trainperf.runfolder import rankfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import hf_training  # noqa: E402
import lightning_training  # noqa: E402

BATCH, SEQ_LEN, STEPS = 2, 12, 3
WARMUP = 1  # both training scripts profile with warmup_steps=1
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TIMEOUT_S = 300


def assert_run(run_dir: Path, framework: str, accum: int, world: int, strategy: str) -> None:
    """The folder is one complete run of ``STEPS`` optimizer steps on
    ``world`` ranks, whose tokens, samples and batch facts are what the job
    was configured with."""
    for rank in range(world):
        read = rankfile.read_rank_file(run_dir / f"steps-rank{rank}.jsonl")
        assert read.bad_lines == [] and read.closed and read.steps == STEPS
    steps = load_steps(run_dir)
    assert len(steps) == STEPS * world
    assert (steps["micro_steps"] == accum).all()
    assert (steps["samples"] == BATCH * accum).all()
    assert (steps["tokens"] == BATCH * accum * SEQ_LEN).all()
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        assert (steps[phase] > 0).all(), phase
    # a wait for a batch counts in the step it precedes; a loader that fetches ahead
    # (accelerate's, Lightning's) leaves none in some steps
    assert steps["data_s"].notna().any() and steps["data_s"].dropna().gt(0).all()
    timed = steps[["data_s", "forward_s", "backward_s", "optimizer_s"]].sum(axis=1)
    assert (timed <= steps["step_s"] + 1e-6).all()
    (row,) = load_runs(run_dir).to_dict("records")
    measured = STEPS - WARMUP
    assert row["steps"] == measured and row["gpus"] == world and row["complete"]
    assert row["tokens"] == BATCH * accum * world * SEQ_LEN * measured
    assert row["samples"] == BATCH * accum * world * measured
    assert row["global_batch_size"] == BATCH * accum * world
    assert row["micro_batch_size"] == BATCH and row["grad_accum_steps"] == accum
    assert row["strategy"] == strategy and row["precision"] == "fp32"
    assert row["extra_framework"] == framework
    assert row["model"] == "tiny-gpt2"  # given in config: wins over the detected "gpt2"
    # the model facts come from the model's config; the sequence length from the batches
    assert (row["n_layers"], row["d_model"], row["n_heads"], row["vocab_size"], row["seq_len"]) == (2, 32, 2, 128,
                                                                                                   SEQ_LEN)
    if strategy == "ddp":
        assert (steps.loc[~steps["warmup"], "comm_s"] > 0).all()
    # memory as the profiler records it in a user's loop: each rank's own file, and the run's max and mean
    largest = []
    for rank in range(world):
        read = rankfile.read_rank_file(run_dir / f"steps-rank{rank}.jsonl")
        assert read.written == rankfile.LINE_COLUMNS and not read.columns["out_of_memory"].any()
        assert (read.columns["host_memory_gb"] > 0).all() and (read.columns["peak_memory_gb"] > 0).all()
        largest.append(read.columns["host_memory_gb"][~read.columns["warmup"]].max())
    assert row["host_memory_gb"] == pytest.approx(max(largest), abs=1e-6)
    assert row["host_memory_mean_gb"] == pytest.approx(sum(largest) / world, abs=1e-6)
    assert row["fits"] and row["energy_counter"].startswith(("rapl:", "none:"))


@pytest.mark.parametrize("accum", [1, 3])
def test_hf_trainer_single_process(tmp_path, accum):
    trainer_loss = hf_training.train(str(tmp_path), BATCH, accum, STEPS, SEQ_LEN)
    assert_run(tmp_path, "transformers", accum, world=1, strategy="single")
    # the step losses are the Trainer's: their mean is the training loss it reports
    assert load_steps(tmp_path)["loss"].mean() == pytest.approx(trainer_loss, rel=1e-5)


@pytest.mark.parametrize("accum", [1, 3])
def test_lightning_single_process(tmp_path, accum):
    lightning_training.train(str(tmp_path), BATCH, accum, STEPS, SEQ_LEN)
    assert_run(tmp_path, "lightning", accum, world=1, strategy="single")


def test_lightning_records_the_step_that_runs_out_of_memory(tmp_path):
    """Lightning hands the error to the callback (``on_exception``) before raising it: the step is
    written as one that ran out of memory, and the run does not fit."""
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        lightning_training.train(str(tmp_path), BATCH, 1, STEPS, SEQ_LEN, oom_at=2)
    read = rankfile.read_rank_file(tmp_path / "steps-rank0.jsonl")
    assert read.closed and read.columns["out_of_memory"].tolist() == [False, False, True]
    (row,) = load_runs(tmp_path).to_dict("records")
    assert row["fits"] == False and row["extra_out_of_memory"] == "rank 0 step 2"  # noqa: E712
    assert row["steps"] == 1  # step 1; step 0 is the warm-up


def phases_outside(run_dir: Path, rank: int = 0) -> list[dict]:
    """The phases a rank timed outside its steps (its events file), checked to lie in no step's window, and the
    run's goodput breakdown to add up to its wall clock."""
    events = [json.loads(line) for line in (run_dir / f"events-rank{rank}.jsonl").read_text().splitlines()[1:]]
    steps = load_steps(run_dir)
    mine = steps[steps["rank"] == rank]
    for event in events:
        end = event["start_s"] + event["seconds"]
        assert event["seconds"] > 0
        assert not ((mine["start_s"] < end - 1e-5) & (event["start_s"] + 1e-5 < mine["start_s"] + mine["step_s"])).any()
    (row,) = load_runs(run_dir, cache=False).to_dict("records")
    parts = [v for k, v in row.items() if (k in PARTS or k.startswith("outside_")) and pd.notna(v)]
    assert sum(parts) == pytest.approx(row["wall_s"], rel=1e-4) and 0 < row["goodput"] < 1
    return events


def test_hf_evaluation_and_checkpoints_are_outside_the_steps(tmp_path):
    """Evaluating and saving every 2 of 4 steps: the Trainer does both after step 2 and after step 4, evaluation
    first (its _maybe_log_save_evaluate); each is a phase outside the steps, and step 3 starts after them."""
    hf_training.train(str(tmp_path), BATCH, 1, 4, SEQ_LEN, eval_every=2, save_every=2)
    events = phases_outside(tmp_path)
    assert [e["phase"] for e in events] == ["validation", "checkpoint"] * 2
    steps = load_steps(tmp_path).set_index("step")
    assert steps.loc[2, "start_s"] == pytest.approx(events[1]["start_s"] + events[1]["seconds"], abs=1e-4)
    assert steps["validation_s"].isna().all()


def test_lightning_validation_and_checkpoints_are_outside_the_steps(tmp_path):
    """Validation after batches 2 and 4 (of 4 steps) and ModelCheckpoint every 2 steps: each is a phase outside the
    steps, neither a wait for data nor a part of the step that follows (no step has ``validation_s``)."""
    lightning_training.train(str(tmp_path), BATCH, 1, 4, SEQ_LEN, validate_every=2, checkpoint_every=2)
    events = phases_outside(tmp_path)
    assert sorted(e["phase"] for e in events) == ["checkpoint", "checkpoint", "validation", "validation"]
    steps = load_steps(tmp_path)
    assert steps["validation_s"].isna().all()
    validation = min(e["seconds"] for e in events if e["phase"] == "validation")
    assert (steps["data_s"].fillna(0) < validation).all()  # eight batches of validation: longer than any wait


def test_a_failing_callback_warns_and_training_goes_on(tmp_path):
    def broken(batch):
        raise ZeroDivisionError("token counter")

    with pytest.warns(ProfilerWarning, match="on_train_batch_start failed: ZeroDivisionError: token counter"):
        assert lightning_training.train(str(tmp_path), BATCH, 1, 2, SEQ_LEN, count_tokens=broken) == 2
    assert rankfile.read_rank_file(tmp_path / "steps-rank0.jsonl").closed  # stopped cleanly


def test_model_facts_and_config_precedence(tmp_path):
    from trainperf.integrations.driver import model_facts

    import transformers

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=3, n_embd=16, n_head=4, vocab_size=64,
                                                                 n_positions=1024))
    facts = model_facts(model)
    assert (facts["n_layers"], facts["d_model"], facts["n_heads"], facts["vocab_size"]) == (3, 16, 4, 64)
    assert "seq_len" not in facts  # n_positions (max_position_embeddings) is not the trained length
    # PaLM's N, as nanoGPT counts it: the token embedding once (tied to the output layer), the 1,024 × 16 learned
    # positions left out (no matmul multiplies them)
    assert facts["n_params"] == sum(p.numel() for p in model.parameters()) - 1024 * 16
    # values given when the profiler was created win over those learnt later from the batches
    prof = StepProfiler(tmp_path, config={"seq_len": 99})
    prof.update_config({"seq_len": 12, "micro_batch_size": 2})
    prof.close()
    config = json.loads((tmp_path / "manifest.json").read_text())["config"]
    assert config["seq_len"] == 99 and config["micro_batch_size"] == 2


def test_import_integrations_needs_no_framework():
    code = ("import sys, trainperf, trainperf.integrations; "
            "print('transformers' in sys.modules, 'lightning' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def torchrun(script: str, run_dir: Path, accum: int, *options: str) -> None:
    """Run ``script`` on two ranks (its output is shown when it fails)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [*TORCHRUN, str(Path(__file__).with_name(script)), str(run_dir), "--batch", str(BATCH),
               "--accum", str(accum), "--steps", str(STEPS), "--seq-len", str(SEQ_LEN), *options]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_hf_trainer_ddp_two_ranks(tmp_path):
    torchrun("hf_training.py", tmp_path, accum=2)
    assert_run(tmp_path, "transformers", 2, world=2, strategy="ddp")


@pytest.mark.slow
def test_lightning_ddp_two_ranks(tmp_path):
    torchrun("lightning_training.py", tmp_path, accum=2)
    assert_run(tmp_path, "lightning", 2, world=2, strategy="ddp")


@pytest.mark.slow
def test_hf_trainer_asked_for_fsdp_records_the_strategy_that_ran(tmp_path):
    """Asked for FSDP on CPU, the Trainer (accelerate 1.15) trains a DDP model:
    the run records the strategy of the model the Trainer trained, not the
    one asked for, and that strategy's communication."""
    run_dir = tmp_path / "run"
    torchrun("hf_training.py", run_dir, 2, "--fsdp", "--report-dir", str(tmp_path))
    # each rank's own file: ranks printing to one pipe interleave mid-line
    (wrapped,) = {(tmp_path / f"wrapped-rank{rank}.txt").read_text() for rank in (0, 1)}
    ran = "ddp" if wrapped == "DistributedDataParallel" else "fsdp"
    assert ran == "ddp" or wrapped.startswith(("FullyShardedDataParallel", "FSDP")), wrapped  # FSDP, FSDP2
    assert_run(run_dir, "transformers", 2, world=2, strategy=ran)
    steps = load_steps(run_dir)
    assert (steps.loc[~steps["warmup"], "comm_s"] > 0).all()


def test_the_callbacks_record_activation_checkpointing_so_runs_with_and_without_are_no_repeats(tmp_path):
    """The Trainer asked for gradient checkpointing (transformers' flag on the model's blocks), and a Lightning
    module whose blocks torch's checkpoint_wrapper wraps (as FSDP's activation checkpointing does), each
    against the same run without: the setting is recorded, HFU counts the recomputation (4/3 of MFU, the
    CPU's measured peak), and no run is left with an unknown setting or taken for a repeat of the other."""
    from trainperf import derive
    from trainperf.estimates import configuration_keys

    for checkpointing in (True, False):
        hf_training.train(str(tmp_path / f"hf-{checkpointing}"), BATCH, 1, STEPS, SEQ_LEN, checkpointing=checkpointing)
        lightning_training.train(str(tmp_path / f"lightning-{checkpointing}"), BATCH, 1, STEPS, SEQ_LEN,
                                 checkpointing=checkpointing)
    runs = derive(load_runs(tmp_path)).set_index("run_id")
    assert runs["activation_checkpointing"].to_dict() == {"hf-True": True, "hf-False": False, "lightning-True": True,
                                                          "lightning-False": False}
    assert (runs["hfu"] / runs["mfu"]).to_dict() == pytest.approx({"hf-True": 4 / 3, "hf-False": 1.0,
                                                                    "lightning-True": 4 / 3, "lightning-False": 1.0})
    assert not runs["notes"].fillna("").str.contains("hfu: no activation_checkpointing").any()
    keys = configuration_keys(runs.reset_index()).tolist()
    assert len(set(keys)) == 4  # the same experiment and batch, told apart by the setting


def test_a_lightning_run_that_validates_gets_its_training_only_rate(tmp_path):
    """Validation after batches 2 and 4 of 4 steps (the first lies between two measured steps, outside them):
    its tokens over the window's time less the validation's, beside the window's rate the pages use."""
    from trainperf import derive, load_summaries
    from trainperf.report.run_labels import evaluation_rates

    lightning_training.train(str(tmp_path), BATCH, 1, 4, SEQ_LEN, validate_every=2)
    runs = derive(load_runs(tmp_path))
    (row,) = evaluation_rates(runs, load_summaries(tmp_path)).to_dict("records")
    measured = load_steps(tmp_path).query("~warmup")
    first, last = measured["start_s"].min(), (measured["start_s"] + measured["step_s"]).max()
    events = [json.loads(line) for line in (tmp_path / "events-rank0.jsonl").read_text().splitlines()[1:]]
    validation = sum(e["seconds"] for e in events if e["phase"] == "validation"
                     and first <= e["start_s"] and e["start_s"] + e["seconds"] <= last)  # within the window
    tokens, elapsed = runs["tokens"].iloc[0], runs["elapsed_s"].iloc[0]
    between = elapsed - measured["step_s"].sum()  # one rank: the window's time outside its steps
    assert tokens == BATCH * SEQ_LEN * 3 and row["evaluation_s"] == pytest.approx(between, abs=2e-6)
    assert 0 < validation <= between < validation + 0.05  # the validation, and the callback's own moments
    assert row["window_rate"] == pytest.approx(tokens / elapsed) == runs["tokens_per_s"].iloc[0]
    assert row["training_rate"] == pytest.approx(tokens / (elapsed - between)) and 0 < row["evaluation_share"] < 1
