"""Request bodies built ahead (workloads.payloads): the same JSON as the inline path, built off the loop, bounded.

No server here: the producer is driven directly on an event loop. Synchronisation is by the producer's own
signals (``primed``, futures), never by sleeping.
"""

import asyncio
import json
import threading

import numpy as np
import pytest

from workloads.client import ClientSettings, _body_spec, _payload
from workloads.payloads import BodyProducer, PayloadStats, build_order, completion_body
from workloads.prompts import ids_json, request_prompt_array, request_prompt_ids
from workloads.schedule import PlannedRequest

BLOCKS = {
    "no shared block": (),
    "one block": ((7, 5),),
    "several, one longer than the prompt, a key repeated": ((7, 5), (8, 300), (7, 16)),
}
LENGTHS = (1, 17, 8000)  # one token, an odd length, a long prompt


def settings(**kw):
    return ClientSettings(**{"base_url": "http://x", "model": "m", "arm": "a", "vocab_lo": 3, "vocab_hi": 98, **kw})


@pytest.mark.parametrize("blocks", BLOCKS.values(), ids=BLOCKS.keys())
@pytest.mark.parametrize("prompt_tokens", LENGTHS)
@pytest.mark.parametrize(
    "s",
    [settings(), settings(vocab_lo=0, vocab_hi=151936, seed=3, model='org/"quoted" ü')],
    ids=["small vocab", "large vocab, seed, a model name JSON must escape"],
)
def test_the_prebuilt_body_is_the_inline_payload_byte_for_byte(blocks, prompt_tokens, s):
    req = PlannedRequest(index=11, send_offset_s=0, prompt_tokens=prompt_tokens, max_tokens=7, shared_blocks=blocks)
    body = completion_body(_body_spec(s), req)
    old = _payload(s, req)
    assert json.loads(body) == old
    assert body == json.dumps(old, separators=(",", ":")).encode()  # the compact form of the same object
    assert len(old["prompt"]) == prompt_tokens


def test_ids_json_writes_every_width_of_id_as_json_does():
    ids = np.array([0, 9, 10, 99, 100, 151935, 5, 0])
    assert ids_json(ids, 151936) == json.dumps(ids.tolist(), separators=(",", ":"))[1:-1].encode()
    assert ids_json(np.array([], dtype=np.int64), 10) == b""
    with pytest.raises(ValueError, match="outside"):
        ids_json(np.array([10]), 10)


def test_the_prompt_array_is_the_prompt_list():
    blocks = ((4, 3), (4, 9), (2, 2))
    for n in (1, 2, 10, 50):
        assert request_prompt_array(5, n, blocks, 3, 98, 1).tolist() == request_prompt_ids(5, n, blocks, 3, 98, 1)
    with pytest.raises(ValueError, match="block key"):
        request_prompt_array(5, 4, ((-1, 2),), 3, 98)


def req(i, t=0.0, **kw):
    return PlannedRequest(index=i, send_offset_s=t, prompt_tokens=3, max_tokens=2, **kw)


def test_build_order_is_send_time_then_depth_in_the_chain():
    users = 3
    reqs = [req(u, 0.1 * u) for u in range(users)]  # closed loop: each user's turns chained, no think time
    for turn in range(1, 3):
        reqs += [req(turn * users + u, after_index=(turn - 1) * users + u) for u in range(users)]
    reqs.append(req(99, 0.05, after_index=0, think_time_s=0.0))  # a second follower of user 0's first turn
    reqs.append(req(98, 0.0, after_index=1, think_time_s=5.0))  # earliest possible send: 0.1 + 5
    order = [r.index for r in build_order(reqs)]
    assert order == [0, 3, 99, 6, 1, 4, 7, 2, 5, 8, 98]  # 99 is a depth-1 follower, 6 a depth-2 one
    assert sorted(order) == sorted(r.index for r in reqs)


def run_producer(reqs, scenario, build=None, **kw):
    """Run ``scenario(producer, built_on)`` on a fresh loop; ``built_on`` lists the thread of every build."""
    built_on: list[int] = []

    def default_build(r):
        built_on.append(threading.get_ident())
        return completion_body(_body_spec(settings()), r)

    async def main():
        p = BodyProducer(reqs, build or default_build, asyncio.get_running_loop(), **kw)
        p.start()
        try:
            return await scenario(p, built_on)
        finally:
            p.close()

    return asyncio.run(main())


def test_bodies_are_built_on_the_producer_thread_and_ready_before_they_are_taken():
    reqs = [req(i) for i in range(64)]

    async def scenario(p, built_on):
        await p.primed()
        got = [p.take(r) for r in reqs]
        return got, threading.get_ident(), built_on

    got, loop_thread, built_on = run_producer(reqs, scenario)
    assert all(isinstance(b, bytes) for b in got)  # none a future: nothing waited
    assert len(built_on) == 64 and loop_thread not in built_on


def test_the_window_is_bounded_by_count_and_a_body_wanted_out_of_turn_jumps_it():
    reqs = [req(i, 0.01 * i) for i in range(20)]
    stats = PayloadStats()

    async def scenario(p, built_on):
        await p.primed()
        ahead = len(built_on)  # the window is full and the producer waits for a take
        late = p.take(reqs[15])  # not built yet: a future, built next though the window is full
        assert isinstance(late, asyncio.Future)
        body = await late
        first = p.take(reqs[0])
        return ahead, body, first

    ahead, body, first = run_producer(reqs, scenario, ahead_count=4, stats=stats)
    assert ahead == 4 and stats.max_ready == 4
    assert json.loads(body)["prompt"] == request_prompt_ids(15, 3, (), 3, 98)
    assert isinstance(first, bytes) and stats.demanded == 1


def test_the_window_is_bounded_by_bytes():
    reqs = [req(i) for i in range(10)]
    stats = PayloadStats()

    async def scenario(p, built_on):
        await p.primed()
        n = len(built_on)
        return n, [await b if isinstance(b, asyncio.Future) else b for b in (p.take(r) for r in reqs)]

    n, bodies = run_producer(reqs, scenario, ahead_bytes=1, stats=stats)
    assert n == 1 and stats.max_ready == 1 and len(bodies) == 10  # one body is already over a 1-byte budget


def test_a_body_that_cannot_be_built_fails_only_its_own_request():
    reqs = [req(i) for i in range(4)]

    def build(r):
        if r.index == 2:
            raise ValueError("no such block")
        return b"{}"

    async def scenario(p, built_on):
        await p.primed()
        failed = p.take(reqs[2])  # a failed future, as when it is taken before the thread reached it
        with pytest.raises(ValueError, match="no such block"):
            await failed
        return [p.take(r) for r in reqs if r.index != 2]

    assert run_producer(reqs, scenario, build=build) == [b"{}"] * 3
