"""Sweep levels as planned before any engine starts: what each kind sends, its warm-up share, its prompts,
and the config errors a sweep that cannot be run gets before anything starts."""

from __future__ import annotations

import pytest

from cluster.orchestration.driver import RunError, plan_run
from experiment.config import ConfigError, parse_experiment
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.arrivals.constant import ConstantArrivalSpec
from workloads.arrivals.poisson import PoissonArrivalSpec
from workloads.levels import ConcurrencyLevel, RateLevel, TraceSpeedLevel
from workloads.sweep import SweepSpec, level_prompt_seed, level_workload, warmup_pass_levels
from workloads.traces.synthetic import SyntheticTraceSpec, load_synthetic
from workloads.workload import WorkloadSpec

SYNTH = {"kind": "synthetic", "num_requests": 40, "input_tokens": 16, "output_tokens": 8}


def sweep_cfg(levels: list[dict], **over: object):
    return parse_experiment({"workload": {"trace": SYNTH}, "sweep": {"levels": levels, **over}})


def test_each_kind_replaces_when_to_send_and_how_many_and_keeps_the_lengths() -> None:
    w = WorkloadSpec(speedup=3.0, input_scale=0.5)
    c = level_workload(ConcurrencyLevel(concurrency=4, requests=10), w)
    assert c.arrival == ClosedLoopArrivalSpec(concurrency=4) and c.first_requests == 10 and c.speedup == 1.0
    r = level_workload(RateLevel(rate_rps=2.5, duration_s=8), w)
    assert r.arrival == PoissonArrivalSpec(rate_rps=2.5) and r.first_requests == 20 and r.speedup == 1.0
    k = level_workload(RateLevel(rate_rps=2, requests=5, process="constant"), w)
    assert k.arrival == ConstantArrivalSpec(rate_rps=2) and k.first_requests == 5
    t = level_workload(TraceSpeedLevel(speedup=4, duration_s=10), w.model_copy(update={"window_start_s": 100.0}))
    assert t.speedup == 4 and t.first_requests is None and t.window_end_s == 100.0 + 40.0
    assert all(x.input_scale == 0.5 for x in (c, r, k, t))


def test_a_level_gets_the_first_requests_with_its_warm_up_share_marked_and_its_own_clock() -> None:
    _, (closed,) = plan_run(
        sweep_cfg([{"kind": "concurrency", "concurrency": 2, "requests": 10}], warmup_fraction=0.25), None
    )
    _, (open_,) = plan_run(sweep_cfg([{"kind": "rate", "rate_rps": 4, "requests": 7}], warmup_fraction=0.25), None)
    assert [r.index for r in closed.requests] == list(range(10)) and closed.label == "c=2"
    assert [r.index for r in closed.requests if r.warmup] == [0, 1, 2]  # ceil(0.25 * 10)
    assert [r.after_index for r in closed.requests][:4] == [None, None, 0, 1]  # two users
    assert open_.warmup_requests == 2 and open_.label == "4 req/s"
    assert open_.requests[0].send_offset_s == 0.0 and all(r.after_index is None for r in open_.requests)


def test_warm_up_leaves_at_least_one_measured_request() -> None:
    assert ConcurrencyLevel(concurrency=1, requests=1).warmup_count(1, 0.5) == 0
    assert ConcurrencyLevel(concurrency=1, requests=3, warmup_fraction=0.9).warmup_count(3, 0.1) == 2


