"""The one vLLM server command line: argv and environment of an engine, for every caller.

The EngineActor, the plugin-cost benchmark and the tests that start real engines all build it here,
so an engine in a test runs exactly as it does in a measured arm, and a result's recorded argv and
environment are what the engine got. Free of Ray: nothing here needs a cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from experiment.config import EngineSpec, ModelSpec
from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.settings import ARM_ENV, ENGINE_ENV, NODE_ENV, RUN_ID_ENV

Device = Literal["cpu", "cuda"]
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
    if device == "cuda" and flags is not None:
        argv += flags.vllm_args()
    return argv + list(engine.extra_args)


def server_env(
    engine: EngineSpec,
    flags: OptimizationFlags | None,
    device: Device,
    gpu_ids: Sequence[str] | None,
    labels: PluginLabels | None,
    metrics_dir: Path | None,
) -> dict[str, str]:
    """Without flags the plugin stays inert: the engine runs as if moeperf were not installed.

    ``gpu_ids`` None leaves CUDA_VISIBLE_DEVICES to the caller's environment; a list (Ray's devices
    for the arm) replaces it. ``metrics_dir`` is PROMETHEUS_MULTIPROC_DIR: vLLM sums every .db file in
    it, so each server start needs a fresh one or a failed attempt would count too.
    """
    env: dict[str, str] = {} if flags is None else dict(flags.engine_env())
    env["VLLM_SERVER_DEV_MODE"] = "1"  # for POST /reset_prefix_cache between rounds
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
) -> ServerCommand:
    """Argv and environment of one vLLM OpenAI server for ``model`` (weights at ``model_path``) on ``device``."""
    return ServerCommand(
        argv=server_argv(model, model_path, engine, flags, device, host, port),
        env=server_env(engine, flags, device, gpu_ids, labels, metrics_dir),
    )
