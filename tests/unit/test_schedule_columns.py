"""The columnar schedule: the same plan as the list of PlannedRequest it replaced, value for value.

The list-based builder as it was before the columns (kept here only, as the reference) and the columnar one
must give bit-identical requests, clip counts and skips over every trace kind and arrival process the unit
tests use; sharding on columns must give exactly ``workloads.schedule.shard``'s partition.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_trace_streaming import azure_csv
from workloads.arrivals import ArrivalError, plan_arrivals
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.arrivals.constant import ConstantArrivalSpec
from workloads.arrivals.gamma import GammaArrivalSpec
from workloads.arrivals.poisson import PoissonArrivalSpec
from workloads.arrivals.trace import TraceArrivalSpec
from workloads.schedule import PlannedRequest, TraceRow, shard
from workloads.schedule_columns import ScheduleColumns, most_within
from workloads.schedule_stats import schedule_line
from workloads.traces import TraceFormatError, columns_from_rows, iter_trace, read_trace, read_trace_columns
from workloads.traces.azure import AzureTraceSpec
from workloads.traces.burstgpt import BurstGptTraceSpec
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.traces.sharegpt import ShareGptTraceSpec
from workloads.traces.synthetic import LognormalLengths, SyntheticTraceSpec, UniformLengths
from workloads.workload import WorkloadSpec, build_schedule


# --- the list-based builder before the columns, verbatim in what it computes ---------------------------------
@dataclass
class _OldClips:
    input: int = 0
    output: int = 0
    context: int = 0


def _old_roots(rows: list[TraceRow]) -> list[int]:
    root: list[int] = []
    for i, r in enumerate(rows):
        root.append(i if r.follows is None else root[r.follows])
    return root


def _old_select(rows: list[TraceRow], spec: WorkloadSpec, skipped: dict[str, int]) -> list[int]:
    root = _old_roots(rows)
    keep = list(range(len(rows)))
    if spec.window_start_s is not None or spec.window_end_s is not None:
        lo = spec.window_start_s or 0.0
        hi = spec.window_end_s if spec.window_end_s is not None else float("inf")
        if any(r.arrival_s is None for r in rows):
            raise ArrivalError("a time window needs a trace with timestamps")
        keep = [i for i in keep if lo <= (rows[root[i]].arrival_s or 0.0) < hi]
        skipped["outside time window"] = len(rows) - len(keep)
    if spec.sample_requests is not None:
        roots = sorted({root[i] for i in keep})
        if spec.sample_requests < len(roots):
            rng = np.random.default_rng([spec.seed, 0x5A3])
            chosen = set(rng.choice(roots, size=spec.sample_requests, replace=False).tolist())
            before = len(keep)
            keep = [i for i in keep if root[i] in chosen]
            skipped["not sampled"] = before - len(keep)
    if spec.first_requests is not None and spec.first_requests < len(keep):
        skipped["beyond first_requests"] = len(keep) - spec.first_requests
        keep = keep[: spec.first_requests]
    return keep


def _old_prompt(row: TraceRow, spec: WorkloadSpec) -> tuple[int, tuple[tuple[int, int], ...]]:
    total = max(1, round(row.input_tokens * spec.input_scale))
    blocks, used = [], 0
    for key, n in row.shared_blocks:
        n = min(max(1, round(n * spec.input_scale)), total - used)
        if n <= 0:
            break
        blocks.append((key, n))
        used += n
    return total, tuple(blocks)


def _old_truncate(blocks: tuple[tuple[int, int], ...], total: int) -> tuple[tuple[int, int], ...]:
    out, used = [], 0
    for key, n in blocks:
        if used >= total:
            break
        out.append((key, min(n, total - used)))
        used += n
    return tuple(out)


def _old_lengths(row: TraceRow, spec: WorkloadSpec, clips: _OldClips) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    prompt, blocks = _old_prompt(row, spec)
    out = max(1, round(row.output_tokens * spec.output_scale))
    if spec.max_input_tokens is not None and prompt > spec.max_input_tokens:
        prompt, clips.input = spec.max_input_tokens, clips.input + 1
    if spec.max_output_tokens is not None and out > spec.max_output_tokens:
        out, clips.output = spec.max_output_tokens, clips.output + 1
    if spec.max_model_len is not None and prompt + out > spec.max_model_len:
        prompt = min(prompt, spec.max_model_len - 1)
        out = min(out, spec.max_model_len - prompt)
        clips.context += 1
    return prompt, out, blocks


def _old_closed_loop_chains(roots: list[int], after: dict[int, int], users: int) -> dict[int, int]:
    tail = {r: r for r in roots}
    root_of: dict[int, int] = {}
    for i in sorted(after):
        root_of[i] = root_of.get(after[i], after[i])
        tail[root_of[i]] = i
    return {roots[k]: tail[roots[k - users]] for k in range(users, len(roots))}


def _old_timing(rows, keep, new_index, spec):
    open_pos = [p for p in keep if rows[p].follows is None or rows[p].follows not in new_index]
    t0 = spec.window_start_s or 0.0
    times = [None if rows[p].arrival_s is None else (rows[p].arrival_s or 0.0) - t0 for p in open_pos]
    plan = plan_arrivals(spec.arrival, times, spec.seed)
    offsets = {p: plan.offsets_s[k] / spec.speedup for k, p in enumerate(open_pos)}
    after = {new_index[p]: new_index[rows[p].follows] for p in keep if p not in offsets}
    if plan.users is not None:
        after.update(_old_closed_loop_chains([new_index[p] for p in open_pos], after, plan.users))
    return offsets, after


def old_build(spec: WorkloadSpec) -> tuple[list[PlannedRequest], dict[str, object]]:
    loaded = read_trace(spec.trace, None)
    skipped = dict(loaded.skipped)
    rows = loaded.rows
    keep = _old_select(rows, spec, skipped)
    if not keep:
        raise TraceFormatError("?", "no requests left")
    new_index = {pos: i for i, pos in enumerate(keep)}
    offsets, after = _old_timing(rows, keep, new_index, spec)
    requests, clips = [], _OldClips()
    for p in keep:
        i = new_index[p]
        prompt, out, blocks = _old_lengths(rows[p], spec, clips)
        requests.append(
            PlannedRequest(
                index=i,
                send_offset_s=offsets.get(p, 0.0),
                prompt_tokens=prompt,
                max_tokens=out,
                shared_blocks=_old_truncate(blocks, prompt),
                after_index=after.get(i),
                think_time_s=spec.think_time_s if i in after else 0.0,
            )
        )
    counts = {
        "clipped_input": clips.input,
        "clipped_output": clips.output,
        "clipped_context": clips.context,
        "skipped": {k: v for k, v in skipped.items() if v},
    }
    return requests, counts


# --- the specs the unit tests use, and a few more that reach every branch ---------------------------------
SYNTH = SyntheticTraceSpec(num_requests=300, input_tokens=40, output_tokens=8)
SPECS = [
    WorkloadSpec(),
    WorkloadSpec(
        trace=AzureTraceSpec(max_requests=50), input_scale=0.5, max_input_tokens=300, max_output_tokens=100, speedup=4
    ),  # fmt: skip
    WorkloadSpec(trace=AzureTraceSpec(), window_start_s=10, window_end_s=30),
    WorkloadSpec(trace=AzureTraceSpec(), sample_requests=30, seed=4),
    WorkloadSpec(trace=AzureTraceSpec(), first_requests=17, arrival=TraceArrivalSpec(target_rate_rps=3, ramp_up_s=5)),
    WorkloadSpec(trace=AzureTraceSpec(), max_model_len=600, input_scale=0.37, output_scale=1.7),
    WorkloadSpec(trace=BurstGptTraceSpec(), arrival=GammaArrivalSpec(rate_rps=20, burstiness=0.5)),
    WorkloadSpec(trace=MooncakeTraceSpec(), input_scale=1 / 32, max_model_len=512),
    WorkloadSpec(trace=MooncakeTraceSpec(), input_scale=1 / 32, max_input_tokens=100, window_start_s=5),
    WorkloadSpec(trace=MooncakeTraceSpec(), input_scale=0.013, sample_requests=20, seed=9),
    WorkloadSpec(trace=ShareGptTraceSpec(), arrival=ConstantArrivalSpec(rate_rps=2)),
    WorkloadSpec(trace=ShareGptTraceSpec(multi_turn=True), arrival=PoissonArrivalSpec(rate_rps=1), think_time_s=2),
    WorkloadSpec(
        trace=ShareGptTraceSpec(multi_turn=True),
        arrival=ClosedLoopArrivalSpec(concurrency=2),
        input_scale=0.3,
        max_input_tokens=9,
        sample_requests=3,
        seed=1,
    ),  # fmt: skip
    WorkloadSpec(trace=ShareGptTraceSpec(multi_turn=True), first_requests=5, arrival=ConstantArrivalSpec(rate_rps=4)),
    WorkloadSpec(
        trace=SyntheticTraceSpec(num_requests=7, input_tokens=4, output_tokens=2),
        arrival=ClosedLoopArrivalSpec(concurrency=3, ramp_up_s=1.5),
    ),  # fmt: skip
    WorkloadSpec(trace=SyntheticTraceSpec(num_requests=5, input_tokens=7, output_tokens=3, rate_rps=2)),
    WorkloadSpec(trace=SYNTH, arrival=PoissonArrivalSpec(rate_rps=50, ramp_up_s=2), speedup=3),
    WorkloadSpec(
        trace=SyntheticTraceSpec(
            num_requests=400,
            input_tokens=LognormalLengths(median_tokens=60, sigma=1.2, max_tokens=900),
            output_tokens=UniformLengths(min_tokens=1, max_tokens=30),
            shared_prefix_tokens=24,
            rate_rps=10,
            seed=3,
        ),
        input_scale=0.7,
        max_input_tokens=200,
        max_model_len=220,
        window_end_s=30,
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_columnar_build_is_the_list_build_bit_for_bit(spec):
    old, counts = old_build(spec)
    new = build_schedule(spec)
    assert new.counts() == counts
    assert new.requests == ScheduleColumns.from_requests(old)
    assert list(new.requests) == old  # and back, request by request (floats compared exactly)


def test_an_empty_selection_still_names_the_trace():
    with pytest.raises(TraceFormatError, match="no requests left"):
        build_schedule(WorkloadSpec(trace=AzureTraceSpec(), window_start_s=1e6))


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
@pytest.mark.parametrize("num_shards", [1, 2, 3, 7])
def test_shard_on_columns_is_the_list_shard(spec, num_shards):
    cols = build_schedule(spec).requests
    listed = list(cols)
    for k in range(num_shards):
        assert list(cols.shard(num_shards, k)) == shard(listed, num_shards, k)


def test_shard_keeps_chains_whose_root_is_not_in_the_schedule_together():
    reqs = [  # a level cut out of a longer schedule: #5 waits on #4, which is not here
        PlannedRequest(index=5, send_offset_s=0, prompt_tokens=1, max_tokens=1, after_index=4),
        PlannedRequest(index=6, send_offset_s=0, prompt_tokens=1, max_tokens=1, after_index=5),
        PlannedRequest(index=7, send_offset_s=1, prompt_tokens=1, max_tokens=1, shared_blocks=((9, 1),)),
    ]
    cols = ScheduleColumns.from_requests(reqs)
    for k in range(3):
        assert list(cols.shard(3, k)) == shard(reqs, 3, k)


def test_columns_round_trip_through_ray_arrays_and_parquet(tmp_path: Path):
    s = build_schedule(SPECS[-1])
    cols = s.requests
    assert ScheduleColumns.from_arrays(cols.to_arrays()) == cols
    cols.write_parquet(tmp_path / "s.parquet", s.counts())
    back, meta = ScheduleColumns.read_parquet(tmp_path / "s.parquet")
    assert back == cols and meta == s.counts()
    part = cols.shard(3, 1)  # a slice of the blocks: offsets rebased
    part.write_parquet(tmp_path / "p.parquet")
    assert ScheduleColumns.read_parquet(tmp_path / "p.parquet")[0] == part


def test_lazy_access_is_the_request():
    s = build_schedule(SPECS[11]).requests
    assert s[1] == s.request(1) and s[-1] == s.request(len(s) - 1) and s[1].after_index == 0
    assert list(s[2:4]) == [s[2], s[3]]
    with pytest.raises(IndexError):
        s[len(s)]


def test_columns_refuse_what_the_model_refuses():
    good = ScheduleColumns.from_requests([PlannedRequest(index=0, send_offset_s=0, prompt_tokens=1, max_tokens=1)])
    with pytest.raises(ValueError, match="prompt_tokens"):
        ScheduleColumns.from_arrays({**good.to_arrays(), "prompt_tokens": np.array([0])})
    with pytest.raises(ValueError, match="send_offset_s"):
        ScheduleColumns.from_arrays({**good.to_arrays(), "send_offset_s": np.array([-1.0])})
    with pytest.raises(ValueError, match="block"):
        ScheduleColumns.from_arrays({**good.to_arrays(), "block_offsets": np.array([0, 2])})


def test_chain_depths_and_cycles():
    reqs = [
        PlannedRequest(index=0, send_offset_s=1, prompt_tokens=1, max_tokens=1),
        PlannedRequest(index=1, send_offset_s=0, prompt_tokens=1, max_tokens=1, after_index=0, think_time_s=2),
        PlannedRequest(index=2, send_offset_s=0, prompt_tokens=1, max_tokens=1, after_index=1, think_time_s=3),
    ]
    top, depth, extra_s = ScheduleColumns.from_requests(reqs).chain_depths(timeout_s=10)
    assert top.tolist() == [0, 0, 0] and depth.tolist() == [0, 1, 2] and extra_s.tolist() == [0, 12, 25]
    cyclic = [reqs[0].model_copy(update={"after_index": 2}), *reqs[1:]]
    with pytest.raises(ValueError, match="cycle"):
        ScheduleColumns.from_requests(cyclic).chain_depths()


@pytest.mark.parametrize("seed", range(5))
def test_most_within_is_the_two_pointer_count(seed):
    rng = np.random.default_rng(seed)
    t = np.sort(np.round(rng.exponential(0.01, size=500).cumsum(), 3))  # rounded: many ties and exact edges
    for window_s in (0.0, 0.01, 0.05, 1.0):
        best, lo = 0, 0
        for hi, x in enumerate(t.tolist()):
            while x - t[lo] > window_s:
                lo += 1
            best = max(best, hi - lo + 1)
        assert most_within(t, window_s) == best


def test_a_synthetic_trace_drawn_whole_array_is_its_row_stream():
    spec = SYNTH.model_copy(update={"shared_prefix_tokens": 5, "rate_rps": 3.0})
    drawn, _ = read_trace_columns(spec)
    streamed = columns_from_rows(iter_trace(spec), "synthetic")
    for name in ("arrival_s", "input_tokens", "output_tokens", "follows", "block_keys", "block_tokens"):
        assert np.array_equal(getattr(drawn, name), getattr(streamed, name)), name
    assert np.array_equal(drawn.block_offsets, streamed.block_offsets)


def test_building_from_a_long_trace_holds_its_numbers_not_its_rows(tmp_path):
    spec = WorkloadSpec(trace=AzureTraceSpec(path=azure_csv(tmp_path / "a.csv", 20_000, seed=1)))
    tracemalloc.start()
    try:
        schedule = build_schedule(spec)
        build_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        rows = read_trace(spec.trace).rows  # what the builder held before: every row as an object
        list_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(schedule.requests) == len(rows) == 20_000
    assert build_peak * 3 < list_peak, (build_peak, list_peak)  # about 150 B a row against 740


def test_validate_says_what_the_schedule_holds():
    line = schedule_line(build_schedule(SPECS[12]))
    assert line.startswith(f"{len(build_schedule(SPECS[12]).requests)} requests over ")
    assert "chained" in line and "clipped" in line and "prompt p50/p99" in line
