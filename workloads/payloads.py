"""Request bodies built ahead of their send time, on a thread of their own, as the bytes that go on the wire.

Building an 8,000-token prompt and serialising it costs about a millisecond of CPU. Done on the loop that
sends, at the send time, a burst of such requests goes out one build after another (8 simultaneous
2,000-token prompts on an H200 host: 20-28 ms of p99 dispatch lag). Here a ``BodyProducer`` thread builds
each body (``completion_body``: model, token-id prompt, max_tokens, ignore_eos, stream options, compact JSON
bytes) in the order the dispatcher will want them, a bounded window ahead; the dispatcher only takes a
finished ``bytes`` at the send time. Prompts never depend on responses, so chained requests (closed loop,
multi-turn) are built ahead too.

The window is bounded by count and by bytes (``ahead_count``, ``ahead_bytes``): a million-request schedule's
bodies never sit in memory, nor its requests as objects: the producer reads the shard's columns
(``ScheduleColumns``), keeps its bookkeeping by position in numpy arrays, and makes each request's
``PlannedRequest`` only to build its body. A body taken before it is built (the producer fell behind) is
built next, ahead of the window, and handed over as a future: the loop waits for it without building
anything, and the wait shows as send lag, which is honest; ``PayloadStats.late`` counts such requests.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads.prompts import ids_json, request_prompt_array
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns, as_columns

DEFAULT_AHEAD_COUNT = 2048
DEFAULT_AHEAD_BYTES = 64 << 20  # 1,600 bodies of 8,000 tokens of a 150k vocabulary
_PROMPT_MARK = "\0moeperf-prompt\0"
_PROMPT_MARK_JSON = json.dumps(_PROMPT_MARK).encode()


def completion_fields(model: str, max_tokens: int, prompt: Any) -> dict[str, Any]:
    """The one definition of a request's JSON object (both the dict the inline path posts and the bytes)."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


@dataclass(frozen=True)
class BodySpec:
    """What, besides the request itself, a body depends on."""

    model: str
    vocab_lo: int
    vocab_hi: int
    seed: int = 0


def completion_body(spec: BodySpec, req: PlannedRequest) -> bytes:
    """``json.dumps(completion_fields(...), separators=(",", ":")).encode()`` with the request's token-id
    prompt, byte for byte, without a Python list of ids: the small fields go through ``json.dumps``, the
    ids through ``prompts.ids_json``."""
    head, tail = _frame(spec.model, req.max_tokens)
    ids = request_prompt_array(req.index, req.prompt_tokens, req.shared_blocks, spec.vocab_lo, spec.vocab_hi, spec.seed)
    return b"".join((head, ids_json(ids, spec.vocab_hi), tail))


def _frame(model: str, max_tokens: int) -> tuple[bytes, bytes]:
    """The body's text before and after the ids, brackets included."""
    text = json.dumps(completion_fields(model, max_tokens, _PROMPT_MARK), separators=(",", ":")).encode()
    head, sep, tail = text.partition(_PROMPT_MARK_JSON)
    if not sep or _PROMPT_MARK_JSON in tail:
        raise ValueError(f"model name {model!r} holds the prompt marker")
    return head + b"[", b"]" + tail


def build_order(requests: ScheduleColumns | Sequence[PlannedRequest]) -> list[PlannedRequest]:
    """``build_order_positions`` as the requests themselves (for small schedules and tests)."""
    cols = as_columns(requests)
    return [cols.request(int(p)) for p in build_order_positions(cols)]


def build_order_positions(requests: ScheduleColumns) -> np.ndarray:
    """Positions of the requests in the order they are expected to be sent: by their earliest possible send
    time, then by depth in their chain, then by index. A chained request can go no earlier than its root's
    offset plus the think times on the way (responses take time, so it usually goes later); a closed loop
    with no think time thus builds every user's first request, then every user's second, and so on."""
    top, depth, think_s = requests.chain_depths()
    earliest_s = requests.send_offset_s[top] + think_s
    return np.lexsort((requests.index, depth, earliest_s))


@dataclass
class PayloadStats:
    """How the bodies of one replay were made; filled in while it runs (read it after)."""

    mode: str = "ahead"
    built: int = 0  # bodies the producer built
    late: int = 0  # requests whose body was not ready at their send time (the wait is in their send lag)
    demanded: int = 0  # bodies taken before the producer reached them (built out of turn)
    max_ready: int = 0  # most bodies built and not yet taken at once
    max_ready_bytes: int = 0
    build_s: float = 0.0  # thread CPU time spent building
    threads: set[int] = field(default_factory=set)  # threading.get_ident() of every thread that built a body
    loop_thread: int | None = None  # the thread of the loop that sent


