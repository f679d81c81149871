"""Streaming OpenAI-compatible client that replays a schedule and times every token.

"When to send" comes from the schedule (absolute offsets from a common start); "how many in
flight" is a separate cap. The dispatcher sleeps to each intended time, so a slow server shows
up as latency and as send lag in the records, never as a silently stretched schedule.

asyncio's timers wake up to 1 ms late (epoll takes whole milliseconds, rounded up), so the
dispatcher sleeps coarsely to 2 ms before each intended time and lets a timer thread
(``workloads.timer``) wake it at the exact time: sub-millisecond send lag without spinning.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from workloads.health import HealthProbe
from workloads.prompts import request_prompt_ids
from workloads.records import ErrorKind, RequestRecord
from workloads.schedule import PlannedRequest
from workloads.timer import PreciseTimer

NOT_SENT_ENGINE_DOWN = "not sent: engine unreachable"
COARSE_MARGIN_S = 0.002


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


class _Clock:
    """Maps a shared wall-clock epoch onto this process's monotonic clock once, at construction."""

    def __init__(self, start_epoch_s: float) -> None:
        self._t0 = time.perf_counter() + (start_epoch_s - time.time())

    def now_s(self) -> float:
        return time.perf_counter() - self._t0

    def perf_s(self, t_s: float) -> float:
        """A time of this clock on time.perf_counter()."""
        return t_s + self._t0


async def sleep_until(clock: _Clock, t_s: float, spin_s: float, timer: PreciseTimer | None = None) -> None:
    """Coarse asyncio sleep to 2 ms before ``t_s``, then the precise timer (or a spin) for the rest."""
    delay = t_s - clock.now_s()
    if delay > COARSE_MARGIN_S:
        await asyncio.sleep(delay - COARSE_MARGIN_S)
    if timer is not None and t_s > clock.now_s() + spin_s:
        await timer.at(clock.perf_s(t_s - spin_s))
    while clock.now_s() < t_s:
        await asyncio.sleep(0)


class _StreamError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


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


async def _stream_one(
    session: aiohttp.ClientSession, s: ClientSettings, rec: RequestRecord, payload: dict[str, Any], clock: _Clock
) -> None:
    """Read the SSE stream as raw bytes (one read may hold several events) and time each read.

    Token counts come from per-chunk usage, so a chunk of k tokens adds k token times; fields of
    the record are set once at the end (pydantic attribute writes are not free at high rates).
    """
    times: list[float] = []
    seen_tokens, exact = 0, True
    prompt_tokens: int | None = None
    usage_tokens: int | None = None
    done = False
    async with session.post(f"{s.base_url}/v1/completions", json=payload) as resp:
        rec.http_status = resp.status
        if resp.status != 200:
            body = (await resp.text())[:300]
            raise _StreamError("http", f"HTTP {resp.status}: {body}")
        pending = b""
        async for data in resp.content.iter_any():  # read to the end of the body: the connection is reused
            now = clock.now_s()
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                event = line[5:].strip()
                if event == b"[DONE]":
                    done = True
                    continue
                try:
                    chunk = json.loads(event)
                except json.JSONDecodeError as e:
                    raise _StreamError("bad_sse", f"bad SSE data {event[:80]!r}: {e}") from None
                if not isinstance(chunk, dict):
                    raise _StreamError("bad_sse", f"bad SSE data {event[:80]!r}: not an object")
                if "error" in chunk:
                    raise _StreamError("http", f"error in stream: {str(chunk['error'])[:200]}")
                usage = chunk.get("usage") or {}
                if "completion_tokens" in usage:
                    new_tokens = usage["completion_tokens"] - seen_tokens
                    prompt_tokens, usage_tokens = usage.get("prompt_tokens"), usage["completion_tokens"]
                else:  # no per-chunk usage: a chunk may hold several tokens, so counts are not exact
                    new_tokens = 1 if chunk.get("choices") else 0
                    exact = exact and new_tokens == 0
                if new_tokens > 0:
                    times.extend([now] * new_tokens)
                    seen_tokens += new_tokens
    end_s = clock.now_s()
    rec.token_times_s = times
    rec.first_token_s = times[0] if times else None
    rec.prompt_tokens, rec.tokens_exact = prompt_tokens, exact
    rec.output_tokens = usage_tokens if usage_tokens is not None else seen_tokens
    if not done:
        rec.end_s = end_s
        raise _StreamError("reset", "stream closed before [DONE]")
    rec.end_s = end_s


