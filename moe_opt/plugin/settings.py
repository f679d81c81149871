"""What the plugin learns from its environment, read once per process.

Everything the plugin does is driven by environment variables that the EngineActor sets on the vLLM
server, so that every vLLM process of one engine (API server, engine core, one worker per rank) sees
the same values without any RPC. Without ``MOEPERF_ARM_FLAGS`` the plugin does nothing at all: a
vLLM engine not started by moeperf must behave exactly as without the plugin installed.

The flags are decoded with ``OptimizationFlags``, the same model the experiment file uses, so the
plugin can neither default a flag differently nor accept one the harness would refuse. This module
runs inside vLLM's processes: it may use pydantic (vLLM needs it) but never ``cluster``.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from moe_opt.flags import FLAGS_ENV_VAR, OptimizationFlags
from moe_opt.plugin.router_bias import ENV as ROUTER_BIAS_ENV
from moe_opt.plugin.router_bias import RouterBias, RouterBiasError, parse_router_bias

ARM_ENV = "MOEPERF_ARM"
RUN_ID_ENV = "MOEPERF_RUN_ID"
ENGINE_ENV = "MOEPERF_ENGINE"
NODE_ENV = "MOEPERF_NODE"
METRICS_PORT_ENV = "MOEPERF_METRICS_PORT"
EXTRA_NO_RESPECIALIZE_ENV = "MOEPERF_NO_RESPECIALIZE_KERNELS"
GPU_POLL_ENV = "MOEPERF_GPU_POLL_S"
EXPERT_LOAD_ENV = "MOEPERF_EXPERT_LOAD"  # "0": do not count tokens per expert (on otherwise, like kernel choices)
EXPERT_LOAD_OVERLAP = "overlap"  # MOEPERF_EXPERT_LOAD value: count on a side stream joined at the layer's end
COMPILE_EVENTS_DIR_ENV = "MOEPERF_COMPILE_EVENTS_DIR"  # each rank appends its Triton compiles to rank<N>.jsonl here
# Test-only knobs: never set by moeperf itself.
TEST_RANK_DELAY_ENV = "MOEPERF_TEST_RANK_DELAY"  # "RANK:SECONDS": sleep that long on that rank in every step
TEST_MISSING_TARGET_ENV = "MOEPERF_TEST_MISSING_TARGET"  # flag name whose patch target is made to be missing
TEST_FORCE_PATCHES_ENV = "MOEPERF_TEST_FORCE_PATCHES"  # "1": apply flag patches even on CPU


class PluginConfigError(ValueError):
    """An environment variable of the plugin cannot be understood."""


@dataclass(frozen=True)
class RankDelay:
    rank: int
    seconds: float


@dataclass(frozen=True)
class PluginSettings:
    flags: OptimizationFlags
    arm: str
    run_id: str
    engine: str | None  # None: use the served model name
    node: str
    metrics_port: int | None
    extra_no_respecialize: dict[str, list[str]] = field(default_factory=dict)
    gpu_poll_s: float = 5.0
    rank_delay: RankDelay | None = None
    missing_target: str | None = None
    force_patches: bool = False
    expert_load: bool = True
    expert_load_overlap: bool = False
    router_bias: RouterBias | None = None  # MOEPERF_ROUTER_BIAS: skew a dummy-weight model's routing (router_bias.py)


def _parse_rank_delay(raw: str | None) -> RankDelay | None:
    if not raw:
        return None
    try:
        rank, seconds = raw.split(":")
        return RankDelay(int(rank), float(seconds))
    except ValueError as e:
        raise PluginConfigError(f"{TEST_RANK_DELAY_ENV}={raw!r}: expected RANK:SECONDS") from e


def load_settings(environ: Mapping[str, str] | None = None) -> PluginSettings | None:
    """None when this engine was not started for a moeperf arm (the plugin then stays inert)."""
    env = os.environ if environ is None else environ
    try:
        flags = OptimizationFlags.from_env(env)
    except ValueError as e:  # not JSON, or not flags moeperf would run (unknown key, meaningless combination)
        raise PluginConfigError(f"{FLAGS_ENV_VAR} is not a valid set of flags: {e}") from e
    if flags is None:
        return None
    try:
        extra = json.loads(env.get(EXTRA_NO_RESPECIALIZE_ENV) or "{}")
    except json.JSONDecodeError as e:
        raise PluginConfigError(f"{EXTRA_NO_RESPECIALIZE_ENV} is not JSON: {e}") from e
    if not isinstance(extra, dict):
        raise PluginConfigError(f"{EXTRA_NO_RESPECIALIZE_ENV} must be a JSON object")
    # Kernels the experiment lists besides vLLM's fused_moe_kernel: {"module:kernel": [arg, ...]}, from the
    # arm's flags or the separate variable (which wins).
    extra = {**flags.no_respecialize_kernels, **extra}
    port = env.get(METRICS_PORT_ENV)
    expert_load = env.get(EXPERT_LOAD_ENV, "1")
    if expert_load not in ("0", "1", EXPERT_LOAD_OVERLAP):
        raise PluginConfigError(
            f"{EXPERT_LOAD_ENV}={expert_load!r}: expected 0 (off), 1 (count inline) or {EXPERT_LOAD_OVERLAP} "
            "(count on a side stream)"
        )
    try:
        router_bias = parse_router_bias(env.get(ROUTER_BIAS_ENV))
    except RouterBiasError as e:
        raise PluginConfigError(str(e)) from e
    return PluginSettings(
        flags=flags,
        arm=env.get(ARM_ENV, "unknown"),
        run_id=env.get(RUN_ID_ENV, "unknown"),
        engine=env.get(ENGINE_ENV) or None,
        node=env.get(NODE_ENV) or socket.gethostname(),
        metrics_port=int(port) if port else None,
        extra_no_respecialize={str(k): [str(a) for a in v] for k, v in extra.items()},
        gpu_poll_s=float(env.get(GPU_POLL_ENV, "5")),
        rank_delay=_parse_rank_delay(env.get(TEST_RANK_DELAY_ENV)),
        missing_target=env.get(TEST_MISSING_TARGET_ENV) or None,
        force_patches=env.get(TEST_FORCE_PATCHES_ENV) == "1",
        expert_load=expert_load != "0",
        expert_load_overlap=expert_load == EXPERT_LOAD_OVERLAP,
        router_bias=router_bias,
    )
