"""Reading the device expert counts back to the host, rarely and without stalling a step, into Prometheus.

Why this shape:

- Never a host sync on the step path. At most every ``period_s`` the step's own thread, between steps, queues a
  non-blocking copy of the whole buffer (pinned host memory on a GPU) on the stream the steps run on, and records
  an event: the copy is ordered after the forward passes already queued, so it is a consistent snapshot at a
  step boundary (every layer saw the same tokens). A daemon thread publishes a snapshot once its event is done.
- Nothing stays unpublished once the engine goes idle: when no step ran since the last copy was queued and none
  is open, the thread queues the copy itself (on the saved stream) and waits for it; no step is waiting then.
- No CUDA call from the thread before serving starts: vLLM captures its CUDA graphs at start-up, and a
  concurrent call on another thread could invalidate a capture. Counts start at the rank's first served step
  (the buffer is zeroed then), so start-up routing (profiling, warm-up, capture) is never exported.
- Publishing writes only the (layer, expert) counters that grew (prometheus_client's multiprocess values are
  mmap writes), on the thread, never on the step path.
- Whoever reads a window must know the counter is complete: the first step after a full publish sets an
  "unpublished" flag (one gauge write per publish period, not per step), and the publish that covers every step
  served clears it, under the same lock. The harness waits for 0 on every rank before and after a replay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from moe_opt.plugin.expert_load import DeviceCounts, MoeLayer

logger = logging.getLogger(__name__)

PERIOD_S = 5.0
"""How often a snapshot is queued while serving: the lag of the Prometheus counter behind the device. Each publish
holds the engine process's GIL for one increment per counter that grew (12 ms for 6,144, ``expert_publish_cost``;
30 ms, at most 127 ms, before 2026-12-03); once a second that was 3% of the step loop's process, every 5 s it is
0.2%. The harness does not wait for the period: an idle rank publishes within ``IDLE_S + TICK_S``."""

IDLE_S = 0.05
"""A rank with no step for this long since its last one ended is idle: the thread then copies the counts itself."""
TICK_S = 0.05
"""How often the thread looks: the lag of the counter behind an idle rank."""

Publish = Callable[[int, int, int], None]
"""(row of the layer, expert id, tokens added since the last publish)."""
SetUnpublished = Callable[[bool], None]


def counter_publish(metric: Any, label_values: tuple[str, ...], layers: list[MoeLayer]) -> Publish:
    """``Publish`` into the per-expert counter: one child per (layer, expert), made once, so a publish is only
    increments. The spare column (ids out of range) is not an expert and is never published."""
    children = [
        [metric.labels(*label_values, str(layer.number), str(e)) for e in range(layer.num_experts)] for layer in layers
    ]

    def publish(row: int, expert: int, tokens: int) -> None:
        if expert < len(children[row]):
            children[row][expert].inc(tokens)

    return publish


"""True when a step runs after everything was published; False when a publish covers every step served."""


class Harvester:
    def __init__(
        self,
        counts: DeviceCounts,
        publish: Publish,
        period_s: float = PERIOD_S,
        unpublished: SetUnpublished | None = None,
        idle_s: float = IDLE_S,
    ) -> None:
        self.counts = counts
        self.publish = publish
        self.period_s, self.idle_s = period_s, idle_s
        self._set_unpublished = unpublished or (lambda _: None)
        self._dirty = False
        self._last_end_s = 0.0
        self._cuda = counts.device.type == "cuda"
        shape, dtype = counts.counts.shape, torch.int64
        self._host = torch.zeros(shape, dtype=dtype, pin_memory=self._cuda)
        self._published = torch.zeros(shape, dtype=dtype)
        self._lock = threading.Lock()
        self._event: Any = None  # CUDA event of the queued copy; None on CPU (the copy is synchronous there)
        self._pending = False
        self._stream: Any = None  # the stream the steps run on, saved by the step thread
        self._open = False
        self._serving = False
        self._steps_since_copy = 0
        self._last_copy_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----- step thread --------------------------------------------------------------------------------------
    def begin(self, real_tokens: int | None) -> None:
        """Before a step's forward: reset on the first served step, mask padding, maybe queue a snapshot."""
        now = time.monotonic()
        with self._lock:
            self._open = True
            if not self._dirty:
                self._dirty = True
                self._set_unpublished(True)
            if not self._serving:  # the first served step: nothing before it is worth a copy
                self.counts.reset()
                self._serving = True
                self._last_copy_s = now
                if self._cuda:
                    self._stream = torch.cuda.current_stream(self.counts.device)
            elif not self._pending and now - self._last_copy_s >= self.period_s:
                if self._cuda:  # the stream this thread queues steps on: the thread's copies go there too
                    self._stream = torch.cuda.current_stream(self.counts.device)
                self._queue_copy(now)
            if real_tokens is not None and real_tokens > 0:
                self.counts.set_real_tokens(real_tokens)
            self._steps_since_copy += 1

    def end(self) -> None:
        with self._lock:
            self._open = False
            self._last_end_s = time.monotonic()

    def _queue_copy(self, now: float) -> None:
        """Queue the device-to-host copy of the buffer on the steps' stream (holding the lock)."""
        if self._cuda:
            if self._stream is None:
                self._stream = torch.cuda.current_stream(self.counts.device)
            with torch.cuda.stream(self._stream):
                self._host.copy_(self.counts.counts, non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record(self._stream)
        else:
            self._host.copy_(self.counts.counts)
        self._pending = True
        self._steps_since_copy = 0
        self._last_copy_s = now

    # ----- publishing (the thread, or a test) ------------------------------------------------------------------
    def harvest(self) -> bool:
        """Publish a finished snapshot; when the rank is idle, queue one first. True if one was published."""
        with self._lock:
            if not self._serving:
                return False
            if not self._pending:
                now = time.monotonic()
                if self._open or self._steps_since_copy == 0 or now - self._last_end_s < self.idle_s:
                    return False
                self._queue_copy(now)  # idle: no step is waiting for the device
            event = self._event
        if event is not None and not event.query():
            return False  # not copied yet: the next round publishes it
        with self._lock:
            snapshot = self._host.clone()
            self._pending = False
        self._publish(snapshot)
        with self._lock:  # complete only if no step began since the copy was queued
            if self._dirty and not self._pending and not self._open and self._steps_since_copy == 0:
                self._dirty = False
                self._set_unpublished(False)
        return True

    def _publish(self, snapshot: torch.Tensor) -> None:
        # One conversion to Python ints, then plain loops: indexing the tensor per (layer, expert) made a publish of
        # 6,144 counters take 30 ms on a CPU core, this 12 ms (the rest is prometheus_client's own inc), all of it
        # holding the GIL of the engine's process, whose step loop wants it back.
        delta = (snapshot - self._published).tolist()
        self._published = snapshot
        for row, grown in enumerate(delta):
            for expert, tokens in enumerate(grown):
                if tokens > 0:
                    self.publish(row, expert, tokens)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.harvest()
            except Exception:  # noqa: BLE001 - an observation must never stop the engine
                logger.exception("moeperf: expert-load harvest failed")

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="moeperf-expert-load", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
