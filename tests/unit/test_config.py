from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from experiment.config import ConfigError, ExperimentConfig, load_experiment, parse_experiment
from moe_opt.flags import OptimizationFlags

REPO = Path(__file__).resolve().parents[2]


def test_embedded_default_is_the_quick_cpu_experiment():
    assert load_experiment(REPO / "experiments" / "quick-cpu.yaml") == ExperimentConfig()
    # ...and spells out every field, so a reader of the file sees each setting the default run has.
    spelled = yaml.safe_load((REPO / "experiments" / "quick-cpu.yaml").read_text())
    assert spelled == ExperimentConfig().model_dump(mode="json")


def test_default_has_baseline_and_all_optimizations_arms():
    arms = {a.name: a.flags for a in ExperimentConfig().arms}
    assert arms["baseline"].is_baseline()
    assert arms["all-optimizations"] == OptimizationFlags(swap_ab=True, moe_backend="triton", no_respecialize=True)


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_experiment_file_validates(path):
    cfg = load_experiment(path)
    assert cfg.arms


MACHINE_LOCAL = {"h200-tuned-dsv3-fp8.yaml": "tuned_config_dir"}
"""Experiments naming a folder that exists only on the machine that runs them, and the field that names it."""


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_experiment_file_plans(path):
    """Validating the fields is not enough: h200-jit-seed.yaml validated, and on the H200 its synthetic trace (no
    timestamps, no arrival) stopped the run with exit 2 before any engine. Planning is what ``moeperf run`` does
    first: trace, arrivals, levels and lengths, with no Ray and no engine."""
    from cluster.orchestration.driver import RunError, plan

    cfg = load_experiment(path)
    if path.name in MACHINE_LOCAL:
        with pytest.raises(RunError, match=MACHINE_LOCAL[path.name]):
            plan(cfg, path.parent)
        return
    assert len(plan(cfg, path.parent).requests) > 0


def test_every_yaml_file_in_the_repo_parses():
    skip = {".git", "runs", "node_modules"}
    files = [p for p in REPO.rglob("*.y*ml") if not skip & set(p.relative_to(REPO).parts)]
    assert files
    for p in files:
        assert yaml.safe_load(p.read_text()) is not None, p


def test_unknown_key_is_rejected_with_its_field_path():
    with pytest.raises(ConfigError) as e:
        parse_experiment({"engine": {"tensor_paralel_size": 8}}, "exp.yaml")
    assert "exp.yaml" in str(e.value)
    assert "engine.tensor_paralel_size" in str(e.value)


def test_bad_value_names_the_field():
    with pytest.raises(ConfigError) as e:
        parse_experiment({"workload": {"speedup": -1}}, "x.yaml")
    assert "workload.speedup" in str(e.value)


def test_duplicate_arm_names_rejected():
    with pytest.raises(ConfigError, match="duplicate arm name"):
        parse_experiment({"arms": [{"name": "a"}, {"name": "a"}]})


def test_chaos_must_name_a_real_arm():
    with pytest.raises(ConfigError, match="unknown arm"):
        parse_experiment({"arms": [{"name": "a"}], "chaos": {"kill_engine_after_records": {"b": 1}}})


def test_meaningless_flag_combination_is_a_config_error():
    with pytest.raises(ConfigError, match="arms.0.flags"):
        parse_experiment({"arms": [{"name": "a", "flags": {"swap_ab": True, "moe_backend": "flashinfer_cutlass"}}]})


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\narms: [\n  - {name: a\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: not valid YAML"):
        load_experiment(p)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "nope.yaml")


def test_gpu_shape_of_the_same_file():
    cfg = parse_experiment(
        {
            "model": {"path": "/models/mixtral", "load_format": "dummy", "quantization": "fp8"},
            "engine": {"device": "cuda", "tensor_parallel_size": 8, "accelerator_type": "H200"},
        }
    )
    assert cfg.engine.tensor_parallel_size == 8


def test_every_field_is_described():
    missing = []

    def walk(model, prefix=""):
        for name, f in model.model_fields.items():
            if not f.description and name not in ("schema_version",):
                missing.append(prefix + name)
            ann = f.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann, prefix + name + ".")

    walk(ExperimentConfig)
    assert missing == []


def test_arm_enforce_eager_overrides_the_engine_and_a_control_inherits_it():
    warm = {"name": "warm", "enforce_eager": False}
    arms = [{"name": "cold"}, warm, {"name": "warm-aa", "control_of": "warm"}]
    cfg = parse_experiment({"engine": {"enforce_eager": True}, "arms": arms}, "x.yaml")
    assert [cfg.arm_enforce_eager(a) for a in cfg.arms] == [True, False, False]
    with pytest.raises(ConfigError, match=r"arms\.1\.enforce_eager: an A/A control must run like 'warm'"):
        parse_experiment({"arms": [warm, {"name": "aa", "control_of": "warm", "enforce_eager": True}]}, "x.yaml")


