"""Streaming OpenAI-compatible client that replays a schedule and times every token.

"When to send" comes from the schedule (absolute offsets from a common start); "how many in
flight" is a separate cap. The dispatcher sleeps to each intended time, so a slow server shows
up as latency and as send lag in the records, never as a silently stretched schedule.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import aiohttp

from workloads.prompts import prompt_token_ids
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest

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


class _Clock:
    """Maps a shared wall-clock epoch onto this process's monotonic clock once, at construction."""

    def __init__(self, start_epoch_s: float) -> None:
        self._t0 = time.perf_counter() + (start_epoch_s - time.time())

    def now_s(self) -> float:
        return time.perf_counter() - self._t0


async def _stream_one(
    session: aiohttp.ClientSession, s: ClientSettings, req: PlannedRequest, clock: _Clock, sent_s: float
) -> RequestRecord:
    payload = {
        "model": s.model,
        "prompt": prompt_token_ids(req.index, req.prompt_tokens, s.vocab_lo, s.vocab_hi, s.seed),
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    rec = RequestRecord(
        index=req.index,
        arm=s.arm,
        intended_send_s=req.send_offset_s,
        actual_send_s=sent_s,
        prompt_tokens_requested=req.prompt_tokens,
        output_tokens_requested=req.max_tokens,
    )
    seen_tokens = 0
    async with session.post(f"{s.base_url}/v1/completions", json=payload) as resp:
        if resp.status != 200:
            body = (await resp.text())[:300]
            rec.error = f"HTTP {resp.status}: {body}"
            rec.end_s = clock.now_s()
            return rec
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = clock.now_s()
            chunk = json.loads(data)
            usage = chunk.get("usage") or {}
            if "completion_tokens" in usage:
                new_tokens = usage["completion_tokens"] - seen_tokens
                rec.prompt_tokens = usage.get("prompt_tokens")
                rec.output_tokens = usage["completion_tokens"]
            else:  # a server without continuous usage stats: one token per content chunk
                new_tokens = 1 if chunk.get("choices") else 0
            if new_tokens > 0:
                if rec.first_token_s is None:
                    rec.first_token_s = now
                rec.token_times_s.extend([now] * new_tokens)
                seen_tokens += new_tokens
    rec.end_s = clock.now_s()
    if rec.output_tokens is None:
        rec.output_tokens = seen_tokens
    return rec


async def replay(
    requests: Sequence[PlannedRequest], settings: ClientSettings, start_epoch_s: float
) -> AsyncIterator[RequestRecord]:
    """Send every request at its intended time; yield each record as its response finishes.

    Every planned request yields exactly one record: finished, failed, or never sent (when the
    engine stopped accepting connections, sending the rest would only measure a dead socket).
    """
    clock = _Clock(start_epoch_s)
    done: asyncio.Queue[RequestRecord] = asyncio.Queue()
    engine_down = asyncio.Event()
    limit = asyncio.Semaphore(settings.max_in_flight) if settings.max_in_flight else None
    connector = aiohttp.TCPConnector(limit=settings.max_in_flight or 0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def run_one(req: PlannedRequest) -> None:
            sent_s = clock.now_s()
            try:
                rec = await _stream_one(session, settings, req, clock, sent_s)
            except aiohttp.ClientConnectorError as e:
                engine_down.set()
                rec = _failed(req, settings, clock, sent_s, f"connect failed: {e}")
            except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as e:
                rec = _failed(req, settings, clock, sent_s, f"{type(e).__name__}: {e}")
            finally:
                if limit is not None:
                    limit.release()
            await done.put(rec)

        async def dispatch() -> None:
            tasks = []
            for req in requests:
                delay = req.send_offset_s - clock.now_s()
                if delay > 0:
                    await asyncio.sleep(delay)
                if limit is not None:
                    await limit.acquire()
                if engine_down.is_set():
                    if limit is not None:
                        limit.release()
                    await done.put(_not_sent(req, settings))
                    continue
                tasks.append(asyncio.create_task(run_one(req)))
            await asyncio.gather(*tasks)

        dispatcher = asyncio.create_task(dispatch())
        try:
            for _ in range(len(requests)):
                yield await done.get()
        finally:
            dispatcher.cancel()
            await asyncio.gather(dispatcher, return_exceptions=True)


def _failed(req: PlannedRequest, s: ClientSettings, clock: _Clock, sent_s: float, error: str) -> RequestRecord:
    return RequestRecord(
        index=req.index,
        arm=s.arm,
        intended_send_s=req.send_offset_s,
        actual_send_s=sent_s,
        end_s=clock.now_s(),
        prompt_tokens_requested=req.prompt_tokens,
        output_tokens_requested=req.max_tokens,
        error=error,
    )


def _not_sent(req: PlannedRequest, s: ClientSettings) -> RequestRecord:
    return RequestRecord(
        index=req.index,
        arm=s.arm,
        intended_send_s=req.send_offset_s,
        actual_send_s=None,
        prompt_tokens_requested=req.prompt_tokens,
        output_tokens_requested=req.max_tokens,
        error=NOT_SENT_ENGINE_DOWN,
    )
