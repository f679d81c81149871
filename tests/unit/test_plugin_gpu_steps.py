"""The GPU step timer: each step's time between its two events, observed in step order once the GPU has passed
them, never by waiting; and on a machine without CUDA the rank's steps go on without it."""

from __future__ import annotations

from types import SimpleNamespace as NS

import torch
from prometheus_client import CollectorRegistry

from moe_opt.plugin.gpu_steps import MAX_PENDING, GpuStepTimer
from moe_opt.plugin.metrics import Metrics
from moe_opt.plugin.rank import RankInstruments
from moe_opt.plugin.sync import CollectiveClock
from tests.unit.test_plugin_rank import LABELS, sched


class StreamClock:
    """Stands in for a CUDA stream: events complete in the order recorded, up to ``passed`` of them."""

    def __init__(self) -> None:
        self.recorded = 0
        self.passed = 0
        self.gpu_ms: dict[int, float] = {}  # event number -> when the GPU passed it
        self.cuda = NS(Event=self.event)

    def event(self, enable_timing: bool) -> NS:
        assert enable_timing
        ev = NS(n=None)

        def record() -> None:
            self.recorded += 1
            ev.n = self.recorded

        ev.record = record
        ev.query = lambda: ev.n is not None and ev.n <= self.passed
        ev.elapsed_time = lambda other: self.gpu_ms[other.n] - self.gpu_ms[ev.n]
        return ev


def test_steps_are_observed_in_order_once_passed_and_their_events_recycled():
    gpu = StreamClock()
    seen: list[tuple[str, float]] = []
    timer = GpuStepTimer(lambda phase, s: seen.append((phase, s)), torch_module=gpu)
    for phase in ("prefill", "decode", "decode"):
        timer.begin()
        timer.end(phase)
    assert seen == []  # the GPU has passed nothing yet: nothing is read, nothing waits
    gpu.gpu_ms = {1: 0.0, 2: 30.0, 3: 30.0, 4: 35.0, 5: 35.0, 6: 41.5}
    gpu.passed = 4  # through the second step's end
    timer.drain()
    assert seen == [("prefill", 0.030), ("decode", 0.005)]
    gpu.passed = 6
    timer.begin()  # a fourth step reuses the first step's events
    timer.end("mixed")
    assert seen[2] == ("decode", 0.0065)
    assert gpu.recorded == 8 and len(timer._free) == 4  # 6 events made, 2 of them recycled


def test_a_gpu_far_behind_drops_the_oldest_steps_instead_of_growing():
    gpu = StreamClock()
    timer = GpuStepTimer(lambda phase, s: None, torch_module=gpu)
    for _ in range(MAX_PENDING + 10):
        timer.begin()
        timer.end("decode")
    assert len(timer._pending) == MAX_PENDING


def test_without_cuda_the_rank_turns_the_timer_off_and_keeps_stepping():
    if torch.cuda.is_available():
        return  # here the events work: the GPU tests cover that path
    reg = CollectorRegistry()
    inst = RankInstruments(dict(LABELS), 0, 1, Metrics(reg), CollectiveClock(), None, gpu_steps=True)
    assert inst.gpu_timer is not None
    inst.begin(sched([NS(req_id="r", prompt_token_ids=[1, 2, 3], num_computed_tokens=0)], {"r": 3}))
    inst.end()
    inst.begin(sched(scheduled={"r": 1}))
    inst.end()
    inst.flush()
    assert inst.gpu_timer is None  # torch's CUDA events failed here; the timer went, the steps stayed
    assert reg.get_sample_value("moeperf_rank_step_seconds_count", {**LABELS, "phase": "decode"}) == 1
    assert reg.get_sample_value("moeperf_gpu_step_seconds_count", {**LABELS, "phase": "decode"}) == 0