def test_arm_engine_env_is_laid_over_the_engine_and_a_control_inherits_it():
    off = {"name": "count-off", "engine_env": {"MOEPERF_EXPERT_LOAD": "0"}}
    arms = [{"name": "count-on"}, off, {"name": "count-off-aa", "control_of": "count-off"}]
    cfg = parse_experiment({"engine": {"env": {"MOEPERF_ROUTER_BIAS": "uniform"}}, "arms": arms}, "x.yaml")
    assert [cfg.arm_engine_env(a) for a in cfg.arms] == [
        {"MOEPERF_ROUTER_BIAS": "uniform"},
        {"MOEPERF_ROUTER_BIAS": "uniform", "MOEPERF_EXPERT_LOAD": "0"},
        {"MOEPERF_ROUTER_BIAS": "uniform", "MOEPERF_EXPERT_LOAD": "0"},
    ]
    # Written without the field where it is empty, so results from before it existed dump (and combine) the same.
    dumped = cfg.model_dump(mode="json")["arms"]
    assert "engine_env" not in dumped[0] and dumped[1]["engine_env"] == {"MOEPERF_EXPERT_LOAD": "0"}
    assert parse_experiment(cfg.model_dump(mode="json"), "again.yaml") == cfg
    with pytest.raises(ConfigError, match=r"arms\.1\.engine_env: an A/A control must run like 'count-off'"):
        parse_experiment({"arms": [off, {"name": "aa", "control_of": "count-off", "engine_env": {"X": "1"}}]}, "x")


def test_a_partial_engine_section_keeps_the_experiment_defaults_it_does_not_set():
    """``--set engine.api_key_env=K`` (or ``engine: {tensor_parallel_size: 2}``) must not also switch the engines to
    torch.compile and a warm-up pass: the section is laid over the experiment's default engine."""
    default = parse_experiment({}).engine
    partial = parse_experiment({"engine": {"api_key_env": "K"}}).engine
    assert (partial.enforce_eager, partial.cache_state) == (default.enforce_eager, default.cache_state)
    assert (default.enforce_eager, default.cache_state) == (True, "cold_per_arm")
    assert partial.api_key_env == "K"
    chosen = parse_experiment({"engine": {"enforce_eager": False, "cache_state": "shared_warm"}}).engine
    assert (chosen.enforce_eager, chosen.cache_state) == (False, "shared_warm")
    legacy = parse_experiment({"engine": {"fresh_triton_cache": False}}).engine
    assert legacy.cache_state == "as_found"


def test_a_control_of_a_flagged_arm_reads_back_from_the_saved_config():
    # Seen on the H200 (2026-12-02): the result of an experiment whose control duplicates a flagged arm could
    # not be read back, because the saved config gave the control default flags that differ from its target's.
    cfg = parse_experiment(
        {"name": "x", "arms": [{"name": "off", "flags": {"swap_ab": False}}, {"name": "off-c", "control_of": "off"}]}
    )
    saved = cfg.model_dump(mode="json")
    assert "flags" not in saved["arms"][1]
    again = ExperimentConfig.model_validate(yaml.safe_load(yaml.safe_dump(saved)))
    assert again == cfg and again.arm_flags(again.arms[1]).swap_ab is False
    # A file written before the fix (the control's flags at their defaults) still reads, as the target's flags.
    saved["arms"][1]["flags"] = OptimizationFlags().model_dump(mode="json")
    old = ExperimentConfig.model_validate(saved)
    assert old.arm_flags(old.arms[1]).swap_ab is False
    # ... and dumps as a newer file does, so that moeperf combine can pool holds written before and after the fix.
    assert old.model_dump(mode="json") == cfg.model_dump(mode="json")
    # Flags given and different from both are still refused.
    saved["arms"][1]["flags"] = {"swap_ab": True}
    with pytest.raises(ValidationError, match="an A/A control must have the flags of 'off'"):
        ExperimentConfig.model_validate(saved)


def test_seeded_needs_a_seed_and_a_seed_needs_seeded():
    ok = parse_experiment({"engine": {"cache_state": "seeded", "jit_cache_seed": "/runs/r/jit-cache"}}).engine
    assert ok.shares_run_cache and ok.jit_cache_seed == "/runs/r/jit-cache"
    with pytest.raises(ConfigError, match="cache_state seeded needs jit_cache_seed"):
        parse_experiment({"engine": {"cache_state": "seeded"}})
    with pytest.raises(ConfigError, match="jit_cache_seed is used only with cache_state seeded, not shared_warm"):
        parse_experiment({"engine": {"cache_state": "shared_warm", "jit_cache_seed": "/runs/r/jit-cache"}})
