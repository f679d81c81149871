"""Reading one streamed completion: the SSE events, the time of every token, and what went wrong.

The stream is read as raw bytes (one read may hold several events) and each read is timed once.
Token counts come from vLLM's per-chunk usage, so a chunk of k tokens adds its time k times;
fields of the record are set once at the end, because pydantic attribute writes are not free
at high rates and all of this runs on the loop that also sends.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from workloads.pacing import ReplayClock
from workloads.records import ErrorKind, RequestRecord

HTTP_BODY_CHARS = 300
JSON_HEADERS = {"Content-Type": "application/json"}


class StreamError(Exception):
    """A failure the client recognised itself, with its class already decided."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _TokenTimes:
    """What the events of one response said so far: token times, usage, whether [DONE] came."""

    __slots__ = ("times", "seen_tokens", "exact", "prompt_tokens", "usage_tokens", "done", "_pending")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.seen_tokens, self.exact = 0, True
        self.prompt_tokens: int | None = None
        self.usage_tokens: int | None = None
        self.done = False
        self._pending = b""

    def feed(self, data: bytes, now_s: float) -> None:
        """One read of the body, which arrived at ``now_s``; a line cut by the read waits for the next."""
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), now_s)

    def _event(self, event: bytes, now_s: float) -> None:
        if event == b"[DONE]":
            self.done = True
            return
        chunk = _chunk(event)
        usage = chunk.get("usage") or {}
        if "completion_tokens" in usage:
            new_tokens = usage["completion_tokens"] - self.seen_tokens
            self.prompt_tokens, self.usage_tokens = usage.get("prompt_tokens"), usage["completion_tokens"]
        else:  # no per-chunk usage: a chunk may hold several tokens, so counts are not exact
            new_tokens = 1 if chunk.get("choices") else 0
            self.exact = self.exact and new_tokens == 0
        if new_tokens > 0:
            self.times.extend([now_s] * new_tokens)
            self.seen_tokens += new_tokens

    def fill(self, rec: RequestRecord, end_s: float) -> None:
        """Write what was read into the record; a stream that ended without [DONE] is a reset."""
        rec.token_times_s = self.times
        rec.first_token_s = self.times[0] if self.times else None
        rec.prompt_tokens, rec.tokens_exact = self.prompt_tokens, self.exact
        rec.output_tokens = self.usage_tokens if self.usage_tokens is not None else self.seen_tokens
        rec.end_s = end_s
        if not self.done:
            raise StreamError("reset", "stream closed before [DONE]")


def _chunk(event: bytes) -> dict[str, Any]:
    try:
        chunk = json.loads(event)
    except json.JSONDecodeError as e:
        raise StreamError("bad_sse", f"bad SSE data {event[:80]!r}: {e}") from None
    if not isinstance(chunk, dict):
        raise StreamError("bad_sse", f"bad SSE data {event[:80]!r}: not an object")
    if "error" in chunk:
        raise StreamError("http", f"error in stream: {str(chunk['error'])[:200]}")
    return chunk


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    rec: RequestRecord,
    payload: bytes | dict[str, Any],
    clock: ReplayClock,
) -> None:
    """POST ``payload`` and time the streamed answer into ``rec``; raises on any failure.

    A dict is serialised by aiohttp (``json=``); bytes are a prebuilt JSON body, posted as they are (``data=``
    with a JSON content type), so nothing is serialised on the loop."""
    tokens = _TokenTimes()
    post = (
        session.post(url, data=payload, headers=JSON_HEADERS)
        if isinstance(payload, bytes)
        else session.post(url, json=payload)
    )
    async with post as resp:
        rec.http_status = resp.status
        if resp.status != 200:
            body = (await resp.text())[:HTTP_BODY_CHARS]
            raise StreamError("http", f"HTTP {resp.status}: {body}")
        async for data in resp.content.iter_any():  # read to the end of the body: the connection is reused
            tokens.feed(data, clock.now_s())
    tokens.fill(rec, clock.now_s())


def classify_error(e: BaseException) -> tuple[ErrorKind, str]:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, StreamError):
        return e.kind, str(e)
    if isinstance(e, aiohttp.ClientConnectorError):
        return "connect", f"connect failed: {e}"
    if isinstance(e, TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout", text
    if isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError):
        return "reset", text
    return "other", text
