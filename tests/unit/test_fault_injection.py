"""The test machinery's one seam: a real experiment gets hooks that change nothing."""

import re

import pytest

from cluster.orchestration.fault_injection import (
    NO_FAULTS,
    TEST_FAULTS_ENV,
    FaultSpecError,
    InjectedDriverFault,
    InjectedFaults,
    RoundFaults,
    hooks_for,
    injected_faults,
    run_hooks_for,
)
from experiment.config import parse_experiment


def test_a_real_experiment_gets_hooks_that_change_nothing():
    hooks = hooks_for(parse_experiment({}), "baseline")
    assert hooks.engine_device("cuda") == "cuda" and hooks.engine_device("cpu") == "cpu"
    assert hooks.engine_spec_update() == {} and hooks.notes() == []
    assert hooks.round_faults(0, engine=None, clients=[]) is NO_FAULTS
    NO_FAULTS.records_received(10**9)  # nothing to kill, nothing raised


def test_simulated_gpus_start_the_cpu_engine_at_its_own_tp_and_say_so():
    cfg = parse_experiment(
        {
            "engine": {"tensor_parallel_size": 8},
            "simulate": {"cpu_engine_on_simulated_gpus": True, "engine_tensor_parallel_size": 1},
        }
    )
    hooks = hooks_for(cfg, "baseline")
    assert hooks.engine_device("cuda") == "cpu"
    assert hooks.engine_spec_update() == {"tensor_parallel_size": 1}
    (note,) = hooks.notes()
    assert "TP=8 GPU bundles" in note and "CPU build at TP=1" in note


def test_chaos_is_per_arm_and_strikes_in_the_first_round_only():
    cfg = parse_experiment({"arms": [{"name": "a"}, {"name": "b"}], "chaos": {"kill_engine_after_records": {"b": 3}}})
    assert hooks_for(cfg, "a").round_faults(0, engine=None, clients=[]) is NO_FAULTS
    b = hooks_for(cfg, "b")
    assert isinstance(b.round_faults(0, engine=None, clients=[]), RoundFaults)
    assert b.round_faults(1, engine=None, clients=[]) is NO_FAULTS


def test_no_injected_faults_unless_the_environment_asks():
    assert injected_faults({}) == InjectedFaults()
    assert injected_faults({TEST_FAULTS_ENV: " "}) == InjectedFaults()
    hooks = run_hooks_for(parse_experiment({}))
    for turn in range(1, 10):
        hooks.after_turn(turn)  # nothing raised
    assert hooks_for(parse_experiment({}), "baseline").client_fault(0) is None


def test_injected_faults_reach_the_arm_and_the_driver(monkeypatch):
    monkeypatch.setenv(TEST_FAULTS_ENV, '{"fail_dispatch_after_records": {"b": 2}, "driver_error_after_turns": 3}')
    cfg = parse_experiment({"arms": [{"name": "a"}, {"name": "b"}]})
    assert hooks_for(cfg, "a").client_fault(0) is None
    b = hooks_for(cfg, "b")
    assert b.client_fault(0) == 2 and b.client_fault(1) is None  # first round only, like chaos
    assert hooks_for(cfg, "b", warmup=True).client_fault(0) is None  # never a warm-up engine's
    hooks = run_hooks_for(cfg)
    hooks.after_turn(2)
    with pytest.raises(InjectedDriverFault, match="after 3 turn"):
        hooks.after_turn(3)


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ('{"driver_error_after_turn": 1}', "driver_error_after_turn"),
        ('{"fail_dispatch_after_records": {"a": "x"}}', "fail_dispatch_after_records.a"),
        ("not json", TEST_FAULTS_ENV),
    ],
)
def test_a_malformed_fault_spec_is_an_error_naming_the_key(raw, names):
    with pytest.raises(FaultSpecError, match=re.escape(names)):
        injected_faults({TEST_FAULTS_ENV: raw})


def test_a_fault_for_an_arm_the_experiment_lacks_is_refused(monkeypatch):
    monkeypatch.setenv(TEST_FAULTS_ENV, '{"fail_dispatch_after_records": {"nope": 1}}')
    with pytest.raises(FaultSpecError, match=r"unknown arm\(s\) \['nope'\]"):
        run_hooks_for(parse_experiment({}))


def test_warm_up_engines_get_no_chaos_but_the_same_simulated_placement():
    cfg = parse_experiment(
        {
            "arms": [{"name": "a"}],
            "chaos": {"kill_engine_after_records": {"a": 1}},
            "simulate": {"cpu_engine_on_simulated_gpus": True},
        }
    )
    w = hooks_for(cfg, "a", warmup=True)
    assert w.round_faults(0, engine=None, clients=[]) is NO_FAULTS
    assert w.simulated_gpus and w.engine_device("cuda") == "cpu"
