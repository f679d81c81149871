"""The driver's plan of turns: the warm-up pass of shared_warm runs once per distinct setting, before any arm."""

import pytest

from cluster.orchestration.driver import Driver, RoundBudget, RunError, Turn, arm_order, arm_settings, plan, plan_turns
from experiment.config import parse_experiment

ARMS = [
    {"name": "baseline"},
    {"name": "triton", "flags": {"moe_backend": "triton"}},
    {"name": "baseline-aa", "control_of": "baseline"},  # an A/A control shares its target's setting
    {"name": "triton-eager", "flags": {"moe_backend": "triton"}, "enforce_eager": True},  # eager: its own
]


def cfg(cache_state="shared_warm", placement="interleaved", rounds=2, arms=ARMS, first_round=0):
    seed = {"jit_cache_seed": "/earlier-run/jit-cache"} if cache_state == "seeded" else {}
    return parse_experiment(
        {
            "engine": {"cache_state": cache_state, "enforce_eager": False, **seed},
            "placement": placement,
            "rounds": rounds,
            "first_round": first_round,
            "arms": arms,
        }  # fmt: skip
    )


def test_settings_are_the_distinct_flags_and_eagerness_named_by_their_first_arm():
    settings = arm_settings(cfg())
    assert [(s.name, s.arms) for s in settings] == [
        ("baseline", ("baseline", "baseline-aa")),
        ("triton", ("triton",)),
        ("triton-eager", ("triton-eager",)),
    ]
    assert [s.enforce_eager for s in settings] == [False, False, True]


def test_two_arms_with_equal_flags_share_one_setting():
    same = [{"name": "a", "flags": {"swap_ab": True}}, {"name": "b", "flags": {"swap_ab": True}}]
    (setting,) = arm_settings(cfg(arms=same))
    assert setting.arms == ("a", "b")


def test_arms_whose_engines_get_other_variables_are_settings_of_their_own():
    arms = [
        {"name": "on"},
        {"name": "off", "engine_env": {"MOEPERF_EXPERT_LOAD": "0"}},
        {"name": "off-aa", "control_of": "off"},
        {"name": "on-aa", "control_of": "on"},
    ]
    settings = arm_settings(cfg(arms=arms))
    assert [(s.name, s.arms) for s in settings] == [("on", ("on", "on-aa")), ("off", ("off", "off-aa"))]
    assert [s.engine_env for s in settings] == [{}, {"MOEPERF_EXPERT_LOAD": "0"}]


def test_shared_warm_warms_each_setting_once_before_any_measured_arm_interleaved():
    turns = plan_turns(cfg())
    warm = [t for t in turns if t.kind == "warmup"]
    assert warm == [
        Turn("warmup", 0, ("baseline",)),
        Turn("warmup", 0, ("triton",)),
        Turn("warmup", 0, ("triton-eager",)),
    ]
    first_measured = next(i for i, t in enumerate(turns) if t.kind == "measured")
    assert turns[:first_measured] == warm  # all of them first, and nothing else before
    names = ("baseline", "triton", "baseline-aa", "triton-eager")
    assert turns[first_measured:] == [Turn("measured", 0, (n,)) for n in names] + [
        Turn("measured", 1, (n,)) for n in reversed(names)
    ]


def test_shared_warm_warms_before_the_parallel_rounds_too():
    turns = plan_turns(cfg(placement="parallel"))
    assert [t.kind for t in turns] == ["warmup"] * 3 + ["measured"] * 2
    assert turns[3] == Turn("measured", 0, ("baseline", "triton", "baseline-aa", "triton-eager"))


@pytest.mark.parametrize("cache_state", ["seeded", "cold_per_arm", "as_found"])
def test_seeded_cold_per_arm_and_as_found_run_no_warm_up(cache_state):
    turns = plan_turns(cfg(cache_state=cache_state))
    assert turns and all(t.kind == "measured" for t in turns)
    assert len(turns) == 2 * len(ARMS)


def driver_of(tmp_path, **kw):
    c = parse_experiment({**kw, "output_dir": str(tmp_path), "metrics": {"enabled": False}})
    d = Driver(c, None, ["moeperf", "run"])
    d.runners = d._runners(plan(c, None), "cpu")
    return d


def test_every_engine_of_a_shared_warm_run_gets_the_runs_one_cache_and_each_setting_a_warm_up_runner(tmp_path):
    d = driver_of(
        tmp_path,
        engine={"cache_state": "shared_warm", "enforce_eager": False},
        arms=ARMS,
        chaos={"kill_engine_after_records": {"baseline": 1}},
    )
    assert d.turns == plan_turns(d.cfg)  # the plan it runs
    warm = {name: w.runner for name, w in d.warmups.items()}
    assert list(warm) == ["baseline", "triton", "triton-eager"]
    shared = str(d.run_dir / "jit-cache")
    assert {r.jit_cache_dir for r in [*d.runners, *warm.values()]} == {shared}
    w = warm["baseline"]
    assert w.name == "warmup-baseline" and w.records_path == d.run_dir / "records" / "warmup-baseline.parquet"
    assert w.flags == d.cfg.arm_flags(d.cfg.arms[0]) and w.arm.enforce_eager is False
    assert warm["triton-eager"].arm.enforce_eager is True and warm["triton-eager"].flags.moe_backend == "triton"
    assert w.hooks.kill_engine_after_records is None  # chaos strikes measured arms only
    assert d.runners[0].hooks.kill_engine_after_records == 1
    assert w.observe is None  # unmeasured: never in the live client metrics


