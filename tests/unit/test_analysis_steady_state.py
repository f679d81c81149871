import numpy as np

from analysis.steady_state import mser5_cut, steady, warmup_slots
from workloads.records import RequestRecord


def test_mser5_drops_a_slow_start_and_keeps_a_steady_series_whole():
    rng = np.random.default_rng(3)
    steady_part = rng.normal(0.05, 0.005, 200)
    warm = np.concatenate([np.linspace(2.0, 0.3, 20), steady_part])
    cut = mser5_cut(warm)
    assert 15 <= cut <= 30 and cut % 5 == 0
    assert mser5_cut(steady_part) <= 10  # noise alone costs at most a couple of batches
    assert mser5_cut([1.0, 2.0, 3.0]) == 0  # too short to judge


def rec(arm, index, ttft, rnd=0):
    return RequestRecord(
        index=index,
        arm=arm,
        round=rnd,
        intended_send_s=index * 0.1,
        actual_send_s=index * 0.1,
        first_token_s=index * 0.1 + ttft,
        token_times_s=[index * 0.1 + ttft],
        end_s=index * 0.1 + ttft,
        prompt_tokens_requested=1,
        output_tokens_requested=1,
        output_tokens=1,
    )


def test_the_same_slots_are_dropped_from_every_arm_of_a_round():
    a = [rec("a", i, 3.0 if i < 10 else 0.05 + 0.001 * (i % 3)) for i in range(60)]
    b = [rec("b", i, 3.0 if i < 20 else 0.05 + 0.001 * (i % 3)) for i in range(60)]
    cuts = warmup_slots([a, b])
    assert cuts[0] == 20  # the later of the two arms' cuts
    assert set(steady(a, cuts).index.tolist()) == set(steady(b, cuts).index.tolist()) == set(range(20, 60))
