"""Streaming OpenAI-compatible client that replays a schedule and times every token.

"When to send" comes from the schedule (absolute offsets from a common start, slept to by
``workloads.pacing``); "how many in flight" is a separate cap. The dispatcher only sleeps and
hands each request to a task of its own, so a slow server shows up as latency and as send lag
in the records, never as a silently stretched schedule. Reading the answers is ``workloads.sse``.
Request bodies are built ahead, off the loop, by ``workloads.payloads.BodyProducer``: at its send
time a request only needs its finished bytes, so a burst of long prompts goes out at once.

A replay always ends: an exception in the dispatcher or in a request's task ends it with a
``ReplayFailed`` (after the records finished so far), and a replay still running at its deadline
(``replay_deadline_s``) ends with ``ReplayDeadlineExceeded``. Either way the caller sees why.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from workloads.health import HealthProbe, LagSummary
from workloads.http1 import Http1Pool, auth_headers
from workloads.pacing import ReplayClock, sleep_until
from workloads.payloads import (
    DEFAULT_AHEAD_BYTES,
    DEFAULT_AHEAD_COUNT,
    BodyProducer,
    BodySpec,
    PayloadStats,
    completion_body,
    completion_fields,
)
from workloads.prompts import request_prompt_ids
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns, as_columns, most_within
from workloads.sse import Exchange, classify_error, stream_completion
from workloads.timer import PreciseTimer

NOT_SENT_ENGINE_DOWN = "not sent: engine unreachable"
COMPLETIONS_PATH = "/v1/completions"
OPEN_AHEAD_WINDOW_S = 0.05
MAX_OPEN_AHEAD = 1024

DEADLINE_MARGIN_S = 30.0
"""Slack on top of the worst case ``replay_deadline_s`` computes: event-loop lag, connection set-up, a slow
read of the last chunk. Small against the request timeout, large against any healthy replay's overrun."""


class ReplayError(RuntimeError):
    """A replay that could not finish; the message is the reason its arm fails with."""


class ReplayFailed(ReplayError):
    """The dispatcher or a request's task raised: a bug, or a schedule the client cannot build a request from."""


class ReplayDeadlineExceeded(ReplayError):
    """The replay was still running at its deadline; what had finished was handed out, the rest cancelled."""


class InjectedDispatchFault(RuntimeError):
    """Raised by the dispatcher on purpose (``ClientSettings.fail_dispatch_after_records``): tests only."""


@dataclass(frozen=True)
class ClientSettings:
    base_url: str
    model: str
    arm: str
    vocab_lo: int
    vocab_hi: int
    seed: int = 0
    max_in_flight: int | None = None
    request_timeout_s: float = 600.0
    client: int = 0  # stamped on records: which shard sent them
    round: int = 0  # stamped on records: which round of the experiment
    level: int | None = None  # stamped on records: which sweep level (None: no sweep)
    precise_timer: bool = True  # wake for each send on a timer thread (µs), not asyncio's 1 ms epoll timers
    spin_s: float = 0.0  # then yield-spin this long before each send (for an idle, dedicated core)
    connection_limit: int | None = None  # pool size; null: max_in_flight, else unbounded
    # Seconds after the common start at which the replay is cancelled (see replay_deadline_s); None: never.
    deadline_s: float | None = None
    # "ahead": bodies built as bytes on a producer thread, a window ahead (workloads.payloads); "inline": each
    # request's dict built on the loop just before its sleep and serialised by aiohttp at its send (the client
    # before 2026-12; kept for bench/client_levels_bench.py's before/after only).
    payloads: Literal["ahead", "inline"] = "ahead"
    bodies_ahead: int = DEFAULT_AHEAD_COUNT  # most built bodies waiting to be taken ...
    bodies_ahead_bytes: int = DEFAULT_AHEAD_BYTES  # ... and most bytes of them: the producer's memory bound
    # TEST ONLY (cluster.orchestration.fault_injection): once this many records are finished, the dispatcher
    # raises InjectedDispatchFault instead of sending the next request. None in every real run.
    fail_dispatch_after_records: int | None = None
    # Sent as "Authorization: Bearer <key>" on every request (cluster.engine.api_key); never in a repr or a log.
    api_key: str | None = field(default=None, repr=False)


