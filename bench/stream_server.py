"""A fast OpenAI-compatible streaming server for measuring load generators, not engines.

It answers /v1/completions at once, streaming ``max_tokens`` tokens in chunks of
``--tokens-per-chunk`` with per-chunk usage (like vLLM with continuous usage stats), and logs,
per request, when its handler started and when it wrote the first chunk, on CLOCK_MONOTONIC
(``time.perf_counter``, shared by every process on the machine). GET /log returns and clears
the log, so a benchmark can see each client's real send times and the server's own share of TTFT.

A token-id prompt is counted without parsing the body as JSON (``_lengths``): json.loads of an 8,000-id
list costs this one-core server about 0.3 ms per request, which in a burst of 64 would delay the later
handlers' start (and so the send times it logs) by the server's own work, not the client's.

Run: ``python -m bench.stream_server --port 8999``; it prints ``READY <port>`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time

from aiohttp import web

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_PROMPT_LIST = re.compile(rb'"prompt"\s*:\s*\[')


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


def make_app(tokens_per_chunk: int, chunk_gap_s: float) -> web.Application:
    log: list[tuple[float, float]] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        n_in, n_out = _lengths(await request.read())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        done, first = 0, 0.0
        while done < n_out:
            k = min(tokens_per_chunk, n_out - done)
            done += k
            chunk = {
                "choices": [{"index": 0, "text": "x" * k, "finish_reason": None}],
                "usage": {"prompt_tokens": n_in, "completion_tokens": done, "total_tokens": n_in + done},
            }
            if not first:
                first = time.perf_counter()
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if chunk_gap_s and done < n_out:
                await asyncio.sleep(chunk_gap_s)
        usage = {"prompt_tokens": n_in, "completion_tokens": done, "total_tokens": n_in + done}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        log.append((t_recv, first))
        return resp

    async def get_log(request: web.Request) -> web.Response:
        out = sorted(log)
        log.clear()
        return web.json_response(out)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/log", get_log)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


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

    async def serve() -> None:
        runner = web.AppRunner(make_app(ns.tokens_per_chunk, ns.chunk_gap_s), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", ns.port, backlog=4096).start()
        print(f"READY {ns.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
