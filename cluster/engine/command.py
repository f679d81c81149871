"""The one vLLM server command line: argv and environment of an engine, for every caller.

The EngineActor, the plugin-cost benchmark and the tests that start real engines all build it here,
so an engine in a test runs exactly as it does in a measured arm, and a result's recorded argv and
environment are what the engine got. Free of Ray: nothing here needs a cluster.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import default_cache_dir
from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.settings import ARM_ENV, COMPILE_EVENTS_DIR_ENV, ENGINE_ENV, NODE_ENV, RUN_ID_ENV

Device = Literal["cpu", "cuda"]
JIT_CACHE_VARS = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "VLLM_CACHE_ROOT": "vllm"}
"""Every compile cache an engine fills, and its subfolder of a JIT cache dir. Inductor's and vLLM's caches hold
Triton binaries too: pointing Triton's alone somewhere would let an engine reuse compiles the others hold."""
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_GPU_MEMORY_UTILIZATION = 0.12  # on the CPU build: the share of RAM vLLM may take
CUDA_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class PluginLabels:
    """Who the worker plugin says it is on every metric it exports (``engine``, ``arm``, ``run_id``, ``node``)."""

    arm: str
    run_id: str
    engine: str
    node: str

    def env(self) -> dict[str, str]:
        return {ARM_ENV: self.arm, RUN_ID_ENV: self.run_id, ENGINE_ENV: self.engine, NODE_ENV: self.node}


@dataclass(frozen=True)
class ServerCommand:
    """``env`` is only what moeperf sets: the process gets it on top of its caller's environment."""

    argv: list[str]
    env: dict[str, str]


def server_argv(
    model: ModelSpec,
    model_path: str,
    engine: EngineSpec,
    flags: OptimizationFlags | None,
    device: Device,
    host: str,
    port: int,
) -> list[str]:
    """vLLM's flags of the arm only on CUDA: the CPU build has no MoE backends to choose between."""
    gpu_mem = engine.gpu_memory_utilization or (
        CPU_GPU_MEMORY_UTILIZATION if device == "cpu" else CUDA_GPU_MEMORY_UTILIZATION
    )
    argv = [
        sys.executable, "-m", SERVER_MODULE,
        "--model", model_path,
        "--served-model-name", model.served_name,
        "--host", host,
        "--port", str(port),
        "--load-format", model.load_format,
        "--dtype", model.dtype,
        "--max-model-len", str(model.max_model_len),
        "--tensor-parallel-size", str(engine.tensor_parallel_size),
        "--gpu-memory-utilization", str(gpu_mem),
    ]  # fmt: skip
    if engine.tensor_parallel_size > 1:
        argv += ["--distributed-executor-backend", "mp"]
    if model.quantization:
        argv += ["--quantization", model.quantization]
    if engine.enforce_eager:
        argv.append("--enforce-eager")
    if engine.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(engine.max_num_seqs)]
    if device == "cuda" and flags is not None:
        argv += flags.vllm_args()
    return argv + list(engine.extra_args)


class MissingSharedJitCache(ValueError):
    """cache_state shared_warm or seeded without the run's shared cache dir: the engine would start as found instead."""


def jit_cache_dir_for(engine: EngineSpec, shared_dir: Path | None, fresh_parent: Path) -> Path | None:
    """The JIT cache dir of one engine start, by ``engine.cache_state``.

    shared_warm and seeded: ``shared_dir``, the run's one cache (the same for every engine of the run, so
    every arm starts as warm as the others once the warm-up pass or the seed filled it); cold_per_arm: a new
    empty dir under ``fresh_parent``, per start; as_found: None, the node's caches as they are.
    """
    if engine.shares_run_cache:
        if shared_dir is None:
            raise MissingSharedJitCache(
                f"engine.cache_state {engine.cache_state} needs the run's shared JIT cache dir "
                "(EngineActor jit_cache_dir, <run_dir>/jit-cache); none was given"
            )
        shared_dir.mkdir(parents=True, exist_ok=True)
        return shared_dir
    if engine.cache_state == "cold_per_arm":
        fresh_parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix="jit-cache-", dir=fresh_parent))
        share_model_class_facts(fresh)
        return fresh
    return None


MODELINFOS_SUBDIR = Path("vllm") / "modelinfos"
"""Where vLLM keeps what it learned by importing a model class, under a JIT cache dir (VLLM_CACHE_ROOT/modelinfos)."""


