"""The client replays a columnar shard: one record per request, chains released by their predecessor's end,
the same records as from the list it replaced. Against bench/stream_server.py's protocol in this process, on
loopback (it answers at once: nothing here measures time)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from bench.stream_server import _Server
from workloads import health
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.client import ClientSettings, replay
from workloads.schedule_columns import ScheduleColumns
from workloads.traces.synthetic import SyntheticTraceSpec
from workloads.workload import WorkloadSpec, build_schedule


def closed_loop(n: int, users: int) -> ScheduleColumns:
    spec = WorkloadSpec(
        trace=SyntheticTraceSpec(num_requests=n, input_tokens=6, output_tokens=3),
        arrival=ClosedLoopArrivalSpec(concurrency=users),
        think_time_s=0.001,
    )
    return build_schedule(spec).requests


async def _replay_all(requests, **kw):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Server([], 1, 0.0), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    s = ClientSettings(base_url=f"http://127.0.0.1:{port}", model="m", arm="a", vocab_lo=3, vocab_hi=98, **kw)
    try:
        return [r async for r in replay(requests, s, time.time() + 0.05)]
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("payloads", ["ahead", "inline"])
def test_a_columnar_shard_with_chains_gets_one_record_per_request(payloads):
    cols = closed_loop(40, users=3).shard(2, 1)  # a shard: whole chains, indices not contiguous
    records = asyncio.run(_replay_all(cols, payloads=payloads))
    assert sorted(r.index for r in records) == sorted(cols.index.tolist())
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    by_index = {r.index: r for r in records}
    for req in cols:
        rec = by_index[req.index]
        assert (rec.prompt_tokens_requested, rec.output_tokens_requested) == (req.prompt_tokens, req.max_tokens)
        if req.after_index is not None:  # sent when its predecessor ended, plus the think time
            before = by_index[req.after_index]
            assert before.end_s is not None and rec.intended_send_s == pytest.approx(before.end_s + 0.001)
            assert rec.actual_send_s is not None and rec.actual_send_s >= before.end_s


def test_columns_and_the_list_they_came_from_replay_the_same_requests():
    cols = closed_loop(12, users=2)
    from_cols = asyncio.run(_replay_all(cols))
    from_list = asyncio.run(_replay_all(list(cols)))
    fields = ("index", "prompt_tokens_requested", "output_tokens_requested", "warmup", "output_tokens")
    assert sorted(tuple(getattr(r, f) for f in fields) for r in from_cols) == sorted(
        tuple(getattr(r, f) for f in fields) for r in from_list
    )


@pytest.mark.parametrize("exact_lags", [10**6, 1_000])
def test_lag_percentiles_are_exact_while_few_then_within_a_percent_in_fixed_memory(monkeypatch, exact_lags):
    monkeypatch.setattr(health, "EXACT_LAGS", exact_lags)
    rng = np.random.default_rng(exact_lags)
    lags = np.concatenate((np.zeros(300), rng.lognormal(-1, 1.5, 20_000), [5e8]))  # 0 ms, sub-ms, ms, off the scale
    summary = health.LagSummary()
    for v in lags:
        summary.add(float(v))
    assert summary.count == lags.size and summary.max_ms == lags.max()
    for q in (50, 90, 99):
        want = np.percentile(lags, q)
        got = summary.percentile(q)
        assert got == want if exact_lags > lags.size else got == pytest.approx(want, rel=0.01)
    assert health.LagSummary().percentile(99) is None
    if exact_lags < lags.size:
        assert summary._exact is None and len(summary._bins) == health._BINS  # the same size after 20k or 20M
