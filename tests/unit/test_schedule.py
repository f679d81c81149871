import pytest

from workloads.prompts import prompt_token_ids
from workloads.schedule import shard
from workloads.traces.azure import AzureTraceSpec
from workloads.traces.synthetic import SyntheticTraceSpec
from workloads.workload import WorkloadSpec, build_schedule


def test_scaling_and_clipping_are_counted_never_silent():
    spec = WorkloadSpec(
        trace=AzureTraceSpec(max_requests=50),
        input_scale=0.5,
        max_input_tokens=300,
        output_scale=1.0,
        max_output_tokens=100,
        speedup=4,
    )
    s = build_schedule(spec)
    assert len(s.requests) == 50
    assert all(r.prompt_tokens <= 300 and r.max_tokens <= 100 for r in s.requests)
    assert s.clipped_input > 0 and s.clipped_output > 0
    assert s.requests[0].prompt_tokens == 187  # 374 * 0.5
    assert s.requests[1].send_offset_s == pytest.approx(4.314579 / 4)


def test_same_seed_same_schedule_and_prompts():
    spec = WorkloadSpec(trace=SyntheticTraceSpec(num_requests=5, input_tokens=7, output_tokens=3, rate_rps=2))
    assert build_schedule(spec) == build_schedule(spec)
    assert prompt_token_ids(3, 7, 3, 98, seed=1) == prompt_token_ids(3, 7, 3, 98, seed=1)
    assert prompt_token_ids(3, 7, 3, 98, seed=1) != prompt_token_ids(4, 7, 3, 98, seed=1)


def test_prompt_ids_have_exact_length_and_range():
    ids = prompt_token_ids(0, 513, 3, 98)
    assert len(ids) == 513 and min(ids) >= 3 and max(ids) < 98


def test_shards_partition_the_schedule():
    reqs = build_schedule(
        WorkloadSpec(trace=SyntheticTraceSpec(num_requests=10, input_tokens=1, output_tokens=1, rate_rps=1))
    ).requests
    parts = [shard(reqs, 3, i) for i in range(3)]
    assert sorted(r.index for p in parts for r in p) == list(range(10))
