"""Per-rank TTFT and step phases from scheduler outputs (plain objects shaped like vLLM's)."""

from __future__ import annotations

from types import SimpleNamespace as NS

from moe_opt.plugin.steps import PrefillTracker


def new(rid: str, prompt_len: int, computed: int = 0) -> NS:
    return NS(req_id=rid, prompt_token_ids=list(range(prompt_len)), num_computed_tokens=computed)


def so(new_reqs=(), scheduled=None, finished=(), preempted=None, cached=None) -> NS:
    return NS(
        scheduled_new_reqs=list(new_reqs),
        num_scheduled_tokens=dict(scheduled or {}),
        finished_req_ids=set(finished),
        preempted_req_ids=preempted,
        scheduled_cached_reqs=cached or NS(req_ids=[], num_computed_tokens=[]),
    )


def test_prefill_in_one_step_then_decode() -> None:
    t = PrefillTracker()
    p = t.plan(so([new("a", 8)], {"a": 8}), step_start_s=10.0)
    assert p.phase == "prefill" and p.completing == [10.0]
    p = t.plan(so(scheduled={"a": 1}), step_start_s=11.0)
    assert p.phase == "decode" and p.completing == []
    assert len(t) == 0


def test_chunked_prefill_completes_in_the_last_chunk_with_first_step_start() -> None:
    t = PrefillTracker()
    assert t.plan(so([new("a", 10)], {"a": 4}), 1.0).completing == []
    assert t.plan(so(scheduled={"a": 4}), 2.0).completing == []
    assert t.plan(so(scheduled={"a": 2}), 3.0).completing == [1.0]


def test_prefix_cache_hit_counts_computed_tokens() -> None:
    t = PrefillTracker()
    assert t.plan(so([new("a", 10, computed=8)], {"a": 2}), 5.0).completing == [5.0]


def test_mixed_step_and_unscheduled_chunk() -> None:
    t = PrefillTracker()
    t.plan(so([new("a", 4)], {"a": 4}), 1.0)
    p = t.plan(so([new("b", 100)], {"a": 1, "b": 50}), 2.0)
    assert p.phase == "mixed" and p.completing == []
    p = t.plan(so(scheduled={"a": 1}), 3.0)  # b not scheduled this step
    assert p.phase == "decode"
    assert t.plan(so(scheduled={"b": 50}), 4.0).completing == [2.0]


def test_empty_step_has_no_phase_and_finished_requests_are_forgotten() -> None:
    t = PrefillTracker()
    t.plan(so([new("a", 100)], {"a": 10}), 1.0)
    assert t.plan(so(), 2.0).phase is None
    t.plan(so(finished={"a"}), 3.0)
    assert len(t) == 0


def test_preempted_request_resyncs_from_the_cached_data() -> None:
    t = PrefillTracker()
    t.plan(so([new("a", 20)], {"a": 10}), 1.0)
    t.plan(so(preempted={"a"}), 2.0)
    cached = NS(req_ids=["a"], num_computed_tokens=[0])
    assert t.plan(so(scheduled={"a": 10}, cached=cached), 3.0).completing == []
    assert t.plan(so(scheduled={"a": 10}), 4.0).completing == [1.0]
