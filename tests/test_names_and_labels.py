"""One device is one platform whatever the spelling of its name (the peak table is the registry of names), and a
scaling study is labelled with what its runs are."""

from __future__ import annotations

import pandas as pd

from trainperf.hardware import platform_name
from trainperf.report import platforms
from trainperf.report.page import open_runs
from trainperf.scaling import scaling_studies


def test_spellings_of_one_device_get_the_tables_name():
    assert {platform_name(p) for p in ("NVIDIA H100 SXM", "NVIDIA H100 SXM 80GB", "H100", " nvidia h100-sxm5 ")} == {
        "NVIDIA H100 SXM"}
    assert platform_name("NVIDIA A100 40GB") != platform_name("NVIDIA A100 80GB")  # two devices
    assert platform_name("Acme Z9000 ") == "Acme Z9000"  # not in the table: as given


def test_one_device_is_one_platform_whatever_its_spelling_and_the_page_says_where_merged(tmp_path):
    # two spellings of one H100 SXM (the peak table's "NVIDIA H100 SXM") and an MI300X, one model
    rows = [{"run_id": f"r{i}", "experiment": "e", "gpus": 8, "model": "m", "tokens_per_s": rate, "platform": name,
             "precision": "bf16"} for i, (name, rate) in enumerate(
        (("NVIDIA H100 SXM", 8000.0), ("NVIDIA H100 SXM 80GB", 9000.0), ("AMD MI300X", 8500.0)))]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs = platforms.comparable(open_runs(str(path)))
    assert sorted(runs["platform_key"].unique()) == ["AMD MI300X", "NVIDIA H100 SXM"]
    assert ("'NVIDIA H100 SXM' and 'NVIDIA H100 SXM 80GB' are one device, NVIDIA H100 SXM: counted as one platform."
            in platforms.analyse(runs).policy_notes)


def test_a_scaling_study_is_labelled_with_what_each_of_its_runs_is():
    # 1 device as 4 x 2 accumulation, 1 device as 16 x 1, 2 devices as 8 x 1: the first and the last hold 8 per
    # device (weak), the last two the global batch 16 (strong). No study is named by one run's micro-batch (the
    # "micro-batch 4 x 2" of a study that holds an 8 x 1 run)
    group = pd.DataFrame({"gpus": [1.0, 1.0, 2.0], "micro_batch_size": [4.0, 16.0, 8.0],
                          "grad_accum_steps": [2.0, 1.0, 1.0]})
    found = {(s.label, s.kind): (s.members.tolist(), s.primary.tolist()) for s in scaling_studies(group)}
    assert found == {("global batch 16", "strong"): ([1, 2], [True, True]),
                     ("8 per device", "weak"): ([0, 2], [True, False])}