def replay_deadline_s(
    requests: ScheduleColumns | Sequence[PlannedRequest], settings: ClientSettings, margin_s: float = DEADLINE_MARGIN_S
) -> float:
    """The latest a healthy replay of ``requests`` can end, in seconds after the common start, plus a margin.

    Every request ends within ``request_timeout_s`` of being sent (the session's total timeout), so a root
    request ends by its send offset plus the timeout, and a chained one by its predecessor's end plus think
    time plus the timeout. Under an in-flight cap of c, requests may also queue for a slot; with every
    slot holder done within the timeout, the queue drains by ceil(n / c) timeouts (Graham's list-scheduling
    bound). Anything still running past this is stuck, not slow.
    """
    timeout = settings.request_timeout_s
    cols = as_columns(requests)
    top, _, links_s = cols.chain_depths(timeout_s=timeout)  # per link: its think time and a timeout
    worst = float((cols.send_offset_s[top] + timeout + links_s).max()) if len(cols) else 0.0
    if settings.max_in_flight:
        worst += math.ceil(len(requests) / settings.max_in_flight) * timeout
    return worst + margin_s


def connections_to_open(roots: np.ndarray | ScheduleColumns | Sequence[PlannedRequest], s: ClientSettings) -> int:
    """Connections to open before the first send: the in-flight cap (a closed loop's concurrency), else the
    most sends due within any ``OPEN_AHEAD_WINDOW_S`` (a burst, or the first moments of a high rate); never
    more than the pool may hold or ``MAX_OPEN_AHEAD``. ``roots`` (or their send offsets) are in send order."""
    t = roots if isinstance(roots, np.ndarray) else as_columns(roots).send_offset_s
    if s.max_in_flight:
        want = min(s.max_in_flight, len(t))
    else:
        want = most_within(t, OPEN_AHEAD_WINDOW_S)
    if s.connection_limit is not None:
        want = min(want, s.connection_limit)
    return min(want, MAX_OPEN_AHEAD)


def _payload(s: ClientSettings, req: PlannedRequest) -> dict[str, Any]:
    """The request as a dict, its prompt a Python list: the inline path's body, and the reference the bytes
    ``completion_body`` builds are checked against."""
    ids = request_prompt_ids(req.index, req.prompt_tokens, req.shared_blocks, s.vocab_lo, s.vocab_hi, s.seed)
    return completion_fields(s.model, req.max_tokens, ids)


def _body_spec(s: ClientSettings) -> BodySpec:
    return BodySpec(model=s.model, vocab_lo=s.vocab_lo, vocab_hi=s.vocab_hi, seed=s.seed)


Body = bytes | dict[str, Any]  # finished bytes ("ahead"), or the inline path's dict, serialised at its send
PendingBody = Body | asyncio.Future[bytes]  # a future while the producer has not built it yet


def _record(req: PlannedRequest, s: ClientSettings, intended_s: float, **measured: Any) -> RequestRecord:
    """Built unvalidated (``model_construct``, a third of the cost): every field is the client's own value,
    of the declared type, and one record per request is made on the loop that sends."""
    return RequestRecord.model_construct(
        index=req.index,
        arm=s.arm,
        round=s.round,
        client=s.client,
        level=s.level,
        warmup=req.warmup,
        intended_send_s=intended_s,
        prompt_tokens_requested=req.prompt_tokens,
        output_tokens_requested=req.max_tokens,
        **measured,
    )


@dataclass(frozen=True)
class _Chains:
    """By position in the shard: the requests the dispatcher sends on time (in time order), and what each
    request's end releases (``followers[offsets[p]:offsets[p + 1]]``, in schedule order). Integer arrays, so
    a million-request shard holds no object per request until one is sent."""

    roots: np.ndarray
    followers: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, requests: ScheduleColumns) -> _Chains:
        parent = requests.parent_positions()  # a predecessor in another shard: sent on its own time
        roots = np.flatnonzero(parent < 0)
        roots = roots[np.argsort(requests.send_offset_s[roots], kind="stable")]
        chained = np.flatnonzero(parent >= 0)
        followers = chained[np.argsort(parent[chained], kind="stable")]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(parent[chained], minlength=len(requests)))])
        return cls(roots, followers, offsets.astype(np.int64))

    def of_request(self, position: int) -> np.ndarray:
        return self.followers[self.offsets[position] : self.offsets[position + 1]]


