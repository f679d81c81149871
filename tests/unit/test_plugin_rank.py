"""One rank's instruments end to end in one process: steps, TTFT, stall ring, compile events."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS

from prometheus_client import CollectorRegistry

from moe_opt.kernels.compile_counter import CompileEvent
from moe_opt.plugin.metrics import Metrics
from moe_opt.plugin.rank import RankInstruments
from moe_opt.plugin.sync import CollectiveClock, SyncRing

LABELS = {"engine": "e", "arm": "a", "node": "n", "rank": "0", "gpu": "none", "gpu_uuid": "none"}


def sched(new_reqs=(), scheduled=None) -> NS:
    return NS(
        scheduled_new_reqs=list(new_reqs),
        num_scheduled_tokens=dict(scheduled or {}),
        finished_req_ids=set(),
        preempted_req_ids=None,
        scheduled_cached_reqs=NS(req_ids=[], num_computed_tokens=[]),
    )


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, {**LABELS, **labels})


def test_single_rank_steps_ttft_and_zero_stall() -> None:
    reg = CollectorRegistry()
    inst = RankInstruments(dict(LABELS), 0, 1, Metrics(reg), CollectiveClock(), None)
    inst.begin(sched([NS(req_id="r", prompt_token_ids=[1, 2, 3], num_computed_tokens=0)], {"r": 3}))
    inst.end()
    inst.begin(sched(scheduled={"r": 1}))
    inst.end()
    inst.begin(sched())  # nothing scheduled: not a step
    inst.end()
    inst.flush()
    assert value(reg, "moeperf_rank_ttft_seconds_count") == 1
    assert value(reg, "moeperf_plugin_overhead_seconds_total") > 0
    assert value(reg, "moeperf_rank_step_seconds_count", phase="prefill") == 1
    assert value(reg, "moeperf_rank_step_seconds_count", phase="decode") == 1
    assert value(reg, "moeperf_rank_sync_stall_seconds_sum") == 0.0
    assert value(reg, "moeperf_rank_sync_stall_seconds_count") == 2
    assert reg.get_sample_value("moeperf_step_skew_seconds_count", {"engine": "e", "arm": "a", "node": "n"}) == 2


def test_two_ranks_collective_time_becomes_stall(tmp_path: Path) -> None:
    reg0, reg1 = CollectorRegistry(), CollectorRegistry()
    clock0, clock1 = CollectiveClock(), CollectiveClock()
    path = str(tmp_path / "ring")
    r0 = RankInstruments(dict(LABELS), 0, 2, Metrics(reg0), clock0, SyncRing(path, 2, 0))
    r1 = RankInstruments({**LABELS, "rank": "1"}, 1, 2, Metrics(reg1), clock1, SyncRing(path, 2, 1))
    for _ in range(3):
        s = sched(scheduled={"x": 1})
        r0.begin(s)
        r1.begin(s)
        clock0.seconds += 0.040  # rank 0 waited 40 ms in the all-reduce for rank 1
        clock1.seconds += 0.001
        r0.end()
        r1.end()
    r0.begin(sched())  # the next step resolves the last one
    r0.flush()
    r1.flush()
    assert value(reg0, "moeperf_rank_sync_stall_seconds_sum") >= 0.039 * 2
    assert reg1.get_sample_value("moeperf_rank_sync_stall_seconds_sum", {**LABELS, "rank": "1"}) == 0.0
    assert value(reg0, "moeperf_rank_collective_seconds_total") >= 0.04 * 3
    # rank 1 was busy while rank 0 waited in the all-reduce: rank 1 gated those steps, and rank 0 names it
    engine = {"engine": "e", "arm": "a", "node": "n"}
    skewed = reg0.get_sample_value("moeperf_step_skew_seconds_count", engine)
    assert skewed is not None and skewed >= 2
    assert reg0.get_sample_value("moeperf_steps_gated_total", {**engine, "gating_rank": "1"}) == skewed
    assert reg0.get_sample_value("moeperf_steps_gated_total", {**engine, "gating_rank": "0"}) == 0
    assert reg0.get_sample_value("moeperf_steps_gated_seconds_total", {**engine, "gating_rank": "1"}) >= 0.039 * 2
    assert reg1.get_sample_value("moeperf_steps_gated_total", {**engine, "gating_rank": "1"}) is None  # rank 0 only


def test_a_step_whose_skew_is_below_the_threshold_names_no_gating_rank(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    path = str(tmp_path / "ring")
    r0 = RankInstruments(dict(LABELS), 0, 2, Metrics(reg), CollectiveClock(), SyncRing(path, 2, 0))
    r1 = RankInstruments(
        {**LABELS, "rank": "1"}, 1, 2, Metrics(CollectorRegistry()), CollectiveClock(), SyncRing(path, 2, 1)
    )
    for _ in range(3):  # no collective time and no delay: the ranks' busy times differ by far less than 1 ms
        s = sched(scheduled={"x": 1})
        r0.begin(s)
        r1.begin(s)
        r0.end()
        r1.end()
    r0.begin(sched())
    r0.flush()
    engine = {"engine": "e", "arm": "a", "node": "n"}
    assert reg.get_sample_value("moeperf_step_skew_seconds_count", engine) >= 2
    assert sum(reg.get_sample_value("moeperf_steps_gated_total", {**engine, "gating_rank": r}) for r in "01") == 0


def test_compile_events_are_counted_per_kernel_and_phase() -> None:
    reg = CollectorRegistry()
    inst = RankInstruments(dict(LABELS), 0, 1, Metrics(reg), CollectiveClock(), None)

    def event(cache_hit: bool | None) -> CompileEvent:
        return CompileEvent("m.k", "key", 0.5, 0.4, cache_hit, False, 0.0)

    inst.on_compile(event(False))
    inst.on_compile(event(True))
    inst.begin(sched(scheduled={"x": 1}))
    inst.end()
    inst.on_compile(event(None))
    inst.flush()
    assert value(reg, "moeperf_triton_compiles_total", kernel="m.k", during="startup") == 1
    assert value(reg, "moeperf_triton_cache_hits_total", kernel="m.k", during="startup") == 1
    assert value(reg, "moeperf_triton_compiles_total", kernel="m.k", during="serving") == 1
    assert value(reg, "moeperf_triton_compile_seconds_count", kernel="m.k", during="startup") == 2


def test_compile_events_are_appended_to_the_rank_file_when_asked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MOEPERF_COMPILE_EVENTS_DIR", str(tmp_path / "events"))
    inst = RankInstruments({**LABELS, "rank": "1"}, 1, 2, Metrics(CollectorRegistry()), CollectiveClock(), None)
    inst.on_compile(NS(kernel="m.k", cache_hit=False, wall_s=0.5, compiler_s=0.4, t_unix=1000.0))
    inst.begin(sched(scheduled={"x": 1}))
    inst.end()
    inst.on_compile(NS(kernel="m.k", cache_hit=True, wall_s=0.01, compiler_s=None, t_unix=1001.5))
    lines = [json.loads(line) for line in (tmp_path / "events" / "rank1.jsonl").read_text().splitlines()]
    assert lines == [
        {"rank": 1, "kernel": "m.k", "cache_hit": False, "wall_s": 0.5, "compiler_s": 0.4, "end_epoch_s": 1000.0,
         "phase": "startup"},
        {"rank": 1, "kernel": "m.k", "cache_hit": True, "wall_s": 0.01, "compiler_s": None, "end_epoch_s": 1001.5,
         "phase": "serving"},
    ]  # fmt: skip


def test_a_compile_event_file_that_cannot_be_written_never_raises(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MOEPERF_COMPILE_EVENTS_DIR", str(tmp_path / "file" / "sub"))  # below a file: no directory
    reg = CollectorRegistry()
    inst = RankInstruments(dict(LABELS), 0, 1, Metrics(reg), CollectiveClock(), None)
    inst.on_compile(CompileEvent("m.k", "key", 0.5, 0.4, False, False, 0.0))
    assert value(reg, "moeperf_triton_compiles_total", kernel="m.k", during="startup") == 1


def test_no_compile_event_file_without_the_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MOEPERF_COMPILE_EVENTS_DIR", raising=False)
    inst = RankInstruments(dict(LABELS), 0, 1, Metrics(CollectorRegistry()), CollectiveClock(), None)
    assert inst.compile_log is None
