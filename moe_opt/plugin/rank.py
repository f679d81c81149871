"""The instruments of one worker rank: what happens at the start and end of every model step.

Kept free of vLLM imports (hooks.py feeds it) so the step logic is testable with plain objects.
Hot-path cost per step: two perf_counter reads, a walk over the requests still in prefill, a few
pre-bound histogram observations and one 32-byte write into the shared ring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from moe_opt.plugin.buffered import Buffer, BufferedCounter
from moe_opt.plugin.compile_log import CompileEventLog, Phase
from moe_opt.plugin.gpu_steps import GpuStepTimer
from moe_opt.plugin.metrics import (
    FUSED_MOE_LAUNCHES,
    GATED_MIN_SKEW_S,
    GPU_STEP_SECONDS,
    MOE_BACKEND_LAYERS,
    MOE_CONFIG_LOOKUPS,
    STEPS_GATED,
    STEPS_GATED_SECONDS,
    Metrics,
)
from moe_opt.plugin.settings import RankDelay
from moe_opt.plugin.steps import PrefillTracker, StepPlan
from moe_opt.plugin.sync import CollectiveClock, SyncRing

logger = logging.getLogger(__name__)


class RankInstruments:
    def __init__(
        self,
        labels: dict[str, str],
        rank: int,
        world_size: int,
        metrics: Metrics,
        clock: CollectiveClock,
        ring: SyncRing | None,
        delay: RankDelay | None = None,
        buffer: Buffer | None = None,
        compile_log: CompileEventLog | None = None,
        gpu_steps: bool = False,
    ) -> None:
        """``compile_log`` None: from ``MOEPERF_COMPILE_EVENTS_DIR`` of this worker, if set (see compile_log.py)."""
        self.buffer = buf = buffer if buffer is not None else Buffer()
        self.labels, self.rank, self.world = labels, rank, world_size
        self.metrics, self.clock, self.ring = metrics, clock, ring
        self.delay_s = delay.seconds if delay is not None and delay.rank == rank else 0.0
        lv = tuple(labels.values())
        self._ttft = buf.histogram(metrics.get("moeperf_rank_ttft_seconds").labels(*lv))
        step = metrics.get("moeperf_rank_step_seconds")
        self._step = {p: buf.histogram(step.labels(*lv, p)) for p in ("prefill", "decode", "mixed")}
        self._stall = buf.histogram(metrics.get("moeperf_rank_sync_stall_seconds").labels(*lv))
        self._coll = buf.counter(metrics.get("moeperf_rank_collective_seconds_total").labels(*lv))
        self._overhead = buf.counter(metrics.get("moeperf_plugin_overhead_seconds_total").labels(*lv))
        self._begin_s = 0.0
        self._skew = (
            buf.histogram(
                metrics.get("moeperf_step_skew_seconds").labels(labels["engine"], labels["arm"], labels["node"])
            )
            if rank == 0
            else None
        )
        # rank 0 names the gating rank of each slow step; one child per rank exists from the start, at 0
        engine_lv = (labels["engine"], labels["arm"], labels["node"])
        self._gated = (
            [
                (
                    buf.counter(metrics.get(STEPS_GATED).labels(*engine_lv, str(r))),
                    buf.counter(metrics.get(STEPS_GATED_SECONDS).labels(*engine_lv, str(r))),
                )
                for r in range(max(1, world_size))
            ]
            if rank == 0
            else None
        )
        self._launches: dict[tuple[bool, int], BufferedCounter] = {}
        self._lookups: dict[tuple[str, str], BufferedCounter] = {}
        self.tracker = PrefillTracker()
        self.step_index = -1
        self.served_steps = 0
        self._open: tuple[float, StepPlan] | None = None
        # gpu_steps (a CUDA device): the GPU time of each step too, as moe_opt/plugin/gpu_steps.py says
        self.gpu_timer: GpuStepTimer | None = None
        if gpu_steps:
            gpu_step = metrics.get(GPU_STEP_SECONDS)
            self._gpu_step = {p: buf.histogram(gpu_step.labels(*lv, p)) for p in ("prefill", "decode", "mixed")}
            self.gpu_timer = GpuStepTimer(lambda phase, seconds: self._gpu_step[phase].observe(seconds))
        self.compile_log = compile_log if compile_log is not None else CompileEventLog.from_env(rank)

    # ----- steps ------------------------------------------------------------------------------------
    def begin(self, scheduler_output: Any) -> None:
        if self._open is not None:
            self.end()
        self.step_index += 1
        t0 = time.perf_counter()
        self.clock.take()
        plan = self.tracker.plan(scheduler_output, t0)
        if plan.phase is None:
            return
        self._open = (t0, plan)
        if self.gpu_timer is not None:
            self._gpu_timer_call(self.gpu_timer.begin)
        self._begin_s = time.perf_counter() - t0
        if self.delay_s:
            time.sleep(self.delay_s)  # test-only: MOEPERF_TEST_RANK_DELAY

    @property
    def step_open(self) -> bool:
        return self._open is not None

    def end(self) -> None:
        if self._open is None:
            return
        t1 = time.perf_counter()
        t0, plan = self._open
        self._open = None
        coll = self.clock.take()
        wall = t1 - t0
        assert plan.phase is not None
        self._step[plan.phase].observe(wall)
        if self.gpu_timer is not None:
            self._gpu_timer_call(self.gpu_timer.end, plan.phase)
        for start in plan.completing:
            self._ttft.observe(t1 - start)
        if coll:
            self._coll.inc(coll)
        self.served_steps += 1
        if self.ring is None:
            self._stall.observe(0.0)
            if self._skew is not None:
                self._skew.observe(0.0)
        else:
            self.ring.write(self.step_index, t0, wall - coll, coll)
            for s in self.ring.resolve():
                self._stall.observe(s.stall_s)
                if self._skew is not None:
                    self._skew.observe(s.skew_s)
                if self._gated is not None and s.skew_s >= GATED_MIN_SKEW_S and s.gating_rank < len(self._gated):
                    steps, seconds = self._gated[s.gating_rank]
                    steps.inc(1.0)
                    seconds.inc(s.skew_s)
        self._overhead.inc(self._begin_s + time.perf_counter() - t1)

    def _gpu_timer_call(self, call: Callable[..., object], *args: str) -> None:
        """A failing event API turns the GPU step timer off, never the step."""
        try:
            call(*args)
        except Exception as e:  # noqa: BLE001
            logger.warning("moeperf: GPU step timing off (%s)", e)
            self.gpu_timer = None

    def flush(self) -> None:
        """Write buffered observations to prometheus_client now (hooks.py runs this every 0.5 s)."""
        self.buffer.flush()

    # ----- compilations ------------------------------------------------------------------------------
    def on_compile(self, event: Any) -> None:
        """CompileCounter.on_event: one Triton cache miss finished (compiled or loaded from disk)."""
        phase: Phase = "serving" if self.served_steps else "startup"
        try:
            lv = (*self.labels.values(), event.kernel, phase)
            name = "moeperf_triton_cache_hits_total" if event.cache_hit else "moeperf_triton_compiles_total"
            self.metrics.get(name).labels(*lv).inc()
            self.metrics.get("moeperf_triton_compile_seconds").labels(*lv).observe(event.wall_s)
        except Exception:  # noqa: BLE001 - an instrument must never break a kernel launch
            logger.exception("moeperf: could not record a Triton compile event")
        if self.compile_log is not None:
            try:
                self.compile_log.append(event, phase)
            except Exception:  # noqa: BLE001 - nor may its event file (full disk, directory removed)
                logger.exception("moeperf: could not append a Triton compile event to %s", self.compile_log.path)

    # ----- kernel choices (kernel_choices.py calls these from vLLM's MoE path) -------------------------
    def on_launch(self, swap_ab: bool, bucket: int) -> None:
        """One fused_moe_kernel launch: a dict lookup and a buffered add (the counter child is made once per key)."""
        c = self._launches.get((swap_ab, bucket))
        if c is None:
            lv = (*self.labels.values(), str(swap_ab).lower(), str(bucket))
            child = self.metrics.get(FUSED_MOE_LAUNCHES).labels(*lv)
            c = self._launches[(swap_ab, bucket)] = self.buffer.counter(child)
        c.inc(1)

    def on_config_lookup(self, config_file: str, source: str) -> None:
        c = self._lookups.get((config_file, source))
        if c is None:
            child = self.metrics.get(MOE_CONFIG_LOOKUPS).labels(*self.labels.values(), config_file, source)
            c = self._lookups[(config_file, source)] = self.buffer.counter(child)
        c.inc(1)

    def set_moe_backends(self, layers: dict[tuple[str, str], int]) -> None:
        gauge = self.metrics.get(MOE_BACKEND_LAYERS)
        for (backend, experts), n in layers.items():
            gauge.labels(*self.labels.values(), backend, experts).set(n)

    def set_gauge(self, name: str, value: float) -> None:
        self.metrics.get(name).labels(*self.labels.values()).set(value)

    def inc_counter(self, name: str, amount: float, extra: tuple[str, ...] = ()) -> None:
        """From a sampler thread, not the step path: unbuffered, a label lookup per call."""
        self.metrics.get(name).labels(*self.labels.values(), *extra).inc(amount)
