"""``flags.tuned_config_dir``: what it accepts, the environment it gives the engine, how a missing folder is
refused before anything starts, and how an engine that loaded its MoE configs elsewhere is named.

The observation is the plugin's own output: its label builder, flag decoding and metric objects rendered by
prometheus_client, then read back by ``observe_engine``, as in ``test_observed.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from cluster.cli.main import main as moeperf_main
from cluster.engine.command import server_env
from cluster.engine.observed import flag_mismatch, flags_applied, observe_engine
from experiment.config import ConfigError, EngineSpec, parse_experiment
from moe_opt.flags import (
    FLAGS_ENV_VAR,
    SWITCHES,
    TUNED_CONFIG_ENV_VAR,
    OptimizationFlags,
    UnsupportedFlagCombination,
)
from moe_opt.plugin import hooks
from moe_opt.plugin.metrics import MOE_CONFIG_LOOKUPS, PLUGIN_INFO, Metrics
from moe_opt.plugin.settings import load_settings
from moe_opt.tune.folder import folder_problem

FILE = "E=8,N=64,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


@pytest.fixture(autouse=True)
def _triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "triton_version", lambda: "3.6.0")  # keeps vLLM out of these tests' imports


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / FILE).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}}))
    return folder


def test_the_flag_is_optional_absolute_and_triton_only(tuned: Path) -> None:
    assert OptimizationFlags().tuned_config_dir is None and OptimizationFlags().is_baseline()
    flags = OptimizationFlags(moe_backend="triton", tuned_config_dir=str(tuned))
    assert OptimizationFlags(tuned_config_dir=str(tuned)).moe_backend == "auto"
    with pytest.raises(ValueError, match="must be an absolute path"):
        OptimizationFlags(tuned_config_dir="tuned")
    with pytest.raises(ValidationError, match="tuned_config_dir holds Triton .* moe_backend='flashinfer_cutlass'") as e:
        OptimizationFlags(moe_backend="flashinfer_cutlass", tuned_config_dir=str(tuned))
    assert isinstance(e.value.errors()[0]["ctx"]["error"], UnsupportedFlagCombination)
    assert flags.describe() == f"moe_backend=triton swap_ab=vllm-default no_respecialize=false tuned_config_dir={tuned}"
    assert OptimizationFlags().describe() == "moe_backend=auto swap_ab=vllm-default no_respecialize=false"
    assert "tuned_config_dir" not in SWITCHES  # vLLM applies it; the observed config sources prove it


def test_the_engine_gets_vllms_variable_from_the_flags_only(tuned: Path) -> None:
    flags = OptimizationFlags(moe_backend="triton", tuned_config_dir=str(tuned))
    assert flags.engine_env() == {FLAGS_ENV_VAR: flags.model_dump_json(), TUNED_CONFIG_ENV_VAR: str(tuned)}
    assert TUNED_CONFIG_ENV_VAR not in OptimizationFlags().engine_env()
    env = server_env(EngineSpec(), flags, "cuda", ["0"], None, None)
    assert env[TUNED_CONFIG_ENV_VAR] == str(tuned)
    assert OptimizationFlags.from_env(env) == flags  # what the plugin decodes in each worker
    # Old flag JSON (results, plugin labels written before the field) still decodes, as vLLM's default.
    old = json.dumps({"swap_ab": True, "moe_backend": "triton", "no_respecialize": False})
    assert OptimizationFlags.model_validate_json(old).tuned_config_dir is None


def _experiment(folder: str, engine_env: dict[str, str] | None = None) -> dict[str, object]:
    arms = [{"name": "baseline"}, {"name": "tuned", "flags": {"moe_backend": "triton", "tuned_config_dir": folder}}]
    return {"arms": arms} | ({"engine": {"env": engine_env}} if engine_env else {})


def test_an_experiment_naming_a_missing_or_empty_folder_fails_validation_naming_the_field(
    tmp_path: Path, tuned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.json").write_text("{}")
    for folder, why in ((tmp_path / "nowhere", "does not exist"), (empty, "holds no vLLM tuned MoE config file")):
        path = tmp_path / "e.yaml"
        path.write_text(yaml.safe_dump(_experiment(str(folder))))
        assert moeperf_main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"arms.1.flags.tuned_config_dir: {folder} {why}" in err
    path.write_text(yaml.safe_dump(_experiment(str(tuned))))
    assert moeperf_main(["validate", str(path)]) == 0
    assert folder_problem(str(tuned)) is None


def test_the_folder_cannot_also_come_from_engine_env(tuned: Path) -> None:
    with pytest.raises(ConfigError, match=f"engine.env.{TUNED_CONFIG_ENV_VAR}: an arm sets flags.tuned_config_dir"):
        parse_experiment(_experiment(str(tuned), {TUNED_CONFIG_ENV_VAR: "/elsewhere"}))
    parse_experiment({"engine": {"env": {TUNED_CONFIG_ENV_VAR: "/elsewhere"}}})  # every arm alike: allowed
    exp = _experiment(str(tuned))
    exp["arms"][0]["engine_env"] = {TUNED_CONFIG_ENV_VAR: "/elsewhere"}  # type: ignore[index]
    with pytest.raises(ConfigError, match=f"arms.0.engine_env.{TUNED_CONFIG_ENV_VAR}: an arm sets flags.tuned_config"):
        parse_experiment(exp)


def engine_text(flags: OptimizationFlags, platform: str, lookups: list[tuple[str, str]]) -> str:
    """/metrics of a one-rank engine whose plugin decoded ``flags`` and saw these (file, source) lookups."""
    reg = CollectorRegistry()
    metrics = Metrics(reg)
    settings = load_settings(flags.engine_env() | {"MOEPERF_RUN_ID": "run-1", "MOEPERF_ARM": "arm"})
    assert settings is not None
    lab = {"engine": "run-1/arm", "arm": "arm", "node": "n", "rank": "0", "gpu": "0", "gpu_uuid": "0"}
    status = {
        s: ("applied" if platform == "cuda" else "not_applicable_cpu") if flags.asks_for(s) else "vllm_default"
        for s in SWITCHES
    }
    info = hooks.info_labels(
        lab, settings, status, vllm_version="0.26.0", platform=platform, world_size=1, engine_moe_backend="triton"
    )
    metrics.get(PLUGIN_INFO).labels(**info).set(1)
    for config_file, source in lookups:
        metrics.get(MOE_CONFIG_LOOKUPS).labels(*lab.values(), config_file, source).inc(2)
    return generate_latest(reg).decode()


def test_on_cuda_a_config_loaded_from_elsewhere_or_default_is_a_mismatch_naming_the_file(tuned: Path) -> None:
    flags = OptimizationFlags(moe_backend="triton", tuned_config_dir=str(tuned))
    here = [(FILE, str(tuned / FILE))]
    assert flag_mismatch(flags, observe_engine(engine_text(flags, "cuda", here)), "cuda") is None
    assert flags_applied(flags, observe_engine(engine_text(flags, "cuda", here)), "cuda")
    other = "E=8,N=32,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    shipped = f"/site-packages/vllm/model_executor/layers/fused_moe/configs/{other}"
    for lookups, named in (
        (here + [(other, "default")], f"{other} from default"),
        (here + [(other, shipped)], f"{other} from {shipped}"),
    ):
        why = flag_mismatch(flags, observe_engine(engine_text(flags, "cuda", lookups)), "cuda") or ""
        assert why == f"tuned_config_dir={tuned} was requested but vLLM loaded {named}, not from that folder"
    none = flag_mismatch(flags, observe_engine(engine_text(flags, "cuda", [])), "cuda") or ""
    assert "no Triton MoE config lookup was observed" in none
    # An arm without the flag is not judged on where its configs came from.
    assert (
        flag_mismatch(OptimizationFlags(), observe_engine(engine_text(OptimizationFlags(), "cuda", [])), "cuda") is None
    )


def test_on_cpu_it_stays_not_applicable(tuned: Path) -> None:
    flags = OptimizationFlags(tuned_config_dir=str(tuned))
    observed = observe_engine(engine_text(flags, "cpu", []))
    assert flag_mismatch(flags, observed, "cpu") is None and not flags_applied(flags, observed, "cpu")
