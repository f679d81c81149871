"""One vLLM server command line: what an arm's engine gets, and that every starter builds it the same way.

A test engine, the plugin-cost benchmark and a measured arm that spelled their command lines apart
could drift (a flag on one and not the other), and a test would then pass for an engine no run uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cluster.engine.actor import EngineActor
from cluster.engine.command import (
    JIT_CACHE_VARS,
    MODELINFOS_SUBDIR,
    MissingSharedJitCache,
    PluginLabels,
    server_command,
)
from experiment.config import EngineSpec, ModelSpec
from moe_opt.flags import FLAGS_ENV_VAR, OptimizationFlags
from moe_opt.plugin.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
MODEL = ModelSpec(served_name="m")
TRITON = OptimizationFlags(moe_backend="triton")


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_actor_bench_and_test_engines_use_the_one_command() -> None:
    from moe_opt.bench import plugin_cost
    from tests import engine_http

    assert plugin_cost.server_command is server_command and engine_http.server_command is server_command
    engine = EngineSpec(cache_state="as_found")
    actor = EngineActor("run-1", "fast", TRITON, MODEL, engine, "cuda", ["2", "3"])
    got = actor._command("/models/m", "127.0.0.1", 8123)
    want = server_command(MODEL, "/models/m", engine, "cuda", "127.0.0.1", 8123, flags=TRITON, gpu_ids=["2", "3"])
    assert got.argv == want.argv
    assert {k: v for k, v in got.env.items() if k in want.env} == want.env


def test_nothing_else_spells_a_vllm_server_command_line() -> None:
    sources = [p for p in REPO.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(REPO).parts)]
    spelled = [
        str(p.relative_to(REPO))
        for p in sources
        if p != Path(__file__).resolve() and '"--load-format"' in p.read_text(errors="replace")
    ]
    assert spelled == ["cluster/engine/command.py"]


def test_a_cpu_arm_gets_no_moe_backend_and_a_cuda_arm_does() -> None:
    cpu = server_command(MODEL, "/m", EngineSpec(), "cpu", "127.0.0.1", 1, flags=TRITON)
    cuda = server_command(MODEL, "/m", EngineSpec(), "cuda", "127.0.0.1", 1, flags=TRITON)
    cuda_auto = server_command(MODEL, "/m", EngineSpec(), "cuda", "127.0.0.1", 1, flags=OptimizationFlags())
    assert "--moe-backend" not in cpu.argv
    assert _value(cuda.argv, "--moe-backend") == "triton"
    assert "--moe-backend" not in cuda_auto.argv
    assert cpu.argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert (
        _value(cpu.argv, "--gpu-memory-utilization") == "0.12"
        and _value(cuda.argv, "--gpu-memory-utilization") == "0.9"
    )
    assert cpu.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in cuda.env


def test_tensor_parallel_and_the_experiments_own_arguments() -> None:
    engine = EngineSpec(tensor_parallel_size=2, enforce_eager=True, extra_args=["--seed", "7"])
    cmd = server_command(ModelSpec(quantization="fp8"), "/m", engine, "cpu", "0.0.0.0", 9000, flags=None)
    assert _value(cmd.argv, "--tensor-parallel-size") == "2"
    assert _value(cmd.argv, "--distributed-executor-backend") == "mp"
    assert _value(cmd.argv, "--quantization") == "fp8" and "--enforce-eager" in cmd.argv
    assert cmd.argv[-2:] == ["--seed", "7"]
    assert cmd.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"


def test_the_plugin_reads_back_what_the_command_sets(tmp_path: Path) -> None:
    labels = PluginLabels(arm="fast", run_id="r1", engine="r1/fast", node="n1")
    cmd = server_command(MODEL, "/m", EngineSpec(), "cuda", "h", 1, flags=TRITON, labels=labels, metrics_dir=tmp_path)
    settings = load_settings(cmd.env)
    assert settings is not None and settings.flags == TRITON
    assert (settings.arm, settings.run_id, settings.engine, settings.node) == ("fast", "r1", "r1/fast", "n1")
    assert cmd.env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)


def test_without_flags_the_plugin_stays_inert() -> None:
    cmd = server_command(MODEL, "/m", EngineSpec(), "cpu", "h", 1, flags=None)
    assert FLAGS_ENV_VAR not in cmd.env and load_settings(cmd.env) is None


def test_devices_are_replaced_only_when_given() -> None:
    inherit = server_command(MODEL, "/m", EngineSpec(), "cuda", "h", 1, flags=None)
    ray_gave = server_command(MODEL, "/m", EngineSpec(), "cuda", "h", 1, flags=None, gpu_ids=["4", "5"])
    assert "CUDA_VISIBLE_DEVICES" not in inherit.env and ray_gave.env["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_the_experiments_env_cannot_relabel_the_engine(tmp_path: Path) -> None:
    engine = EngineSpec(env={"MOEPERF_ARM": "other", "PROMETHEUS_MULTIPROC_DIR": "/elsewhere", "OMP_NUM_THREADS": "1"})
    labels = PluginLabels(arm="fast", run_id="r1", engine="e", node="n")
    cmd = server_command(MODEL, "/m", engine, "cpu", "h", 1, flags=None, labels=labels, metrics_dir=tmp_path)
    assert cmd.env["MOEPERF_ARM"] == "fast" and cmd.env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)
    assert cmd.env["OMP_NUM_THREADS"] == "1"


def _jit_env(actor: EngineActor) -> dict[str, str]:
    env = actor._command("/m", "127.0.0.1", 1).env
    return {k: v for k, v in env.items() if k in JIT_CACHE_VARS}


def test_shared_warm_points_every_engine_of_the_run_at_one_cache(tmp_path: Path) -> None:
    shared = tmp_path / "run-1" / "jit-cache"
    engine = EngineSpec(cache_state="shared_warm", env={"TRITON_CACHE_DIR": "/somewhere/else"})
    a = EngineActor("run-1", "a", TRITON, MODEL, engine, "cpu", [], jit_cache_dir=str(shared))
    b = EngineActor("run-1", "b", OptimizationFlags(), MODEL, engine, "cpu", [], jit_cache_dir=str(shared))
    want = {"TRITON_CACHE_DIR": str(shared / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(shared / "inductor"),
            "VLLM_CACHE_ROOT": str(shared / "vllm")}  # fmt: skip
    assert _jit_env(a) == _jit_env(b) == _jit_env(a) == want  # both arms, every start; the experiment's env loses
    assert shared.is_dir()


def test_shared_warm_without_the_runs_cache_is_refused() -> None:
    with pytest.raises(MissingSharedJitCache, match="jit_cache_dir"):
        EngineActor("run-1", "a", TRITON, MODEL, EngineSpec(cache_state="shared_warm"), "cpu", [])


def test_cold_per_arm_gets_empty_caches_per_engine_start_but_the_model_class_facts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "node-cache"))
    engine = EngineSpec(cache_state="cold_per_arm")
    actor = EngineActor("run-1", "a", TRITON, MODEL, engine, "cpu", [], jit_cache_dir=str(tmp_path / "unused"))
    first, second = _jit_env(actor), _jit_env(actor)
    assert set(first) == set(second) == set(JIT_CACHE_VARS)
    roots = {Path(first[v]).parent for v in JIT_CACHE_VARS}
    assert len(roots) == 1 and roots != {Path(second[v]).parent for v in JIT_CACHE_VARS}
    (root,) = roots
    assert root.parent == actor.log_dir
    # Fresh: nothing in it but vLLM's model-class facts, shared by every start on the node (not compiled code).
    files = [p for p in root.rglob("*") if not p.is_dir() or p.is_symlink()]
    assert (
        files == [root / MODELINFOS_SUBDIR]
        and (root / MODELINFOS_SUBDIR).resolve() == tmp_path / "node-cache" / "vllm-modelinfos"
    )
    assert Path(first["VLLM_CACHE_ROOT"]) / "modelinfos" == root / MODELINFOS_SUBDIR
    assert not (tmp_path / "unused").exists()


def test_as_found_leaves_the_caches_to_the_environment() -> None:
    engine = EngineSpec(cache_state="as_found", env={"TRITON_CACHE_DIR": "/warm/triton"})
    actor = EngineActor("run-1", "a", TRITON, MODEL, engine, "cpu", [])
    assert _jit_env(actor) == {"TRITON_CACHE_DIR": "/warm/triton"}
    assert set(JIT_CACHE_VARS).isdisjoint(server_command(MODEL, "/m", EngineSpec(), "cpu", "h", 1, flags=None).env)