class BodyProducer:
    """One thread that builds bodies a bounded window ahead of the dispatcher; ``take`` is the loop's side.

    The thread builds, in ``build_order``, while fewer than ``ahead_count`` built bodies (and fewer than
    ``ahead_bytes`` of them) wait to be taken; a take frees room. A body wanted before it is built jumps
    the queue (and the window: otherwise a window full of later requests could hold up an earlier one).
    Nothing here blocks the loop for longer than a dict operation under a lock the thread holds only
    between builds.
    """

    def __init__(
        self,
        requests: ScheduleColumns | Sequence[PlannedRequest],
        build: Callable[[PlannedRequest], bytes],
        loop: asyncio.AbstractEventLoop,
        ahead_count: int = DEFAULT_AHEAD_COUNT,
        ahead_bytes: int = DEFAULT_AHEAD_BYTES,
        stats: PayloadStats | None = None,
    ) -> None:
        if ahead_count < 1 or ahead_bytes < 1:
            raise ValueError("the window must hold at least one body")
        self._requests, self._build, self._loop = as_columns(requests), build, loop
        self._ahead_count, self._ahead_bytes = ahead_count, ahead_bytes
        self.stats = stats if stats is not None else PayloadStats()
        self._cv = threading.Condition()
        # Everything below is by position in the shard, not by request index.
        self._order: np.ndarray | None = None  # computed on the thread: a million-request sort takes a while
        self._next = 0
        self._claimed = np.zeros(len(self._requests), dtype=bool)  # built, being built, or demanded and queued
        self._ready: dict[int, bytes | Exception] = {}  # an exception: that request's build failed
        self._ready_bytes = 0
        self._waiters: dict[int, asyncio.Future[bytes]] = {}
        self._demand: deque[int] = deque()
        self._by_index: tuple[np.ndarray, np.ndarray] | None = None  # (sorted indices, their positions), on demand
        self._error: BaseException | None = None
        self._closed = False
        self._primed = asyncio.Event()
        self._primed_sent = False  # the thread's own note that it asked the loop to set _primed
        self._thread = threading.Thread(target=self._run, name="moeperf-body-producer", daemon=True)

    def start(self) -> None:
        self.stats.loop_thread = threading.get_ident()
        self._thread.start()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=5.0)

    async def primed(self) -> None:
        """Returns once the first window is built (or every body, or the producer failed)."""
        await self._primed.wait()

    # --- the loop's side -------------------------------------------------------------------------------
    def take(self, req: PlannedRequest, position: int | None = None) -> bytes | asyncio.Future[bytes]:
        """The request's body if built (it leaves the window), else a future the thread completes.
        ``position``: the request's position in the shard (the replay knows it; else it is looked up)."""
        pos = self._position(req.index) if position is None else position
        with self._cv:
            if self._error is not None:
                raise RuntimeError(f"building request bodies failed: {self._error!r}") from self._error
            body = self._ready.pop(pos, None)
            if isinstance(body, Exception):  # always raised by the request's own task, built yet or not
                self._cv.notify()
                failed: asyncio.Future[bytes] = self._loop.create_future()
                failed.set_exception(body)
                return failed
            if body is not None:
                self._ready_bytes -= len(body)
                self._cv.notify()
                return body
            if pos in self._waiters:
                raise RuntimeError(f"request #{req.index}: body taken twice")
            fut: asyncio.Future[bytes] = self._loop.create_future()
            self._waiters[pos] = fut
            if not self._claimed[pos]:
                self._claimed[pos] = True
                self._demand.append(pos)
                self.stats.demanded += 1
                self._cv.notify()
            return fut

    def _position(self, index: int) -> int:
        if self._by_index is None:
            order = np.argsort(self._requests.index, kind="stable")
            self._by_index = (self._requests.index[order], order)
        keys, positions = self._by_index
        k = int(np.searchsorted(keys, index))
        if k == len(keys) or keys[k] != index:
            raise KeyError(f"request #{index} is not in this replay")
        return int(positions[k])

    # --- the thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            order = build_order_positions(self._requests)
            with self._cv:
                self._order = order
            while (pos := self._next_to_build()) is not None:
                t = time.thread_time()
                try:
                    body: bytes | Exception = self._build(self._requests.request(pos))
                except Exception as e:  # that request cannot be built: it fails when it is sent, the rest go on
                    body = e
                self.stats.build_s += time.thread_time() - t
                self._deliver(pos, body)
        except BaseException as e:  # noqa: BLE001 - handed to the loop: the producer itself broke
            self._fail(e)

    def _next_to_build(self) -> int | None:
        with self._cv:
            while not self._closed:
                if self._demand:
                    return self._demand.popleft()
                assert self._order is not None
                while self._next < len(self._order) and self._claimed[self._order[self._next]]:
                    self._next += 1
                if self._next == len(self._order):
                    self._set_primed()
                    self._cv.wait()
                    continue
                if len(self._ready) >= self._ahead_count or self._ready_bytes >= self._ahead_bytes:
                    self._set_primed()
                    self._cv.wait()
                    continue
                pos = int(self._order[self._next])
                self._claimed[pos] = True
                self._next += 1
                return pos
            return None

    def _deliver(self, pos: int, body: bytes | Exception) -> None:
        with self._cv:
            self.stats.built += 1
            self.stats.threads.add(threading.get_ident())
            fut = self._waiters.pop(pos, None)
            if fut is None:
                self._ready[pos] = body
                self._ready_bytes += len(body) if isinstance(body, bytes) else 0
                self.stats.max_ready = max(self.stats.max_ready, len(self._ready))
                self.stats.max_ready_bytes = max(self.stats.max_ready_bytes, self._ready_bytes)
                return
        if isinstance(body, Exception):
            self._call(_set_exception, fut, body)
        else:
            self._call(_set_result, fut, body)

    def _fail(self, e: BaseException) -> None:
        with self._cv:
            self._error = e
            waiters, self._waiters = list(self._waiters.values()), {}
        for fut in waiters:
            self._call(_set_exception, fut, RuntimeError(f"building request bodies failed: {e!r}"))
        self._set_primed()

    def _set_primed(self) -> None:
        if not self._primed_sent:
            self._primed_sent = True
            self._call(self._primed.set)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed under us: nobody is waiting any more
            pass


def _set_result(fut: asyncio.Future[bytes], body: bytes) -> None:
    if not fut.done():
        fut.set_result(body)


def _set_exception(fut: asyncio.Future[bytes], e: BaseException) -> None:
    if not fut.done():
        fut.set_exception(e)
