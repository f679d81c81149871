"""Cross-rank synchronisation stall, from what each rank measures alone plus a shared-memory ring.

Every step of a tensor-parallel engine ends in lock-step: the collectives inside the forward make
each rank wait for the slowest. A rank cannot tell from its own clock whether its time in a
collective was transfer or waiting, but the ranks together can: per step, the rank that spent the
least time in collectives waited least, so ``stall_r = collective_r - min_k collective_k`` is how
long rank r waited for the slowest rank, and ``skew = max_k busy_k - min_k busy_k`` (busy = step time
outside collectives) is the imbalance itself, and the rank with the most busy time is the one that gated the
step (every other rank waited for it). Ranks of one engine run on one node, so they exchange
their per-step numbers through a small memory-mapped file instead of an extra collective (which
would add a synchronisation point to every step). A rank resolves a step once every rank has written
it, usually one step later; nothing waits for it.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ROW = struct.Struct("<dddd")  # step id + 1 (0 = empty), enter time, busy seconds, collective seconds
SLOTS = 256


class CollectiveClock:
    """Accumulates host seconds spent inside collectives; nested calls count once (outermost only)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0

    def take(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self
        compiling = _compile_probe()

        def timed(*args: Any, **kwargs: Any) -> Any:
            # While torch.compile traces the model (vLLM's default, fullgraph) a host timer is untraceable and
            # fails the engine's start; the traced call becomes vLLM's collective custom op, whose runtime body
            # (_all_reduce_out_place, ...) is wrapped too and timed whenever it runs outside a CUDA graph.
            if compiling() or clock._depth:
                return fn(*args, **kwargs)
            clock._depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - t0
                clock._depth = 0

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        timed.__moeperf_timed__ = True  # type: ignore[attr-defined]
        return timed


def _compile_probe() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (Dynamo folds it to True while tracing), or never when torch is absent."""
    try:
        import torch
    except ImportError:
        return lambda: False
    return torch.compiler.is_compiling


COLLECTIVE_METHODS = (
    "all_reduce",
    "_all_reduce_out_place",
    "all_gather",
    "_all_gather_out_place",
    "all_gatherv",
    "reduce_scatter",
    "_reduce_scatter_out_place",
    "reduce_scatterv",
    "gather",
    "broadcast",
    "broadcast_object",
    "broadcast_tensor_dict",
    "barrier",
)


def time_collectives(cls: Any, clock: CollectiveClock) -> list[str]:
    """Wrap the collective methods ``cls`` has (vLLM's GroupCoordinator); returns those wrapped."""
    wrapped = []
    for name in COLLECTIVE_METHODS:
        fn = cls.__dict__.get(name)
        if fn is None or getattr(fn, "__moeperf_timed__", False):
            continue
        setattr(cls, name, clock.wrap(fn))
        wrapped.append(name)
    return wrapped


def ring_path(key: str, world_size: int) -> str:
    """One file per engine and TP group, named from something all its ranks share (the init method)."""
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"moeperf-sync-{digest}-w{world_size}.ring")


@dataclass(frozen=True)
class StepSync:
    step: int
    stall_s: float  # this rank's
    skew_s: float
    gating_rank: int = 0  # the rank with the most busy time: the one the others waited for (lowest on a tie)


class SyncRing:
    def __init__(self, path: str, world_size: int, rank: int, slots: int = SLOTS) -> None:
        self.path, self.world, self.rank, self.slots = path, world_size, rank, slots
        size = slots * world_size * _ROW.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._pending: deque[int] = deque()
        self._slot = struct.Struct(f"<{4 * world_size}d")  # one step: every rank's row, read in one call

    def _off(self, step: int, rank: int) -> int:
        return ((step % self.slots) * self.world + rank) * _ROW.size

    def write(self, step: int, enter_s: float, busy_s: float, collective_s: float) -> None:
        off = self._off(step, self.rank)
        self._mm[off + 8 : off + _ROW.size] = struct.pack("<ddd", enter_s, busy_s, collective_s)
        self._mm[off : off + 8] = struct.pack("<d", float(step + 1))  # marker last: readers see whole rows
        self._pending.append(step)

    def _rows(self, step: int) -> list[tuple[float, float, float]] | None | bool:
        """The step's rows, None if some rank has not written it yet, False if it was overwritten."""
        flat = self._slot.unpack_from(self._mm, (step % self.slots) * self._slot.size)
        want = step + 1
        markers = flat[0::4]
        if max(markers) > want:
            return False
        if min(markers) < want:
            return None
        return list(zip(flat[1::4], flat[2::4], flat[3::4], strict=True))

    def resolve(self) -> list[StepSync]:
        """Steps of this rank whose rows every rank has written, oldest first."""
        out = []
        while self._pending:
            step = self._pending[0]
            rows = self._rows(step)
            if rows is None:
                if len(self._pending) < self.slots // 2:
                    break
                rows = False  # a rank stopped writing (e.g. died): give up on this step
            self._pending.popleft()
            if rows is False or rows is True:
                continue
            colls = [c for _, _, c in rows]
            busys = [b for _, b, _ in rows]
            slowest = busys.index(max(busys))
            out.append(StepSync(step, max(0.0, colls[self.rank] - min(colls)), max(busys) - min(busys), slowest))
        return out

    def close(self, unlink: bool = False) -> None:
        self._mm.close()
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
