"""Cross-rank stall: two ranks' rings on one file, and the collective clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_opt.plugin.sync import CollectiveClock, SyncRing, ring_path, time_collectives


def test_stall_is_time_in_collectives_beyond_the_fastest(tmp_path: Path) -> None:
    path = str(tmp_path / "ring")
    r0, r1 = SyncRing(path, 2, 0, slots=8), SyncRing(path, 2, 1, slots=8)
    # rank 1 was delayed 50 ms before its forward: rank 0 waited for it inside the all-reduce
    r0.write(0, enter_s=1.0, busy_s=0.010, collective_s=0.052)
    assert r0.resolve() == []  # rank 1 has not written step 0 yet: nothing waits
    r1.write(0, enter_s=1.0, busy_s=0.060, collective_s=0.002)
    (s0,) = r0.resolve()
    (s1,) = r1.resolve()
    assert s0.step == s1.step == 0
    assert s0.stall_s == pytest.approx(0.050) and s1.stall_s == 0.0
    assert s0.skew_s == pytest.approx(0.050) == s1.skew_s


def test_overwritten_or_abandoned_steps_are_dropped(tmp_path: Path) -> None:
    path = str(tmp_path / "ring")
    r0, r1 = SyncRing(path, 2, 0, slots=4), SyncRing(path, 2, 1, slots=4)
    for step in range(3):  # rank 1 never writes: rank 0 gives up instead of growing
        r0.write(step, 0.0, 0.0, 0.0)
    assert r0.resolve() == [] and len(r0._pending) < 2  # bounded: old steps abandoned
    r1.write(4, 0.0, 0.0, 0.0)  # slot of step 0 now holds step 4
    r0.write(0, 0.0, 0.0, 0.0)
    assert r0.resolve() == []


def test_ring_path_is_shared_by_ranks_and_differs_between_engines() -> None:
    assert ring_path("tcp://127.0.0.1:1|7|0", 2) == ring_path("tcp://127.0.0.1:1|7|0", 2)
    assert ring_path("tcp://127.0.0.1:1|7|0", 2) != ring_path("tcp://127.0.0.1:2|7|0", 2)


def test_clock_counts_nested_collectives_once() -> None:
    clock = CollectiveClock()

    class Group:
        def all_reduce(self, x: int) -> int:
            return self._all_reduce_out_place(x)

        def _all_reduce_out_place(self, x: int) -> int:
            return x + 1

    wrapped = time_collectives(Group, clock)
    assert wrapped == ["all_reduce", "_all_reduce_out_place"]
    assert time_collectives(Group, clock) == []  # idempotent
    assert Group().all_reduce(1) == 2
    assert clock.seconds > 0
    first = clock.take()
    assert clock.seconds == 0.0 and first > 0


def test_timed_collective_traces_under_fullgraph_compile_and_times_eager_calls() -> None:
    """vLLM compiles the model fullgraph by default: a host timer inside the trace failed engine start on the H200.

    A collective called while Dynamo traces must pass straight through; called eagerly, it is timed.
    """
    torch = pytest.importorskip("torch")
    clock = CollectiveClock()

    class Group:
        def all_reduce(self, x):
            return x * 2

    assert time_collectives(Group, clock) == ["all_reduce"]
    group = Group()

    def forward(x):
        return group.all_reduce(x) + 1

    compiled = torch.compile(forward, fullgraph=True, backend="eager")
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 3.0))
    assert clock.take() == 0.0  # traced, not timed
    assert torch.equal(forward(torch.ones(3)), torch.full((3,), 3.0))
    assert clock.take() > 0.0
