"""The client measured against a small fake server: faults a real engine cannot produce on demand.

A fake is allowed here only because what is under test is the client's own bookkeeping: token
timestamps, HTTP errors, a server that goes away, and one record per planned request.
"""

import asyncio
import json
import time

import pytest
from aiohttp import web

from tests.integration.fake_openai import loopback_port, serve
from workloads.client import (
    NOT_SENT_ENGINE_DOWN,
    ClientSettings,
    ReplayDeadlineExceeded,
    ReplayError,
    ReplayFailed,
    replay,
)
from workloads.pacing import ReplayClock
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
    loop_start = time.time()
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


# --- a replay always ends: its own exceptions and its deadline -------------------------------------------


async def replay_until_it_ends(reqs, s, start_s=None):
    """Everything the replay yielded, and the exception it ended with (None: it finished).

    The outer wait_for only turns a hang (the bug these tests guard against) into a failure.
    """
    got = []

    async def consume():
        async for r in replay(reqs, s, time.time() if start_s is None else start_s):
            got.append(r)

    try:
        await asyncio.wait_for(consume(), timeout=HANG_GUARD_S)
    except (ReplayError, TimeoutError) as e:
        return got, e
    return got, None


HANG_GUARD_S = 120.0
BAD_BLOCK = ((-1, 2),)  # a shared block key the prompt builder refuses: building this request's payload raises


@pytest.mark.parametrize(("payloads", "where"), [("inline", "in the dispatcher"), ("ahead", "in request #1")])
def test_a_request_whose_body_cannot_be_built_ends_the_replay_with_its_reason(payloads, where):
    """Inline, the dispatcher builds each body and raises itself; built ahead, the failure is always the
    request's own task's, whether the producer had built it when it was taken or not (no race)."""

    async def main():
        runner, url = await serve(streaming_handler)
        try:
            reqs = [
                PlannedRequest(index=0, send_offset_s=0, prompt_tokens=3, max_tokens=2),
                PlannedRequest(index=1, send_offset_s=0, prompt_tokens=3, max_tokens=2, shared_blocks=BAD_BLOCK),
            ]
            return await replay_until_it_ends(reqs, settings(url, payloads=payloads))
        finally:
            await runner.cleanup()

    _, err = asyncio.run(main())
    assert isinstance(err, ReplayFailed), err
    assert where in str(err) and "block key must be >= 0" in str(err), str(err)


def test_a_send_task_that_raises_ends_the_replay_after_the_records_finished_before_it():
    """Request 1 is chained to 0, so its payload is built (and fails) in its own task after 0 has finished."""

    async def main():
        runner, url = await serve(streaming_handler)
        try:
            reqs = [
                PlannedRequest(index=0, send_offset_s=0, prompt_tokens=3, max_tokens=2),
                PlannedRequest(
                    index=1, send_offset_s=0, prompt_tokens=3, max_tokens=2, after_index=0, shared_blocks=BAD_BLOCK
                ),
            ]
            return await replay_until_it_ends(reqs, settings(url))
        finally:
            await runner.cleanup()

    got, err = asyncio.run(main())
    assert isinstance(err, ReplayFailed) and "in request #1" in str(err), err
    assert [r.index for r in got] == [0] and got[0].ok


def test_the_injected_dispatcher_fault_raises_once_its_records_are_finished():
    """The test-only hook the driver's fault tests use: deterministic, the first N records always come first."""

    async def main():
        runner, url = await serve(streaming_handler)
        try:
            reqs = [PlannedRequest(index=i, send_offset_s=0, prompt_tokens=3, max_tokens=2) for i in range(5)]
            return await replay_until_it_ends(reqs, settings(url, fail_dispatch_after_records=2))
        finally:
            await runner.cleanup()

    got, err = asyncio.run(main())
    assert isinstance(err, ReplayFailed) and "InjectedDispatchFault" in str(err), err
    assert sorted(r.index for r in got) == [0, 1] and all(r.ok for r in got)


class JumpClock(ReplayClock):
    """The replay's clock, moved forward on demand: a deadline passes when the test says so, not on a timer."""

    extra_s = 0.0

    def now_s(self) -> float:
        return super().now_s() + self.extra_s

    def perf_s(self, t_s: float) -> float:
        return super().perf_s(t_s - self.extra_s)


def test_a_replay_past_its_deadline_is_cancelled_and_keeps_what_finished():
    """Request 1 (chained to 0) never gets an answer and its timeout is an hour away; once record 0 is in, the
    clock passes the deadline, and the replay must end on its own, with record 0 kept."""

    release = asyncio.Event()  # set only at cleanup, so the server's shutdown need not wait for this handler

    async def one_then_silence(request):
        body = await request.json()
        if body["max_tokens"] == 3:
            await release.wait()  # no answer while the replay runs: only its deadline can end it
        return await streaming_handler(request)

    async def main():
        runner, url = await serve(one_then_silence)
        start = time.time()
        clock = JumpClock(start)
        got = []
        try:
            reqs = [
                PlannedRequest(index=0, send_offset_s=0, prompt_tokens=3, max_tokens=2),
                PlannedRequest(index=1, send_offset_s=0, prompt_tokens=3, max_tokens=3, after_index=0),
            ]
            s = settings(url, request_timeout_s=3600, deadline_s=60.0)

            async def consume():
                async for r in replay(reqs, s, start, clock=clock):
                    got.append(r)
                    clock.extra_s = 3600.0  # the deadline is behind us now

            await asyncio.wait_for(consume(), timeout=HANG_GUARD_S)
        except ReplayError as e:
            return got, e
        finally:
            release.set()
            await runner.cleanup()
        return got, None

    got, err = asyncio.run(main())
    assert isinstance(err, ReplayDeadlineExceeded), err
    assert "replay deadline passed" in str(err) and "1 record(s) finished, 1 request(s)" in str(err)
    assert [r.index for r in got] == [0] and got[0].ok
