"""Reading one streamed completion: the SSE events, the time of every token, and what went wrong.

The stream is read as raw bytes (one read may hold several events) and each read is timed once.
Token counts come from vLLM's per-chunk usage, so a chunk of k tokens adds its time k times;
fields of the record are set once at the end, because pydantic attribute writes are not free
at high rates and all of this runs on the loop that also sends.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from workloads.http1 import ConnectFailed, Http1Pool
from workloads.pacing import ReplayClock
from workloads.records import ErrorKind

HTTP_BODY_CHARS = 300


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
        """One read of the body, which arrived at ``now_s``; a line cut by the read waits for the next.

        Every event of the read is decoded in one call (as one JSON array): they share the read's time, and
        one call per read instead of one per event is most of what reading a stream costs."""
        buf = self._pending + data if self._pending else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._pending = buf
            return
        self._pending = buf[cut + 1 :]
        events = [line[5:].strip() for line in buf[:cut].split(b"\n") if line.startswith(b"data:")]
        if b"[DONE]" in events:
            self.done = True
            events = [e for e in events if e != b"[DONE]"]
        if not events:
            return
        added = 0
        for chunk in _chunks(events):
            usage = chunk.usage
            if usage is not None and usage.completion_tokens is not None:  # cumulative usage: exact counts
                new_tokens = usage.completion_tokens - self.seen_tokens
                self.prompt_tokens, self.usage_tokens = usage.prompt_tokens, usage.completion_tokens
            else:  # no per-chunk usage: a chunk may hold several tokens, so counts are not exact
                new_tokens = 1 if chunk.choices else 0
                self.exact = self.exact and new_tokens == 0
            if new_tokens > 0:
                added += new_tokens
                self.seen_tokens += new_tokens
        if added:
            self.times.extend([now_s] * added)

    def fields(self, end_s: float) -> dict[str, Any]:
        """What was read, as the record's fields."""
        return {
            "token_times_s": self.times,
            "first_token_s": self.times[0] if self.times else None,
            "prompt_tokens": self.prompt_tokens,
            "tokens_exact": self.exact,
            "output_tokens": self.usage_tokens if self.usage_tokens is not None else self.seen_tokens,
            "end_s": end_s,
        }


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    """The fields of a completion chunk the client reads; the rest are skipped by the decoder, unparsed."""

    choices: list[msgspec.Raw] | None = None
    usage: _Usage | None = None
    error: Any = None  # decoded only when present, which is rare


_CHUNK_DECODER = msgspec.json.Decoder(_Chunk)  # about 1 µs an event, against about 10 µs for json.loads


_CHUNKS_DECODER = msgspec.json.Decoder(list[_Chunk])


def _chunks(events: list[bytes]) -> list[_Chunk]:
    """The events of one read, decoded in one call; on a failure, one by one, to name the event at fault."""
    try:
        chunks = _CHUNKS_DECODER.decode(b"[" + b",".join(events) + b"]")
    except msgspec.DecodeError:
        chunks = [_chunk(e) for e in events]
    for chunk in chunks:
        if chunk.error is not None:
            raise StreamError("http", f"error in stream: {str(chunk.error)[:200]}")
    return chunks


def _chunk(event: bytes) -> _Chunk:
    try:
        return _CHUNK_DECODER.decode(event)
    except msgspec.DecodeError as e:  # not JSON, not an object, or a field of the wrong type
        raise StreamError("bad_sse", f"bad SSE data {event[:80]!r}: {e}") from None


class Exchange:
    """One request's send time, status and token times, before they become a record.

    The record (a pydantic model, about 7 µs to build) is made after the answer, so nothing but the write
    stands between a request's send time and its bytes leaving."""

    __slots__ = ("sent_s", "status", "tokens")

    def __init__(self) -> None:
        self.sent_s: float | None = None
        self.status: int | None = None
        self.tokens = _TokenTimes()


async def stream_completion(
    pool: Http1Pool,
    path: str,
    exchange: Exchange,
    payload: bytes | dict[str, Any],
    clock: ReplayClock,
    timeout_s: float | None = None,
) -> float:
    """POST ``payload`` and time the streamed answer into ``exchange``; returns its end time, raises on failure.

    Bytes are a prebuilt JSON body, posted as they are; a dict (the inline path) is serialised here, on the
    loop. The send time is stamped just before the write."""
    tokens = exchange.tokens
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    exchange.sent_s = clock.now_s()
    status, error_body = await pool.post(path, body, lambda data: tokens.feed(data, clock.now_s()), timeout_s)
    exchange.status = status
    if status != 200:
        text = error_body.decode("utf-8", "replace")[:HTTP_BODY_CHARS]
        raise StreamError("http", f"HTTP {status}: {text}")
    if not tokens.done:
        raise StreamError("reset", "stream closed before [DONE]")
    return clock.now_s()


def classify_error(e: BaseException) -> tuple[ErrorKind, str]:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, StreamError):
        return e.kind, str(e)
    if isinstance(e, ConnectFailed):
        return "connect", f"connect failed: {e}"
    if isinstance(e, TimeoutError):
        return "timeout", text
    if isinstance(e, ConnectionError):  # closed or reset mid-answer, or an answer that broke HTTP framing
        return "reset", text
    return "other", text
