"""The network between the client and a real CPU engine breaks (a loopback fault proxy in between): each
fault is one record under its error kind, the replay goes on, and every request ends as exactly one record.

The first ``FAULTED`` connections get the fault; requests go one at a time, so requests 0 and 1 meet it and
2-5 pass through (each faulted connection is closed, so the next request opens a new one)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fault_proxy import Fault, FaultProxy
from workloads.client import ClientSettings, replay
from workloads.records import RequestRecord
from workloads.schedule import PlannedRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N, FAULTED = 6, 2
REQUEST_TIMEOUT_S = 4.0  # the stall must outlast it


def _through(proxy: FaultProxy, name: str, key: str) -> list[RequestRecord]:
    settings = ClientSettings(
        base_url=proxy.url,
        model=name,
        arm="net",
        vocab_lo=3,
        vocab_hi=98,
        max_in_flight=1,
        request_timeout_s=REQUEST_TIMEOUT_S,
        api_key=key,
    )
    requests = [PlannedRequest(index=i, send_offset_s=0.0, prompt_tokens=16, max_tokens=8) for i in range(N)]

    async def go() -> list[RequestRecord]:
        return [r async for r in replay(requests, settings, time.time() + 0.3)]

    return sorted(asyncio.run(go()), key=lambda r: r.index)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [("reset", "reset"), ("truncate", "reset"), ("stall", "timeout"), ("503", "http"), ("slow", None)],
    ids=["reset-mid-stream", "sse-event-cut", "stall-past-timeout", "503-burst", "byte-at-a-time"],
)
def test_a_network_fault_is_recorded_under_its_kind_and_the_replay_goes_on(keyed_engine, fault: Fault, kind):
    url, name, key = keyed_engine
    with FaultProxy(url, fault, count=FAULTED) as proxy:
        recs = _through(proxy, name, key)
    # (slow answers are whole, so one kept-alive connection carries every request, each answer slow)
    assert proxy.faulted == (1 if fault == "slow" else FAULTED), "the proxy did not inject what the test is about"
    assert [r.index for r in recs] == list(range(N))  # one record per request, none lost
    hit, clean = recs[:FAULTED], recs[FAULTED:]
    if kind is None:  # slow, but whole: nothing is an error, and the tokens are all there
        hit, clean = [], recs
    for r in hit:
        assert not r.ok and r.error_kind == kind, (r.error_kind, r.error)
        assert r.actual_send_s is not None and r.end_s is not None
    if fault == "503":
        assert all(r.http_status == 503 and "busy" in (r.error or "") for r in hit)
    if fault == "stall":
        assert all(r.end_s - r.actual_send_s >= REQUEST_TIMEOUT_S * 0.99 for r in hit)  # type: ignore[operator]
    for r in clean:
        assert r.ok, (r.index, r.error_kind, r.error)
        assert r.output_tokens == 8 == len(r.token_times_s)
