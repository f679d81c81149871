"""Wake an asyncio loop at a precise time without spinning.

asyncio's timers wake up to 1 ms late (epoll takes whole milliseconds, rounded up). Spinning on
the loop for the last millisecond fixes that on an idle core, but on a shared one a spinning
client burns the CPU time the server (or another client) needs, and the OS scheduler then
favours processes that sleep.

On Linux the loop watches a ``timerfd`` (armed, with an absolute CLOCK_MONOTONIC deadline, at the
earliest time asked for): the kernel's microsecond timer makes it readable and epoll wakes at once,
with no thread. Elsewhere one thread per loop sleeps on a condition variable's timed wait and hands
each deadline over with ``call_soon_threadsafe``. The thread was the only timer until 2026-12: on one
core it costs two thread switches and two hand-overs of the GIL per send, which at 2,000 sends a second
was a measurable share of the client's CPU and of its lag (``bench/client_levels_bench.py``).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import sys
import threading
import time

CLOCK_MONOTONIC = 1  # time.perf_counter's clock on Linux
TFD_NONBLOCK, TFD_CLOEXEC, TFD_TIMER_ABSTIME = os.O_NONBLOCK, os.O_CLOEXEC, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class _Deadlines:
    """The futures waiting for a time, earliest first."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def push(self, perf_counter_s: float, fut: asyncio.Future[None]) -> bool:
        """Add one; True when it is now the earliest."""
        heapq.heappush(self.heap, (perf_counter_s, next(self._ids), fut))
        return self.heap[0][2] is fut

    def wake_due(self, now_s: float) -> None:
        while self.heap and self.heap[0][0] <= now_s:
            _wake(heapq.heappop(self.heap)[2])


class _TimerFdTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL) -> None:
        self._loop, self._libc = loop, libc
        self._deadlines = _Deadlines()
        self._fd = libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self._fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._spec = _Itimerspec()
        loop.add_reader(self._fd, self._fired)

    def at(self, perf_counter_s: float) -> asyncio.Future[None]:
        """A future done at ``time.perf_counter() >= perf_counter_s`` (never earlier)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        if self._deadlines.push(perf_counter_s, fut):
            self._arm(perf_counter_s)
        return fut

    def _arm(self, perf_counter_s: float) -> None:
        sec = int(perf_counter_s)
        nsec = int((perf_counter_s - sec) * 1e9) + 1  # rounded up: never wake before the deadline
        if nsec >= 1_000_000_000:
            sec, nsec = sec + 1, nsec - 1_000_000_000
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = sec, nsec  # never 0, 0 (that disarms)
        if self._libc.timerfd_settime(self._fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed since it fired: nothing to read, the deadlines decide
            pass
        self._deadlines.wake_due(time.perf_counter())
        if self._deadlines.heap:
            self._arm(self._deadlines.heap[0][0])

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1


class _ThreadTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._cv = threading.Condition()
        self._deadlines = _Deadlines()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="moeperf-precise-timer", daemon=True)
        self._thread.start()

    def at(self, perf_counter_s: float) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        with self._cv:
            self._deadlines.push(perf_counter_s, fut)
            self._cv.notify()
        return fut

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        heap = self._deadlines.heap
        with self._cv:
            while not self._closed:
                if not heap:
                    self._cv.wait()
                    continue
                delay = heap[0][0] - time.perf_counter()
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                _, _, fut = heapq.heappop(heap)
                try:
                    self._loop.call_soon_threadsafe(_wake, fut)
                except RuntimeError:  # the loop closed under us
                    return


def default_kind() -> str:
    """The timer ``PreciseTimer`` uses on this machine unless told: "timerfd" or "thread"."""
    return "timerfd" if _LIBC is not None else "thread"


class PreciseTimer:
    """``at(t)``: a future done once ``time.perf_counter() >= t``; a timerfd on Linux, else a thread.

    ``kind`` forces one ("timerfd" or "thread"), for tests and for the benchmark's before/after."""

    def __init__(self, loop: asyncio.AbstractEventLoop, kind: str | None = None) -> None:
        use_fd = kind == "timerfd" or (kind is None and _LIBC is not None)
        if use_fd and _LIBC is None:
            raise OSError("timerfd is not available on this platform")
        self.kind = "timerfd" if use_fd else "thread"
        self._impl: _TimerFdTimer | _ThreadTimer = (
            _TimerFdTimer(loop, _LIBC) if use_fd and _LIBC is not None else _ThreadTimer(loop)
        )

    def at(self, perf_counter_s: float) -> asyncio.Future[None]:
        return self._impl.at(perf_counter_s)

    def close(self) -> None:
        self._impl.close()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
