"""A replay's deadline: the latest a healthy replay can end, so that only a stuck one is ever cut off."""

import pytest

from workloads.client import DEADLINE_MARGIN_S, ClientSettings, replay_deadline_s
from workloads.schedule import PlannedRequest

TIMEOUT_S = 10.0


def settings(**kw):
    return ClientSettings(
        base_url="http://x", model="m", arm="a", vocab_lo=3, vocab_hi=9, request_timeout_s=TIMEOUT_S, **kw
    )


def req(i, t, **kw):
    return PlannedRequest(index=i, send_offset_s=t, prompt_tokens=2, max_tokens=2, **kw)


def test_open_loop_is_the_last_send_plus_the_request_timeout_plus_the_margin():
    reqs = [req(0, 0.0), req(1, 7.5), req(2, 3.0)]
    assert replay_deadline_s(reqs, settings()) == pytest.approx(7.5 + TIMEOUT_S + DEADLINE_MARGIN_S)


def test_a_chain_adds_a_timeout_and_the_think_time_per_turn():
    reqs = [req(0, 1.0), req(1, 0.0, after_index=0, think_time_s=2.0), req(2, 0.0, after_index=1, think_time_s=3.0)]
    worst = 1.0 + TIMEOUT_S + 2.0 + TIMEOUT_S + 3.0 + TIMEOUT_S
    assert replay_deadline_s(reqs, settings(), margin_s=0) == pytest.approx(worst)


def test_a_follower_whose_predecessor_is_in_another_shard_is_sent_on_its_own_time():
    assert replay_deadline_s([req(5, 4.0, after_index=99)], settings(), margin_s=0) == pytest.approx(4.0 + TIMEOUT_S)


def test_an_in_flight_cap_adds_the_waves_the_queue_can_take_to_drain():
    reqs = [req(i, 0.0) for i in range(5)]
    assert replay_deadline_s(reqs, settings(max_in_flight=2), margin_s=0) == pytest.approx(TIMEOUT_S + 3 * TIMEOUT_S)


def test_an_empty_shard_ends_within_the_margin():
    assert replay_deadline_s([], settings()) == DEADLINE_MARGIN_S
