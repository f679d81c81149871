"""Step-rate observations buffered in the process and written to prometheus_client in batches.

Why: in multiprocess mode every ``observe``/``inc`` of prometheus_client takes a lock, checks the pid
and writes an mmap'd file, a few microseconds each; a step makes several. Buffering turns that into
an append under an uncontended lock, and a daemon thread writes the accumulated bucket counts every
``period_s`` (0.5 s: far below any scrape interval), so the per-step cost stays well under 1 %.
Relies on prometheus_client's Histogram child layout (``_upper_bounds``, non-cumulative ``_buckets``,
``_sum``; stable since 0.4); a child without it is observed directly instead.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any


class _Hist:
    __slots__ = ("child", "bounds", "counts", "total")

    def __init__(self, child: Any) -> None:
        self.child, self.bounds = child, list(child._upper_bounds)
        self.counts = [0] * len(self.bounds)
        self.total = 0.0


class BufferedHistogram:
    def __init__(self, buffer: Buffer, child: Any) -> None:
        self._buffer = buffer
        direct = not all(hasattr(child, a) for a in ("_upper_bounds", "_buckets", "_sum"))
        self._h = None if direct else _Hist(child)
        self._child = child

    def observe(self, value: float) -> None:
        h = self._h
        if h is None:
            self._child.observe(value)
            return
        i = bisect_left(h.bounds, value)
        with self._buffer.lock:
            h.counts[i] += 1
            h.total += value
        self._buffer.dirty = True


class BufferedCounter:
    def __init__(self, buffer: Buffer, child: Any) -> None:
        self._buffer, self.child, self.pending = buffer, child, 0.0

    def inc(self, amount: float) -> None:
        with self._buffer.lock:
            self.pending += amount
        self._buffer.dirty = True


class Buffer:
    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self.lock = threading.Lock()
        self.dirty = False
        self._hists: list[BufferedHistogram] = []
        self._counters: list[BufferedCounter] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def histogram(self, child: Any) -> BufferedHistogram:
        b = BufferedHistogram(self, child)
        with self.lock:  # series are also added while serving (a new batch bucket), beside the flush thread
            self._hists.append(b)
        return b

    def counter(self, child: Any) -> BufferedCounter:
        c = BufferedCounter(self, child)
        with self.lock:
            self._counters.append(c)
        return c

    def flush(self) -> None:
        if not self.dirty:
            return
        todo: list[tuple[Any, list[int], float]] = []
        incs: list[tuple[Any, float]] = []
        with self.lock:
            self.dirty = False
            for b in self._hists:
                h = b._h
                if h is not None and any(h.counts):
                    todo.append((h.child, h.counts, h.total))
                    h.counts, h.total = [0] * len(h.bounds), 0.0
            for c in self._counters:
                if c.pending:
                    incs.append((c.child, c.pending))
                    c.pending = 0.0
        for child, counts, total in todo:
            child._sum.inc(total)
            for i, n in enumerate(counts):
                if n:
                    child._buckets[i].inc(n)
        for child, amount in incs:
            child.inc(amount)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="moeperf-metrics-flush", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        self.flush()
