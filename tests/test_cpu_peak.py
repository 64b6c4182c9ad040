"""A CPU's peak is kept only when measured on a quiet machine, per thread count, re-measured when impossible,
and every run says how its peak was got. The load and the matmul timing are fakes: no timing is asserted."""

from __future__ import annotations

import json

import pytest

from trainperf.profiler import cpu_peak as module
from trainperf.profiler.cpu_peak import CACHE_FILE, cpu_peak, quiet


class Fakes:
    """A measurement that returns ``rates[threads]`` TFLOP/s and a load average read from ``loads`` in turn."""

    def __init__(self, rates: dict[int, float], loads: list[float]):
        self.rates, self.loads, self.measured = rates, list(loads), []

    def measure(self, dtype: str, threads: int) -> float:
        self.measured.append(threads)
        return self.rates[threads]

    def load(self) -> float:
        return self.loads.pop(0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    return tmp_path / CACHE_FILE


def test_quiet_means_the_threads_fit_in_the_cores_left_by_the_load():
    # 4 cores: a load of 2.9 leaves room for 1 thread (3.9 <= 4), not for 2 (4.9 > 4)
    assert quiet((0.5, 2.9), 4, 1) and not quiet((0.5, 2.9), 4, 2)


def test_a_peak_measured_under_load_is_used_but_never_cached(cache):
    # 2 cores, a load of 1.7 before and 2.3 after: 2.3 + 1 thread > 2 cores
    fakes = Fakes({1: 0.02}, [1.7, 2.3])
    found = cpu_peak("fp32", threads=1, measure=fakes.measure, load=fakes.load, cores=2)
    assert found["tflops"] == 0.02 and found["quiet"] is False and found["loads"] == [1.7, 2.3]
    assert "under load" in found["source"] and "not cached" in found["source"]
    assert not cache.exists()
    # measured again on a quiet machine: kept, and read from the cache next time without measuring
    fakes = Fakes({1: 0.05}, [0.2, 0.4])
    assert cpu_peak("fp32", threads=1, measure=fakes.measure, load=fakes.load, cores=2)["tflops"] == 0.05
    again = Fakes({1: 0.09}, [])
    found = cpu_peak("fp32", threads=1, measure=again.measure, load=again.load, cores=2)
    assert (found["tflops"], found["cached"], again.measured) == (0.05, True, [])
    assert "read from the cache" in found["source"]


def test_each_thread_count_has_its_peak_and_an_impossible_cached_one_is_measured_again(cache):
    # the cache holds a 2-thread peak (0.03) below the 1-thread one (0.05): impossible, measured again (0.09)
    key = "|".join([module.cpu_model(), "16", __import__("torch").__version__, "{}", "float32"])
    entry = {"quiet": True, "loads": [0.1, 0.1]}
    cache.write_text(json.dumps({key.format(1): {**entry, "tflops": 0.05, "threads": 1},
                                 key.format(2): {**entry, "tflops": 0.03, "threads": 2}}))
    fakes = Fakes({2: 0.09}, [0.1, 0.2])
    found = cpu_peak("fp32", threads=2, measure=fakes.measure, load=fakes.load, cores=16)
    assert fakes.measured == [2] and found["tflops"] == 0.09 and found["threads"] == 2
    assert json.loads(cache.read_text())[key.format(2)]["tflops"] == 0.09


def test_a_fresh_peak_below_the_one_thread_peak_is_not_kept_and_the_run_uses_the_one_thread_peak(cache):
    # measured quietly: 1 thread 0.05, 4 threads 0.04 (impossible): the run gets 0.05, the cache only the 1-thread
    fakes = Fakes({1: 0.05, 4: 0.04}, [0.1, 0.1, 0.1, 0.1])
    found = cpu_peak("fp32", threads=4, measure=fakes.measure, load=fakes.load, cores=16)
    assert found["tflops"] == 0.05 and found["threads"] == 4
    assert "the 4-thread one measured 0.04 TFLOP/s, below it" in found["source"]
    assert [v["threads"] for v in json.loads(cache.read_text()).values()] == [1]


def test_an_old_bare_number_in_the_cache_is_not_trusted(cache):
    # the cache of an earlier version held bare numbers, measured whatever the load: measured again
    key = "|".join([module.cpu_model(), "8", __import__("torch").__version__, "1", "float32"])
    cache.write_text(json.dumps({key: 0.001}))
    fakes = Fakes({1: 0.05}, [0.0, 0.0])
    assert cpu_peak("fp32", threads=1, measure=fakes.measure, load=fakes.load, cores=8)["tflops"] == 0.05


def test_the_run_records_how_its_peak_was_got(tmp_path):
    from trainperf import load_runs
    from trainperf.runfolder import rankfile
    folder = tmp_path / "run"
    folder.mkdir()
    source = "measured on this machine under load (1-minute load 1.70 → 2.30, 1 thread(s))"
    (folder / "manifest.json").write_text(json.dumps({"config": {"experiment": "e", "precision": "fp32",
                                                                 "flops_per_token": 6e6}, "warmup_steps": 0,
        "warmup_rule": "fixed", "environment": {"world_size": 1, "device": "cpu", "cpu_peak": {
            "tflops": 0.02, "source": source}}}))
    lines = [rankfile.header_line(0, "h", 0, "h")]
    for step in range(4):
        values = dict.fromkeys(rankfile.LINE_COLUMNS)
        values.update(step=step, warmup=False, start_s=step * 0.1, step_s=0.1, tokens=100, samples=1, micro_steps=1,
                      out_of_memory=False)
        lines.append(rankfile.step_line([values[c] for c in rankfile.LINE_COLUMNS]))
    (folder / "steps-rank0.jsonl").write_bytes(b"".join(lines) + rankfile.end_line(4, {}))
    from trainperf import derive
    row = derive(load_runs(str(folder))).iloc[0]
    assert row["peak_method"] == source
    assert row["peak_source"] == f"given in the run (peak_tflops_per_gpu): {source}"
    # 400 tokens / 0.4 s = 1,000 tokens/s x 6e6 FLOPs = 0.006 TFLOP/s against 0.02: MFU 0.3
    assert row["mfu"] == pytest.approx(0.3)