class _FinishedLags:
    """What the health probe reads of the finished records: how many, and their dispatch lags in fixed memory
    (``LagSummary``); a million-request replay must not grow by its records."""

    def __init__(self) -> None:
        self.count = 0
        self.dispatch_ms = LagSummary()

    def append(self, rec: RequestRecord) -> None:
        self.count += 1
        if (lag := rec.dispatch_lag_ms) is not None:
            self.dispatch_ms.add(lag)

    def __len__(self) -> int:
        return self.count


def _pool(s: ClientSettings) -> Http1Pool:
    limit = s.connection_limit if s.connection_limit is not None else s.max_in_flight
    return Http1Pool(s.base_url, limit=limit or None, headers=auth_headers(s.api_key))


class _Replay:
    """One replay on one event loop: the dispatcher, the requests in flight, the records they end as.

    Every planned request ends as exactly one record in ``done``: finished, failed, or never sent.
    """

    def __init__(
        self,
        requests: ScheduleColumns,
        settings: ClientSettings,
        clock: ReplayClock,
        pool: Http1Pool,
        timer: PreciseTimer | None,
        bodies: BodyProducer | None = None,
    ) -> None:
        self.s, self.clock, self.pool, self.timer = settings, clock, pool, timer
        self.bodies = bodies  # None: the inline path
        self.payload_stats = bodies.stats if bodies is not None else PayloadStats(mode="inline")
        self.requests = requests  # columns; a request becomes a PlannedRequest only when it is about to be sent
        self.chains = _Chains.of(requests)
        self.planned = len(requests)
        # Records as they finish, and at most one exception: the first a task of this replay raised.
        self.done: asyncio.Queue[RequestRecord | ReplayFailed] = asyncio.Queue()
        self.failed = False
        self.finished = _FinishedLags()  # what the health probe needs of them; the records go out through ``done``
        self.enough_finished = asyncio.Event()  # for the test-only injected fault
        self.engine_down = asyncio.Event()  # set on the first refused connection: stop sending
        self.limit = asyncio.Semaphore(settings.max_in_flight) if settings.max_in_flight else None
        self.tasks: set[asyncio.Task[None]] = set()

    # --- when to send ----------------------------------------------------------------------------
    async def dispatch(self) -> None:
        """The send loop: sleep to each request's time and hand it to a task; never wait on a response,
        nor on a body (a late one is awaited by its own task)."""
        s, clock, timer = self.s, self.clock, self.timer
        await self._prepare()
        roots = self.chains.roots
        for sent in range(len(roots)):  # by index into the array: no list of a million ints
            pos = int(roots[sent])
            if s.fail_dispatch_after_records is not None and sent >= s.fail_dispatch_after_records:
                if len(self.finished) < s.fail_dispatch_after_records:
                    await self.enough_finished.wait()  # those sent so far are on record: the test knows what to expect
                raise InjectedDispatchFault(f"injected dispatcher fault after {s.fail_dispatch_after_records} records")
            req = self.requests.request(pos)
            body = self._body(req, pos)
            await sleep_until(clock, req.send_offset_s, s.spin_s, timer)
            if self.engine_down.is_set():
                _drop(body)
                await self._not_sent(req, pos, req.send_offset_s)
                continue
            self._spawn(self._send(req, pos, req.send_offset_s, body), f"request #{req.index}")

    async def _prepare(self) -> None:
        """While nothing is due: let the producer fill its window and open the connections the start needs,
        for at most the time left before the first send."""
        roots_s = self.requests.send_offset_s[self.chains.roots]
        wait_s = float(roots_s[0]) - self.clock.now_s() if len(roots_s) else 0.0
        if wait_s <= 0:
            return
        jobs: list[Coroutine[Any, Any, Any]] = [self.pool.open(connections_to_open(roots_s, self.s))]
        if self.bodies is not None:
            jobs.append(self.bodies.primed())
        try:
            await asyncio.wait_for(asyncio.gather(*jobs), timeout=wait_s)
        except TimeoutError:
            pass

    async def _send_chained(self, req: PlannedRequest, pos: int, intended_s: float) -> None:
        body = self._body(req, pos)
        await sleep_until(self.clock, intended_s, self.s.spin_s, self.timer)
        self._spawn(self._send(req, pos, intended_s, body), f"request #{req.index}")

    def _body(self, req: PlannedRequest, pos: int) -> PendingBody:
        """Taken before the sleep: the producer has then until the send time to finish a body it is behind on.
        The inline path builds its dict here, on the loop (serialised at the send)."""
        if self.bodies is None:
            return _payload(self.s, req)
        return self.bodies.take(req, pos)

    def start(self) -> asyncio.Task[None]:
        return self._spawn(self.dispatch(), "the dispatcher")

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=what)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task that raised ends the replay: otherwise its request would never get a record and the
        reader would wait for it forever. Only the first exception is kept; the rest are its consequences."""
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved even when it is not the first, so asyncio does not warn about it
        if exc is not None and not self.failed:
            self.failed = True
            err = ReplayFailed(f"replay failed in {task.get_name()}: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            self.done.put_nowait(err)

    # --- how many in flight ----------------------------------------------------------------------
    async def _take_slot(self) -> float:
        """Wait for room under the in-flight cap; returns the wait, which is not the client's lag."""
        if self.limit is None:
            return 0.0
        if not self.limit.locked():
            await self.limit.acquire()
            return 0.0
        t = self.clock.now_s()  # queue behind the cap without holding up the dispatcher
        await self.limit.acquire()
        return self.clock.now_s() - t

    def _free_slot(self) -> None:
        if self.limit is not None:
            self.limit.release()

    # --- one request -----------------------------------------------------------------------------
    async def _send(self, req: PlannedRequest, pos: int, intended_s: float, pending: PendingBody) -> None:
        if isinstance(pending, asyncio.Future):
            if not pending.done():  # the producer is behind: wait (the wait is send lag), never build here
                self.payload_stats.late += 1
            body: Body = await pending
        else:
            body = pending
        cap_wait_s = await self._take_slot()
        if self.engine_down.is_set():
            self._free_slot()
            await self._not_sent(req, pos, intended_s)
            return
        exchange = Exchange()
        error: Exception | None = None
        try:
            end_s = await stream_completion(
                self.pool, COMPLETIONS_PATH, exchange, body, self.clock, self.s.request_timeout_s
            )
        except Exception as e:  # an error is a record, never a crash
            error, end_s = e, self.clock.now_s()
        finally:
            self._free_slot()
        # The record is built after the answer: nothing but the write stands before the send.
        measured: dict[str, Any] = {"cap_wait_s": cap_wait_s, "actual_send_s": exchange.sent_s}
        measured["http_status"] = exchange.status
        if error is None or exchange.tokens.times:  # a failed answer keeps the tokens that did arrive
            measured.update(exchange.tokens.fields(end_s))
        else:
            measured["end_s"] = end_s
        if error is not None:
            measured["error_kind"], measured["error"] = classify_error(error)
            if measured["error_kind"] == "connect":
                self.engine_down.set()
        rec = _record(req, self.s, intended_s, **measured)
        await self._finish(rec, pos)

    async def _not_sent(self, req: PlannedRequest, pos: int, intended_s: float) -> None:
        rec = _record(req, self.s, intended_s, actual_send_s=None, error=NOT_SENT_ENGINE_DOWN, error_kind="not_sent")
        await self._finish(rec, pos)

    async def _finish(self, rec: RequestRecord, pos: int) -> None:
        """Hand the record out and release what was waiting for this request to end."""
        self.finished.append(rec)
        if self.s.fail_dispatch_after_records is not None and len(self.finished) >= self.s.fail_dispatch_after_records:
            self.enough_finished.set()
        await self.done.put(rec)
        end_s = rec.end_s if rec.end_s is not None else self.clock.now_s()
        for f in self.chains.of_request(pos).tolist():  # every request ends once, so each follower goes once
            follower = self.requests.request(f)
            self._spawn(self._send_chained(follower, f, end_s + follower.think_time_s), f"request #{follower.index}")

    async def next_record(self) -> RequestRecord:
        """The next finished record; raises when a task failed or the deadline passed.

        Records that finished before either are handed out first (the queue keeps their order),
        so the caller keeps every one of them.
        """
        deadline_s = self.s.deadline_s
        if deadline_s is None or not self.done.empty():
            item = await self.done.get()
        else:
            try:
                item = await asyncio.wait_for(self.done.get(), timeout=max(0.0, deadline_s - self.clock.now_s()))
            except TimeoutError:
                unfinished = self.planned - len(self.finished)
                raise ReplayDeadlineExceeded(
                    f"replay deadline passed: still running {deadline_s:g} s after the start (schedule, "
                    f"request timeout {self.s.request_timeout_s:g} s and margin); {len(self.finished)} record(s) "
                    f"finished, {unfinished} request(s) cancelled or never sent"
                ) from None
        if isinstance(item, ReplayFailed):
            raise item
        return item

    async def cancel(self) -> None:
        if self.bodies is not None:
            self.bodies.close()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def replay(
    requests: ScheduleColumns | Sequence[PlannedRequest],
    settings: ClientSettings,
    start_epoch_s: float,
    health: HealthProbe | None = None,
    clock: ReplayClock | None = None,
    payload_stats: PayloadStats | None = None,
) -> AsyncIterator[RequestRecord]:
    """Send every request at its intended time; yield each record as its response finishes.

    Every planned request yields exactly one record: finished, failed, or never sent (when the
    engine stopped accepting connections, sending the rest would only measure a dead socket).
    A request chained to another (``after_index``) is sent ``think_time_s`` after that one ends.
    Pass a ``HealthProbe`` to get this client's event-loop lag and CPU when the replay ends.
    Raises ``ReplayFailed`` if a task of the replay raised and ``ReplayDeadlineExceeded`` at
    ``settings.deadline_s``, each after yielding the records finished before it. ``clock``: the
    replay's clock, by default ``ReplayClock(start_epoch_s)``; tests inject one to pass a deadline.
    Pass a ``PayloadStats`` to learn how the bodies were built (how many were late, on which threads).
    ``requests``: columns (a shard as the driver sends it), or a list of requests; either way a request is
    made an object only when it is about to be sent, and a record is kept only until it is handed out.
    """
    requests = as_columns(requests)
    clock = ReplayClock(start_epoch_s) if clock is None else clock
    pool = _pool(settings)
    try:
        loop = asyncio.get_running_loop()
        timer = PreciseTimer(loop) if settings.precise_timer else None
        bodies = None
        if settings.payloads == "ahead":
            spec = _body_spec(settings)
            bodies = BodyProducer(
                requests,
                lambda req: completion_body(spec, req),
                loop,
                ahead_count=settings.bodies_ahead,
                ahead_bytes=settings.bodies_ahead_bytes,
                stats=payload_stats if payload_stats is not None else PayloadStats(),
            )
            bodies.start()
        elif payload_stats is not None:
            payload_stats.mode = "inline"
        run = _Replay(requests, settings, clock, pool, timer, bodies)
        if health is not None:
            health.start()
        run.start()
        try:
            for _ in range(len(requests)):
                yield await run.next_record()
        finally:
            await run.cancel()  # also stops the body producer
            if timer is not None:
                timer.close()
            if health is not None:
                await health.stop(run.finished.count, run.finished.dispatch_ms)
    finally:
        pool.close()


def _drop(body: PendingBody) -> None:
    """A body that will not be sent: a pending one is cancelled, so a failed build is not reported as unretrieved."""
    if isinstance(body, asyncio.Future):
        body.cancel()
