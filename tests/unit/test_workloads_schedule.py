"""Arrival processes (checked statistically with fixed seeds) and the schedule transforms."""

import numpy as np
import pytest
from scipy import stats

from workloads.arrivals import plan_arrivals
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.arrivals.constant import ConstantArrivalSpec
from workloads.arrivals.gamma import GammaArrivalSpec
from workloads.arrivals.poisson import PoissonArrivalSpec
from workloads.arrivals.ramp import warp
from workloads.arrivals.trace import TraceArrivalSpec
from workloads.prompts import block_token_ids, request_prompt_ids
from workloads.schedule import shard
from workloads.traces import TraceFormatError
from workloads.traces.azure import AzureTraceSpec
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.traces.sharegpt import ShareGptTraceSpec
from workloads.traces.synthetic import SyntheticTraceSpec
from workloads.workload import WorkloadSpec, build_schedule

N = 20000


def gaps(spec, seed=0):
    return np.diff(plan_arrivals(spec, [None] * N, seed).offsets_s)


def test_poisson_rate_and_cv():
    g = gaps(PoissonArrivalSpec(rate_rps=50))
    assert 1 / g.mean() == pytest.approx(50, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.03)
    assert stats.kstest(g, "expon", args=(0, 1 / 50)).pvalue > 0.01


@pytest.mark.parametrize("k", [0.25, 4.0])
def test_gamma_burstiness_sets_cv(k):
    g = gaps(GammaArrivalSpec(rate_rps=20, burstiness=k))
    assert 1 / g.mean() == pytest.approx(20, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(k), rel=0.05)


def test_constant_is_exact():
    assert np.allclose(gaps(ConstantArrivalSpec(rate_rps=8)), 1 / 8)


def test_same_seed_same_arrivals_other_seed_other():
    spec = PoissonArrivalSpec(rate_rps=5)
    assert plan_arrivals(spec, [None] * 10, 1) == plan_arrivals(spec, [None] * 10, 1)
    assert plan_arrivals(spec, [None] * 10, 1) != plan_arrivals(spec, [None] * 10, 2)


def test_ramp_up_grows_rate_linearly_then_holds():
    t = np.array(warp(np.arange(0, 1000) / 10.0, ramp_up_s=20))  # 10 rps after a 20 s ramp
    in_first_10 = np.sum(t < 10)  # integral of rate over [0,10] = 10 * 10^2 / (2 * 20) = 25
    assert in_first_10 == pytest.approx(25, abs=1)
    late = np.diff(t[t > 25])
    assert np.allclose(late, 0.1)


def test_trace_arrival_target_rate_keeps_shape():
    spec = WorkloadSpec(trace=AzureTraceSpec(max_requests=50), arrival=TraceArrivalSpec(target_rate_rps=4))
    s = build_schedule(spec)
    offsets = [r.send_offset_s for r in s.requests]
    assert (len(offsets) - 1) / offsets[-1] == pytest.approx(4)
    raw = build_schedule(WorkloadSpec(trace=AzureTraceSpec(max_requests=50)))
    ratio = np.array(offsets[1:]) / np.array([r.send_offset_s for r in raw.requests][1:])
    assert np.allclose(ratio, ratio[0])


def test_trace_without_timestamps_needs_an_arrival_process():
    with pytest.raises(TraceFormatError, match="sharegpt_sample.json: workload.arrival: this trace has no timestamps"):
        build_schedule(WorkloadSpec(trace=ShareGptTraceSpec()))
    s = build_schedule(WorkloadSpec(trace=ShareGptTraceSpec(), arrival=ConstantArrivalSpec(rate_rps=2)))
    assert [r.send_offset_s for r in s.requests] == [0, 0.5, 1.0, 1.5]


def test_closed_loop_chains_users():
    spec = WorkloadSpec(
        trace=SyntheticTraceSpec(num_requests=7, input_tokens=4, output_tokens=2),
        arrival=ClosedLoopArrivalSpec(concurrency=3),
    )
    reqs = build_schedule(spec).requests
    assert [r.after_index for r in reqs] == [None, None, None, 0, 1, 2, 3]
    assert sorted(len(shard(reqs, 2, i)) for i in range(2)) == [2, 5]  # whole chains: {0,3,6}+{2,5} and {1,4}
    for i in range(2):
        part = {r.index for r in shard(reqs, 2, i)}
        assert all(r.after_index in part for r in reqs if r.index in part and r.after_index is not None)


def test_multi_turn_chats_chain_turns_with_think_time():
    spec = WorkloadSpec(
        trace=ShareGptTraceSpec(multi_turn=True), arrival=PoissonArrivalSpec(rate_rps=1), think_time_s=2
    )
    reqs = build_schedule(spec).requests
    assert [r.after_index for r in reqs] == [None, 0, 1, None, None, 4, None]
    assert reqs[1].think_time_s == 2 and reqs[0].think_time_s == 0


def test_window_and_sample_are_counted():
    s = build_schedule(WorkloadSpec(trace=AzureTraceSpec(), window_start_s=10, window_end_s=30))
    assert s.requests[0].send_offset_s >= 0 and max(r.send_offset_s for r in s.requests) < 20
    assert s.skipped["outside time window"] == 200 - len(s.requests)
    a = build_schedule(WorkloadSpec(trace=AzureTraceSpec(), sample_requests=30, seed=4))
    assert len(a.requests) == 30 and a.skipped == {"not sampled": 170}
    assert a == build_schedule(WorkloadSpec(trace=AzureTraceSpec(), sample_requests=30, seed=4))
    assert a != build_schedule(WorkloadSpec(trace=AzureTraceSpec(), sample_requests=30, seed=5))


def test_max_model_len_clipping_is_counted():
    s = build_schedule(WorkloadSpec(trace=MooncakeTraceSpec(), input_scale=1 / 32, max_model_len=512))
    assert all(r.prompt_tokens + r.max_tokens <= 512 for r in s.requests)
    assert s.clipped_context > 0


def test_mooncake_prompts_share_exactly_the_shared_blocks():
    s = build_schedule(WorkloadSpec(trace=MooncakeTraceSpec(), input_scale=1 / 32))
    by_first = {}
    for r in s.requests:
        ids = request_prompt_ids(r.index, r.prompt_tokens, r.shared_blocks, 3, 98)
        assert len(ids) == r.prompt_tokens
        by_first.setdefault(r.shared_blocks[0][0], []).append((r, ids))
    shared = [group for group in by_first.values() if len(group) > 1]
    assert shared, "the sample has requests opening with the same hash id"
    (r1, ids1), (r2, ids2) = shared[0][:2]
    n = r1.shared_blocks[0][1]
    assert ids1[:n] == ids2[:n]


def test_partial_block_is_prefix_of_full_block():
    assert block_token_ids(7, 5, 3, 98) == block_token_ids(7, 16, 3, 98)[:5]
    assert block_token_ids(7, 16, 3, 98) != block_token_ids(8, 16, 3, 98)


def test_default_schedule_unchanged_by_new_fields():
    s = build_schedule(WorkloadSpec(trace=AzureTraceSpec(max_requests=3), speedup=2))
    assert [r.send_offset_s for r in s.requests] == [0.0, pytest.approx(4.314579 / 2), pytest.approx(4.541876 / 2)]
    assert all(r.after_index is None and r.shared_blocks == () for r in s.requests)