def _classify(e: BaseException) -> tuple[ErrorKind, str]:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, _StreamError):
        return e.kind, str(e)
    if isinstance(e, aiohttp.ClientConnectorError):
        return "connect", f"connect failed: {e}"
    if isinstance(e, TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout", text
    if isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError):
        return "reset", text
    return "other", text


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
    s = settings
    clock = _Clock(start_epoch_s)
    done: asyncio.Queue[RequestRecord] = asyncio.Queue()
    engine_down = asyncio.Event()
    limit = asyncio.Semaphore(s.max_in_flight) if s.max_in_flight else None
    pool = s.connection_limit if s.connection_limit is not None else (s.max_in_flight or 0)
    connector = aiohttp.TCPConnector(limit=pool, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=s.request_timeout_s)
    indices = {r.index for r in requests}
    followers: dict[int, list[PlannedRequest]] = defaultdict(list)
    roots: list[PlannedRequest] = []
    for r in requests:
        if r.after_index is not None and r.after_index in indices:
            followers[r.after_index].append(r)
        else:
            roots.append(r)
    roots.sort(key=lambda r: r.send_offset_s)
    finished: list[RequestRecord] = []
    tasks: set[asyncio.Task[None]] = set()

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def finish(rec: RequestRecord) -> None:
            finished.append(rec)
            await done.put(rec)
            end_s = rec.end_s if rec.end_s is not None else clock.now_s()
            for f in followers.pop(rec.index, ()):
                spawn(send_chained(f, end_s + f.think_time_s))

        def spawn(coro: Coroutine[Any, Any, None]) -> None:
            task = asyncio.ensure_future(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        async def not_sent(req: PlannedRequest, intended_s: float) -> None:
            rec = _record(req, s, intended_s, None)
            rec.error, rec.error_kind = NOT_SENT_ENGINE_DOWN, "not_sent"
            await finish(rec)

        async def run_one(req: PlannedRequest, intended_s: float, payload: dict[str, Any]) -> None:
            cap_wait_s = 0.0
            if limit is not None:
                if limit.locked():  # queue behind the cap without holding up the dispatcher
                    t = clock.now_s()
                    await limit.acquire()
                    cap_wait_s = clock.now_s() - t
                else:
                    await limit.acquire()
            if engine_down.is_set():
                if limit is not None:
                    limit.release()
                await not_sent(req, intended_s)
                return
            rec = _record(req, s, intended_s, clock.now_s())
            rec.cap_wait_s = cap_wait_s
            try:
                await _stream_one(session, s, rec, payload, clock)
            except Exception as e:  # an error is a record, never a crash
                rec.error_kind, rec.error = _classify(e)
                rec.end_s = clock.now_s()
                if rec.error_kind == "connect":
                    engine_down.set()
            finally:
                if limit is not None:
                    limit.release()
            await finish(rec)

        async def send_chained(req: PlannedRequest, intended_s: float) -> None:
            payload = _payload(s, req)
            await sleep_until(clock, intended_s, s.spin_s, timer)
            spawn(run_one(req, intended_s, payload))

        async def dispatch() -> None:
            for req in roots:
                payload = _payload(s, req)  # built before its time, so building it adds no lag
                await sleep_until(clock, req.send_offset_s, s.spin_s, timer)
                if engine_down.is_set():
                    await not_sent(req, req.send_offset_s)
                    continue
                spawn(run_one(req, req.send_offset_s, payload))

        timer = PreciseTimer(asyncio.get_running_loop()) if s.precise_timer else None
        if health is not None:
            health.start()
        dispatcher = asyncio.create_task(dispatch())
        try:
            for _ in range(len(requests)):
                yield await done.get()
        finally:
            dispatcher.cancel()
            for t in list(tasks):
                t.cancel()
            await asyncio.gather(dispatcher, *tasks, return_exceptions=True)
            if timer is not None:
                timer.close()
            if health is not None:
                await health.stop(finished)
