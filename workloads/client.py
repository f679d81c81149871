"""Streaming OpenAI-compatible client that replays a schedule and times every token.

"When to send" comes from the schedule (absolute offsets from a common start, slept to by
``workloads.pacing``); "how many in flight" is a separate cap. The dispatcher only sleeps and
hands each request to a task of its own, so a slow server shows up as latency and as send lag
in the records, never as a silently stretched schedule. Reading the answers is ``workloads.sse``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from workloads.health import HealthProbe
from workloads.pacing import ReplayClock, sleep_until
from workloads.prompts import request_prompt_ids
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest
from workloads.sse import classify_error, stream_completion
from workloads.timer import PreciseTimer

NOT_SENT_ENGINE_DOWN = "not sent: engine unreachable"


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
    precise_timer: bool = True  # wake for each send on a timer thread (µs), not asyncio's 1 ms epoll timers
    spin_s: float = 0.0  # then yield-spin this long before each send (for an idle, dedicated core)
    connection_limit: int | None = None  # pool size; null: max_in_flight, else unbounded


def _payload(s: ClientSettings, req: PlannedRequest) -> dict[str, Any]:
    return {
        "model": s.model,
        "prompt": request_prompt_ids(req.index, req.prompt_tokens, req.shared_blocks, s.vocab_lo, s.vocab_hi, s.seed),
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def _record(req: PlannedRequest, s: ClientSettings, intended_s: float, sent_s: float | None) -> RequestRecord:
    return RequestRecord(
        index=req.index,
        arm=s.arm,
        round=s.round,
        client=s.client,
        intended_send_s=intended_s,
        actual_send_s=sent_s,
        prompt_tokens_requested=req.prompt_tokens,
        output_tokens_requested=req.max_tokens,
    )


def _chains(requests: Sequence[PlannedRequest]) -> tuple[list[PlannedRequest], dict[int, list[PlannedRequest]]]:
    """Requests the dispatcher sends on time (in time order), and what each request's end releases."""
    indices = {r.index for r in requests}
    followers: dict[int, list[PlannedRequest]] = defaultdict(list)
    roots: list[PlannedRequest] = []
    for r in requests:
        if r.after_index is not None and r.after_index in indices:
            followers[r.after_index].append(r)
        else:
            roots.append(r)
    roots.sort(key=lambda r: r.send_offset_s)
    return roots, followers


def _session(s: ClientSettings) -> aiohttp.ClientSession:
    pool = s.connection_limit if s.connection_limit is not None else (s.max_in_flight or 0)
    connector = aiohttp.TCPConnector(limit=pool, limit_per_host=0, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=s.request_timeout_s))


class _Replay:
    """One replay on one event loop: the dispatcher, the requests in flight, the records they end as.

    Every planned request ends as exactly one record in ``done``: finished, failed, or never sent.
    """

    def __init__(
        self,
        requests: Sequence[PlannedRequest],
        settings: ClientSettings,
        clock: ReplayClock,
        session: aiohttp.ClientSession,
        timer: PreciseTimer | None,
    ) -> None:
        self.s, self.clock, self.session, self.timer = settings, clock, session, timer
        self.url = f"{settings.base_url}/v1/completions"
        self.roots, self.followers = _chains(requests)
        self.done: asyncio.Queue[RequestRecord] = asyncio.Queue()
        self.finished: list[RequestRecord] = []
        self.engine_down = asyncio.Event()  # set on the first refused connection: stop sending
        self.limit = asyncio.Semaphore(settings.max_in_flight) if settings.max_in_flight else None
        self.tasks: set[asyncio.Task[None]] = set()

    # --- when to send ----------------------------------------------------------------------------
    async def dispatch(self) -> None:
        """The send loop: sleep to each request's time and hand it to a task; never wait on a response."""
        s, clock, timer = self.s, self.clock, self.timer
        for req in self.roots:
            payload = _payload(s, req)  # built before its time, so building it adds no lag
            await sleep_until(clock, req.send_offset_s, s.spin_s, timer)
            if self.engine_down.is_set():
                await self._not_sent(req, req.send_offset_s)
                continue
            self._spawn(self._send(req, req.send_offset_s, payload))

    async def _send_chained(self, req: PlannedRequest, intended_s: float) -> None:
        payload = _payload(self.s, req)
        await sleep_until(self.clock, intended_s, self.s.spin_s, self.timer)
        self._spawn(self._send(req, intended_s, payload))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

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
    async def _send(self, req: PlannedRequest, intended_s: float, payload: dict[str, Any]) -> None:
        cap_wait_s = await self._take_slot()
        if self.engine_down.is_set():
            self._free_slot()
            await self._not_sent(req, intended_s)
            return
        rec = _record(req, self.s, intended_s, self.clock.now_s())
        rec.cap_wait_s = cap_wait_s
        try:
            await stream_completion(self.session, self.url, rec, payload, self.clock)
        except Exception as e:  # an error is a record, never a crash
            rec.error_kind, rec.error = classify_error(e)
            rec.end_s = self.clock.now_s()
            if rec.error_kind == "connect":
                self.engine_down.set()
        finally:
            self._free_slot()
        await self._finish(rec)

    async def _not_sent(self, req: PlannedRequest, intended_s: float) -> None:
        rec = _record(req, self.s, intended_s, None)
        rec.error, rec.error_kind = NOT_SENT_ENGINE_DOWN, "not_sent"
        await self._finish(rec)

    async def _finish(self, rec: RequestRecord) -> None:
        """Hand the record out and release what was waiting for this request to end."""
        self.finished.append(rec)
        await self.done.put(rec)
        end_s = rec.end_s if rec.end_s is not None else self.clock.now_s()
        for f in self.followers.pop(rec.index, ()):
            self._spawn(self._send_chained(f, end_s + f.think_time_s))

    async def cancel(self, dispatcher: asyncio.Task[None]) -> None:
        dispatcher.cancel()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(dispatcher, *self.tasks, return_exceptions=True)


async def replay(
    requests: Sequence[PlannedRequest],
    settings: ClientSettings,
    start_epoch_s: float,
    health: HealthProbe | None = None,
) -> AsyncIterator[RequestRecord]:
    """Send every request at its intended time; yield each record as its response finishes.

    Every planned request yields exactly one record: finished, failed, or never sent (when the
    engine stopped accepting connections, sending the rest would only measure a dead socket).
    A request chained to another (``after_index``) is sent ``think_time_s`` after that one ends.
    Pass a ``HealthProbe`` to get this client's event-loop lag and CPU when the replay ends.
    """
    clock = ReplayClock(start_epoch_s)
    async with _session(settings) as session:
        timer = PreciseTimer(asyncio.get_running_loop()) if settings.precise_timer else None
        run = _Replay(requests, settings, clock, session, timer)
        if health is not None:
            health.start()
        dispatcher = asyncio.create_task(run.dispatch())
        try:
            for _ in range(len(requests)):
                yield await run.done.get()
        finally:
            await run.cancel(dispatcher)
            if timer is not None:
                timer.close()
            if health is not None:
                await health.stop(run.finished)
