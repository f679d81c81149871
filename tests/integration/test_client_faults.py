"""The client measured against a small fake server: faults a real engine cannot produce on demand.

A fake is allowed here only because what is under test is the client's own bookkeeping: token
timestamps, HTTP errors, a server that goes away, and one record per planned request.
"""

import asyncio
import json

import pytest
from aiohttp import web

from tests.integration.fake_openai import loopback_port, serve
from workloads.client import NOT_SENT_ENGINE_DOWN, ClientSettings, replay
from workloads.schedule import PlannedRequest

pytestmark = pytest.mark.integration


async def streaming_handler(request):
    body = await request.json()
    if body["max_tokens"] == 99:
        return web.Response(status=500, text="boom")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    n = len(body["prompt"])
    for i in range(1, body["max_tokens"] + 1):
        chunk = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": n, "completion_tokens": i}}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


def settings(url, **kw):
    return ClientSettings(base_url=url, model="m", arm="a", vocab_lo=3, vocab_hi=98, **kw)


async def collect(reqs, s):
    loop_start = __import__("time").time()
    return [r async for r in replay(reqs, s, loop_start)]


def test_every_token_timed_and_usage_recorded():
    async def main():
        runner, url = await serve(streaming_handler)
        try:
            reqs = [
                PlannedRequest(index=i, send_offset_s=0.01 * i, prompt_tokens=5 + i, max_tokens=4) for i in range(5)
            ]
            return await collect(reqs, settings(url, max_in_flight=2))
        finally:
            await runner.cleanup()

    recs = asyncio.run(main())
    assert sorted(r.index for r in recs) == list(range(5))
    for r in recs:
        assert r.ok
        assert r.output_tokens == 4 and len(r.token_times_s) == 4
        assert r.prompt_tokens == r.prompt_tokens_requested
        assert r.ttft_s is not None and r.ttft_s >= 0
        assert r.actual_send_s is not None and r.actual_send_s >= r.intended_send_s


def test_http_error_is_recorded_not_raised():
    async def main():
        runner, url = await serve(streaming_handler)
        try:
            reqs = [PlannedRequest(index=0, send_offset_s=0, prompt_tokens=3, max_tokens=99)]
            return await collect(reqs, settings(url))
        finally:
            await runner.cleanup()

    (r,) = asyncio.run(main())
    assert not r.ok and r.error.startswith("HTTP 500")


def test_dead_server_yields_one_record_per_request_and_stops_sending():
    url = f"http://127.0.0.1:{loopback_port()}"  # nothing listens here
    reqs = [PlannedRequest(index=i, send_offset_s=0.05 * i, prompt_tokens=3, max_tokens=2) for i in range(6)]
    recs = asyncio.run(collect(reqs, settings(url)))
    assert sorted(r.index for r in recs) == list(range(6))
    assert recs[0].error.startswith("connect failed")
    assert any(r.error == NOT_SENT_ENGINE_DOWN and r.actual_send_s is None for r in recs)
