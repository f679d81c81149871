"""Wake an asyncio loop at a precise time without spinning.

asyncio's timers wake up to 1 ms late (epoll takes whole milliseconds, rounded up). Spinning on
the loop for the last millisecond fixes that on an idle core, but on a shared one a spinning
client burns the CPU time the server (or another client) needs, and the OS scheduler then
favours processes that sleep. Here one thread per loop sleeps on the OS's microsecond timer
(a condition variable's timed wait) and hands each deadline to the loop with
``call_soon_threadsafe``, which wakes epoll at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time


class PreciseTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="moeperf-precise-timer", daemon=True)
        self._thread.start()

    def at(self, perf_counter_s: float) -> asyncio.Future[None]:
        """A future done at ``time.perf_counter() >= perf_counter_s`` (never earlier)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        with self._cv:
            heapq.heappush(self._heap, (perf_counter_s, next(self._ids), fut))
            self._cv.notify()
        return fut

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        with self._cv:
            while not self._closed:
                if not self._heap:
                    self._cv.wait()
                    continue
                due = self._heap[0][0]
                delay = due - time.perf_counter()
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                _, _, fut = heapq.heappop(self._heap)
                try:
                    self._loop.call_soon_threadsafe(_wake, fut)
                except RuntimeError:  # the loop closed under us
                    return


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