def test_levels_run_as_listed_then_reversed_and_prompts_differ_per_level_and_round_only() -> None:
    sweep = SweepSpec(levels=[ConcurrencyLevel(concurrency=c, requests=4) for c in (1, 2, 4)])
    assert sweep.order(0) == [0, 1, 2] and sweep.order(1) == [2, 1, 0] and sweep.order(2) == [0, 1, 2]
    seeds = {level_prompt_seed(7, rnd, lv) for rnd in range(3) for lv in range(3)}
    assert len(seeds) == 9 and 7 not in seeds  # no level of any round shares prompts with another
    assert level_prompt_seed(7, 1, 2) == level_prompt_seed(7, 1, 2)  # every arm: the same prompts
    assert level_prompt_seed(7, 0, None) == 7  # no sweep: round 0 keeps the workload's seed ...
    unswept = {level_prompt_seed(7, rnd, None) for rnd in range(4)}
    assert len(unswept) == 4 and not unswept & seeds  # ... and every later round has prompts of its own


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ([{"kind": "rate", "rate_rps": 1}], "give exactly one of requests and duration_s"),
        ([{"kind": "rate", "rate_rps": 1, "requests": 3, "duration_s": 2}], "give exactly one of requests and"),
        ([{"kind": "concurrency", "concurrency": 2}], "sweep.levels.0.concurrency.requests"),
        (
            [{"kind": "concurrency", "concurrency": 1, "requests": 2}, {"kind": "rate", "rate_rps": 1, "requests": 2}],
            "one kind per sweep",
        ),
        ([{"kind": "concurrency", "concurrency": 1, "requests": 2}] * 2, "two levels named ['c=1']"),
        ([{"kind": "concurrency", "concurrency": 129, "requests": 2}], "sweep.levels.0.concurrency: 129 is above"),
        ([], "sweep.levels"),
    ],
)
def test_a_sweep_that_cannot_run_is_a_config_error_naming_the_field(levels: list[dict], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        sweep_cfg(levels)
    assert message in str(e.value), str(e.value)


def test_max_num_seqs_sets_the_concurrency_limit_and_reaches_the_engine() -> None:
    from cluster.engine.command import server_command  # noqa: F401  (the one command line: checked below)

    levels = [{"kind": "concurrency", "concurrency": 300, "requests": 2}]
    with pytest.raises(ConfigError, match=r"above engine.max_num_seqs \(256\)"):
        parse_experiment({"engine": {"max_num_seqs": 256}, "workload": {"trace": SYNTH}, "sweep": {"levels": levels}})
    ok = parse_experiment({"engine": {"max_num_seqs": 512}, "workload": {"trace": SYNTH}, "sweep": {"levels": levels}})
    assert ok.engine.max_num_seqs == 512
    gpu = parse_experiment(
        {"engine": {"device": "cuda", "accelerator_type": "H200", "tensor_parallel_size": 8},
         "workload": {"trace": SYNTH},
         "sweep": {"levels": [{"kind": "concurrency", "concurrency": 1024, "requests": 2}]}}
    )  # fmt: skip
    assert gpu.sweep is not None


def test_a_level_asking_for_more_requests_than_the_workload_has_fails_before_anything_starts() -> None:
    cfg = sweep_cfg([{"kind": "concurrency", "concurrency": 1, "requests": 41}])
    with pytest.raises(RunError, match=r"sweep.levels.0: asks for 41 requests but the workload has only 40"):
        plan_run(cfg, None)


def test_range_lengths_fall_in_range_ratio_times_the_target_to_the_target() -> None:
    spec = SyntheticTraceSpec(
        num_requests=2000,
        input_tokens={"kind": "range", "tokens": 1000, "range_ratio": 0.8},
        output_tokens={"kind": "range", "tokens": 7},
    )
    rows = load_synthetic(spec).rows
    inputs = [r.input_tokens for r in rows]
    assert min(inputs) >= 800 and max(inputs) <= 1000 and min(inputs) < 810 and max(inputs) > 990
    assert {r.output_tokens for r in rows} == {7}


def test_the_warm_up_pass_replays_the_first_share_of_each_level_and_at_least_its_concurrency() -> None:
    level = {"kind": "concurrency"}
    cfg = sweep_cfg([{**level, "concurrency": 8, "requests": 10}, {**level, "concurrency": 2, "requests": 30}])
    _, levels = plan_run(cfg, None)
    small, large = warmup_pass_levels(levels, cfg.sweep, cfg.workload, 0.25)
    assert len(small.requests) == 8  # ceil(2.5) = 3 would never reach 8 in flight
    assert len(large.requests) == 8 and large.requests[:8] == levels[1].requests[:8]  # ceil(7.5), the first ones
    assert (small.index, small.label, large.label) == (0, "c=8", "c=2")
    assert warmup_pass_levels(levels, cfg.sweep, cfg.workload, 1.0) is levels


@pytest.mark.parametrize(
    ("arrival", "kept"),
    [
        ({"kind": "closed_loop", "concurrency": 2}, 4),
        ({"kind": "closed_loop", "concurrency": 6}, 6),
        ({"kind": "poisson", "rate_rps": 1}, 4),
    ],
)
def test_the_warm_up_pass_of_a_run_without_a_sweep_replays_the_first_share_and_at_least_its_concurrency(
    arrival: dict, kept: int
) -> None:
    cfg = parse_experiment({"workload": {"trace": SYNTH, "arrival": arrival}, "engine": {"warmup_pass_fraction": 0.1}})
    _, levels = plan_run(cfg, None)
    (whole,) = warmup_pass_levels(levels, cfg.sweep, cfg.workload, cfg.engine.warmup_pass_fraction)
    assert [r.index for r in whole.requests] == list(range(kept))  # ceil(0.1 * 40) = 4


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5])
def test_a_warm_up_pass_fraction_outside_0_to_1_is_a_config_error_naming_the_field(fraction: float) -> None:
    with pytest.raises(ConfigError, match="warmup_pass_fraction"):
        parse_experiment({"workload": {"trace": SYNTH}, "engine": {"warmup_pass_fraction": fraction}})
