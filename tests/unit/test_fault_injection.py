"""The test machinery's one seam: a real experiment gets hooks that change nothing."""

from cluster.orchestration.fault_injection import NO_FAULTS, RoundFaults, hooks_for
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
