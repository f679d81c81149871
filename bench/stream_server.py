"""A fast OpenAI-compatible streaming server for measuring load generators, not engines.

It answers /v1/completions at once, streaming ``max_tokens`` tokens in chunks of
``--tokens-per-chunk`` with per-chunk usage (like vLLM with continuous usage stats), and logs,
per request, when its first byte arrived and when it wrote the first chunk, on CLOCK_MONOTONIC
(``time.perf_counter``, shared by every process on the machine). GET /log returns and clears
the log, so a benchmark can see each client's real send times and the server's own share of TTFT.

Why a bare ``asyncio.Protocol`` and not aiohttp's server: measured on one core, aiohttp's server cost about
400 µs per streamed request, so at 2,000 requests/s the server itself fell behind (TTFT 10-20 ms, a
thousand connections opened) and what was measured was the server. Here a request costs its parse and
one write of the whole pre-rendered answer (or one write per chunk with ``--chunk-gap-s``).

A token-id prompt is counted without parsing the body as JSON (``_lengths``): json.loads of an 8,000-id
list costs this one-core server about 0.3 ms per request, which in a burst of 64 would delay the later
answers by the server's own work, not the client's.

Run: ``python -m bench.stream_server --port 8999``; it prints ``READY <port>`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_PROMPT_LIST = re.compile(rb'"prompt"\s*:\s*\[')
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)

Log = list[tuple[float, float]]


def _lengths(raw: bytes) -> tuple[int, int]:
    """(prompt tokens, max_tokens) of a completion request. A prompt of token ids is counted by its commas
    (ids hold none); a text prompt (``vllm bench serve`` sends text) is parsed as JSON."""
    m = _PROMPT_LIST.search(raw)
    t = _MAX_TOKENS.search(raw)
    if m is None or t is None:
        body = json.loads(raw)
        prompt = body.get("prompt")
        n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt))
        return n_in, int(body.get("max_tokens") or 1)
    end = raw.index(b"]", m.end())
    n_in = raw.count(b",", m.end(), end) + 1 if raw[m.end() : end].strip() else 0
    return n_in, int(t.group(1)) or 1


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_events(n_in: int, n_out: int, tokens_per_chunk: int) -> list[bytes]:
    """The answer's SSE events, each already framed as an HTTP chunk; the last one ends the body."""
    events, done = [], 0
    while done < n_out:
        k = min(tokens_per_chunk, n_out - done)
        done += k
        chunk = {
            "choices": [{"index": 0, "text": "x" * k, "finish_reason": None}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": done, "total_tokens": n_in + done},
        }
        events.append(_chunked(b"data: " + json.dumps(chunk).encode() + b"\n\n"))
    usage = {"prompt_tokens": n_in, "completion_tokens": done, "total_tokens": n_in + done}
    events.append(_chunked(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"))
    events.append(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return events


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _json_answer(obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class _Server(asyncio.Protocol):
    """One client connection: requests in order, keep-alive, answered as soon as their body is in."""

    def __init__(self, log: Log, tokens_per_chunk: int, chunk_gap_s: float) -> None:
        self.log, self.per_chunk, self.gap_s = log, tokens_per_chunk, chunk_gap_s
        self.buf = b""
        self.first_byte_s: float | None = None
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a slow (gapped) answer is being written: later requests wait for it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.first_byte_s is None:
            self.first_byte_s = time.perf_counter()
        self.buf += data
        self._serve()

    def _serve(self) -> None:
        while not self.busy:
            eoh = self.buf.find(b"\r\n\r\n")
            if eoh < 0:
                return
            head = self.buf[: eoh + 2]
            m = _CONTENT_LENGTH.search(head)
            length = int(m.group(1)) if m else 0
            if len(self.buf) < eoh + 4 + length:
                return
            body = self.buf[eoh + 4 : eoh + 4 + length]
            self.buf = self.buf[eoh + 4 + length :]
            t_recv = self.first_byte_s if self.first_byte_s is not None else time.perf_counter()
            self.first_byte_s = time.perf_counter() if self.buf else None
            self._answer(head.split(b" ", 2), body, t_recv)

    def _answer(self, request_line: list[bytes], body: bytes, t_recv: float) -> None:
        assert self.transport is not None
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else b""
        if method == b"POST" and path == b"/v1/completions":
            events = sse_events(*_lengths(body), self.per_chunk)
            if self.gap_s:
                self.busy = True
                asyncio.get_running_loop().create_task(self._gapped(events, t_recv))
                return
            self.transport.write(SSE_HEAD + b"".join(events))
            self.log.append((t_recv, time.perf_counter()))
        elif path == b"/log":
            out = sorted(self.log)
            self.log.clear()
            self.transport.write(_json_answer(out))
        elif path == b"/v1/models":
            self.transport.write(_json_answer({"object": "list", "data": [{"id": "m", "object": "model"}]}))
        elif path == b"/health":
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        else:
            self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    async def _gapped(self, events: list[bytes], t_recv: float) -> None:
        assert self.transport is not None
        self.transport.write(SSE_HEAD + events[0])
        self.log.append((t_recv, time.perf_counter()))
        for event in events[1:-2]:
            await asyncio.sleep(self.gap_s)
            self.transport.write(event)
        self.transport.write(b"".join(events[-2:]))
        self.busy = False
        self._serve()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--chunk-gap-s", type=float, default=0.0)
    ns = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    log: Log = []

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        factory = lambda: _Server(log, ns.tokens_per_chunk, ns.chunk_gap_s)  # noqa: E731
        await loop.create_server(factory, "127.0.0.1", ns.port, backlog=4096)
        print(f"READY {ns.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
