"""GPU time of each model step, from CUDA events on the step's stream, read when the GPU has passed them.

Why: the host times a step (``moeperf_rank_step_seconds``) from ``execute_model`` to ``sample_tokens``, and
with vLLM's asynchronous scheduling the host runs ahead of the GPU. On the H200, two engines of one setting
ran the same tokens in the same number of iterations, and one's iterations were 10% slower; the host step
times alone cannot say whether the GPU or the host made the difference. An event recorded when a step
begins and one when it ends bound the GPU's work for that step: the GPU reaches the first after the
previous step's work and the second after this one's. Between them it ran this step's kernels, plus any
gaps while it waited for the host to launch more. Nothing here waits for the GPU: events are polled with
``query()`` and read once passed, so a step's value arrives a few steps later.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

MAX_PENDING = 256
"""Steps whose end the GPU has not reached yet; beyond this the oldest are dropped (a GPU that far behind is
already obvious from the host side)."""


class GpuStepTimer:
    """One rank's CUDA event pairs, recycled; ``observe(phase, seconds)`` gets each step's GPU time."""

    def __init__(self, observe: Callable[[str, float], None], torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module
        self._torch = torch_module
        self.observe = observe
        self._pending: deque[tuple[Any, Any, str]] = deque()
        self._free: list[Any] = []
        self._open: Any = None

    def _event(self) -> Any:
        return self._free.pop() if self._free else self._torch.cuda.Event(enable_timing=True)

    def begin(self) -> None:
        ev = self._event()
        ev.record()
        self._open = ev

    def end(self, phase: str) -> None:
        start, self._open = self._open, None
        if start is None:
            return
        ev = self._event()
        ev.record()
        self._pending.append((start, ev, phase))
        if len(self._pending) > MAX_PENDING:
            a, b, _ = self._pending.popleft()
            self._free += (a, b)
        self.drain()

    def drain(self) -> None:
        """Observe every step, oldest first, whose end event the GPU has passed."""
        while self._pending and self._pending[0][1].query():
            a, b, phase = self._pending.popleft()
            self.observe(phase, a.elapsed_time(b) / 1000.0)  # elapsed_time is in ms
            self._free += (a, b)