def test_cold_per_arm_gets_no_warm_up_runner_and_no_shared_cache(tmp_path):
    d = driver_of(tmp_path, engine={"cache_state": "cold_per_arm"}, arms=ARMS)
    assert d.warmups == {}
    assert all(r.jit_cache_dir is None for r in d.runners)


def test_a_seeded_run_copies_the_seed_into_its_one_cache_before_any_engine_and_says_so(tmp_path):
    seed = tmp_path / "earlier" / "jit-cache"
    (seed / "triton" / "ab12").mkdir(parents=True)
    (seed / "triton" / "ab12" / "fused_moe_kernel.cubin").write_bytes(b"\x7fELF" + bytes(996))
    (seed / "vllm" / "torch_compile_cache").mkdir(parents=True)
    (seed / "vllm" / "torch_compile_cache" / "graph.py").write_text("x = 1\n")
    d = driver_of(tmp_path / "runs", engine={"cache_state": "seeded", "jit_cache_seed": str(seed)}, arms=ARMS)
    assert d.warmups == {}  # the seed did the warming
    shared = d.run_dir / "jit-cache"
    assert {r.jit_cache_dir for r in d.runners} == {str(shared)}
    d._seed_jit_cache()
    assert (shared / "triton" / "ab12" / "fused_moe_kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (shared / "vllm" / "torch_compile_cache" / "graph.py").read_text() == "x = 1\n"
    assert d.seed_note == f"JIT cache seeded from {seed}: 2 files, 0.0 MB; no warm-up pass"
    (shared / "triton" / "new").mkdir()  # the run's engines write to their copy, never to the seed
    assert not (seed / "triton" / "new").exists()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: None, "is not a folder"),
        (lambda p: (p / "triton").mkdir(parents=True), "holds no JIT cache"),
    ],
)
def test_a_seed_that_is_missing_or_empty_stops_the_run_before_anything_starts(tmp_path, make, why):
    seed = tmp_path / "seed"
    make(seed)
    c = parse_experiment(
        {"engine": {"cache_state": "seeded", "jit_cache_seed": str(seed)}, "output_dir": str(tmp_path)}
    )
    with pytest.raises(RunError, match=f"engine.jit_cache_seed: .*{why}"):
        plan(c, None)


def test_a_time_budget_starts_a_round_only_if_the_longest_round_so_far_fits_in_what_is_left():
    b = RoundBudget(budget_s=100.0, started_s=0.0)
    assert b.starts(0, 10.0) and b.refuses(0, 10.0) is None  # the first round always runs
    assert not b.starts(0, 20.0)  # the same round's second turn
    b.turn_ended(0, 20.0)
    b.turn_ended(0, 40.0)  # round 0: 10 s to 40 s
    assert b.starts(1, 40.0) and b.refuses(1, 40.0) is None  # 60 s left >= 30 s
    b.turn_ended(1, 65.0)  # round 1: 25 s, so the longest stays 30 s
    assert b.starts(2, 65.0)
    assert b.refuses(2, 65.0) is None  # 35 s left
    b.turn_ended(2, 80.0)
    assert b.starts(3, 80.0)
    assert b.refuses(3, 80.0) == "20 s of time_budget_s=100 left, and the longest round took 30 s"
    unbounded = RoundBudget(budget_s=None, started_s=0.0)
    unbounded.starts(0, 0.0)
    unbounded.turn_ended(0, 1e6)
    assert unbounded.starts(1, 1e6) and unbounded.refuses(1, 1e6) is None


def test_three_arms_take_every_place_equally_often_and_each_pair_of_rounds_is_mirrored():
    """Mirroring alone (A B C, C B A) keeps the middle arm in the middle: on the H200 the middle engine, the A/A
    control, was 11% slower at c=64 in both rounds. Over 2k rounds every arm is in every place twice."""
    names = ("a", "a-aa", "b")
    orders = [arm_order(names, r) for r in range(6)]
    assert orders[:2] == [names, names[::-1]]  # rounds 0-1 as before: runs continued with first_round still pool
    assert all(orders[r + 1] == orders[r][::-1] for r in range(0, 6, 2))
    for n in names:
        assert sorted(o.index(n) for o in orders) == [0, 0, 1, 1, 2, 2]
    assert sorted(orders) == sorted(set(orders))  # six rounds, six different orders


def test_two_arms_keep_alternating():
    assert [arm_order(("a", "b"), r) for r in range(4)] == [("a", "b"), ("b", "a")] * 2


def test_a_continued_run_takes_up_the_rotation_where_it_stopped():
    arms = [{"name": "a"}, {"name": "a-aa", "control_of": "a"}, {"name": "b"}]
    turns = plan_turns(cfg(arms=arms, rounds=2, first_round=2, cache_state="seeded"))
    assert [(t.round, t.names) for t in turns] == [
        (2, ("a-aa",)), (2, ("b",)), (2, ("a",)), (3, ("a",)), (3, ("b",)), (3, ("a-aa",)),
    ]  # fmt: skip