def share_model_class_facts(jit_cache_dir: Path) -> Path:
    """Point a fresh JIT cache's ``vllm/modelinfos`` at one folder per node, and return that folder.

    Before it builds its config, vLLM's API server learns a few static facts about the model class (does it
    support pipeline parallelism, is it multimodal, ...) by importing the class in a child process, unless
    ``VLLM_CACHE_ROOT/modelinfos`` already holds them for that class's source (checked by its hash). With an
    empty cache per start that child ran for every engine. On 2 cores (vLLM 0.32 CPU, 2026-12-05) it was 10 s
    of a 44 s start, and the start took 34 s with the facts kept; on the H200 (vLLM 0.26) the same stretch of
    the engine's log, from its arguments to "Resolved architecture", was 24 s in each cold start logged. They
    are not compiled code: no kernel, graph or autotuning result is in them, so keeping them
    leaves a cold start as cold as ``cold_per_arm`` promises. vLLM writes each file atomically and ignores
    one whose hash does not match, so engines of several runs and vLLM versions can share the folder.
    """
    shared = default_cache_dir() / "vllm-modelinfos"
    shared.mkdir(parents=True, exist_ok=True)
    link = jit_cache_dir / MODELINFOS_SUBDIR
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists() and not link.is_symlink():
        link.symlink_to(shared, target_is_directory=True)
    return shared


def jit_cache_env(jit_cache_dir: Path) -> dict[str, str]:
    """Triton's, Inductor's and vLLM's compile caches in subfolders of ``jit_cache_dir``."""
    return {var: str(jit_cache_dir / sub) for var, sub in JIT_CACHE_VARS.items()}


def server_env(
    engine: EngineSpec,
    flags: OptimizationFlags | None,
    device: Device,
    gpu_ids: Sequence[str] | None,
    labels: PluginLabels | None,
    metrics_dir: Path | None,
    jit_cache_dir: Path | None = None,
    compile_events_dir: Path | None = None,
) -> dict[str, str]:
    """Without flags the plugin stays inert: the engine runs as if moeperf were not installed.

    ``gpu_ids`` None leaves CUDA_VISIBLE_DEVICES to the caller's environment; a list (Ray's devices
    for the arm) replaces it. ``metrics_dir`` is PROMETHEUS_MULTIPROC_DIR: vLLM sums every .db file in
    it, so each server start needs a fresh one or a failed attempt would count too. ``jit_cache_dir``
    (the engine's cache_state decides which, see ``cluster.engine.actor``) holds every compile cache;
    None leaves them where the environment has them. ``compile_events_dir`` is where each worker rank appends its
    Triton compiles (``moe_opt.plugin.compile_log``), fresh per server start like the metrics dir so a failed
    attempt's compiles are not collected. Set after the experiment's own variables: the cache state the result
    records must be the one the engine had.
    """
    env: dict[str, str] = {} if flags is None else dict(flags.engine_env())
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{engine.cpu_kvcache_space_gib:g}"
        if engine.tensor_parallel_size > 1:
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i) for i in range(engine.tensor_parallel_size))
    elif gpu_ids is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    env.update(engine.env)  # the experiment's own variables; moeperf's labels below must still be right
    if labels is not None:
        env |= labels.env()
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    if compile_events_dir is not None:
        env[COMPILE_EVENTS_DIR_ENV] = str(compile_events_dir)
    if jit_cache_dir is not None:
        env |= jit_cache_env(jit_cache_dir)
    return env


def server_command(
    model: ModelSpec,
    model_path: str,
    engine: EngineSpec,
    device: Device,
    host: str,
    port: int,
    *,
    flags: OptimizationFlags | None,
    labels: PluginLabels | None = None,
    metrics_dir: Path | None = None,
    gpu_ids: Sequence[str] | None = None,
    jit_cache_dir: Path | None = None,
    compile_events_dir: Path | None = None,
) -> ServerCommand:
    """Argv and environment of one vLLM OpenAI server for ``model`` (weights at ``model_path``) on ``device``."""
    return ServerCommand(
        argv=server_argv(model, model_path, engine, flags, device, host, port),
        env=server_env(engine, flags, device, gpu_ids, labels, metrics_dir, jit_cache_dir, compile_events_dir),
    )
