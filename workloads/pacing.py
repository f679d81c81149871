"""When to send: the run's shared clock and a sleep that wakes at an exact time of it.

asyncio's timers wake up to 1 ms late (epoll takes whole milliseconds, rounded up), so the
dispatcher sleeps coarsely to 2 ms before each intended time and lets a timer thread
(``workloads.timer``) wake it at the exact time: sub-millisecond send lag without spinning.
"""

from __future__ import annotations

import asyncio
import time

from workloads.timer import PreciseTimer

COARSE_MARGIN_S = 0.002


class ReplayClock:
    """Maps a shared wall-clock epoch onto this process's monotonic clock once, at construction.

    Client actors on different nodes agree on the epoch (the common start); inside one actor
    every time is then read from ``perf_counter``, which no clock adjustment can move.
    """

    def __init__(self, start_epoch_s: float) -> None:
        self._t0 = time.perf_counter() + (start_epoch_s - time.time())

    def now_s(self) -> float:
        return time.perf_counter() - self._t0

    def perf_s(self, t_s: float) -> float:
        """A time of this clock on time.perf_counter()."""
        return t_s + self._t0


async def sleep_until(clock: ReplayClock, t_s: float, spin_s: float, timer: PreciseTimer | None = None) -> None:
    """Coarse asyncio sleep to 2 ms before ``t_s``, then the precise timer (or a spin) for the rest."""
    delay = t_s - clock.now_s()
    if delay > COARSE_MARGIN_S:
        await asyncio.sleep(delay - COARSE_MARGIN_S)
    if timer is not None and t_s > clock.now_s() + spin_s:
        await timer.at(clock.perf_s(t_s - spin_s))
    while clock.now_s() < t_s:
        await asyncio.sleep(0)
