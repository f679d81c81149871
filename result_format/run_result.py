"""The versioned result file of a run: everything a report needs, without re-running anything.

It lives outside ``cluster`` so that the writer (the run driver) and the readers (``analysis``, the
nightly gate, the report, ``results/h200/tables.py``) share one definition without importing Ray. The
stored config is the typed experiment model, so a report reads ``result.config.slo`` rather than
guessing keys of a mapping; files written before it was typed validate unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from common.strict import StrictModel as _Model
from experiment.config import ExperimentConfig
from moe_opt.flags import OptimizationFlags
from workloads.health import ClientBound, ClientHealth
from workloads.metrics import ArmSummary
from workloads.records import RequestRecord

RESULT_SCHEMA_VERSION: Literal[2] = 2
"""2: the engine's JIT cache state is recorded (``config.engine.cache_state``). A version-1 file did not
record it, so it loads as ``as_found``: nothing guaranteed its arms started equally warm."""

_SERIES_KEY = re.compile(r"^([^{]+)\{(.*)\}$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series_key(name: str, labels: Mapping[str, str]) -> str:
    """How ``ArmResult.window_metrics`` names a series: ``name{a="x",b="y"}``, labels sorted."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse_series_key(key: str) -> tuple[str, dict[str, str]]:
    """The inverse of ``series_key``: (name, labels)."""
    m = _SERIES_KEY.match(key)
    if m is None:
        return key, {}
    return m.group(1), dict(_LABEL.findall(m.group(2)))


class EngineInfo(_Model):
    url: str = Field(description="Base URL the clients used.")
    node_id: str = Field(description="Ray node the engine ran on.")
    pid: int = Field(description="PID of the vLLM server process.")
    device: Literal["cpu", "cuda"] = Field(description="Where the engine computed.")
    gpu_ids: list[str] = Field(description="GPUs Ray assigned to the arm's placement group (empty on CPU).")
    tensor_parallel_size: int
    vllm_version: str
    torch_version: str
    argv: list[str] = Field(description="Exact server command line.")
    env: dict[str, str] = Field(description="Environment variables moeperf set for the server.")
    startup_s: float = Field(description="Process start to first healthy /health.")
    moe_backends: list[str] = Field(
        default_factory=list,
        description="MoE backends the server logged it chose at start ('Fp8: TRITON', 'Fp8: FLASHINFER_CUTLASS', "
        "or a kernel class); with moe_backend auto the only record of which kernel served. Empty when the log "
        "names none.",
    )


class ShardResult(_Model):
    """One client actor's share of one arm in one round."""

    round: int
    client: int
    node_id: str | None = Field(description="Ray node the client actor ran on.")
    start_epoch_s: float = Field(description="Common start of the round (Unix time, s).")
    planned: int = Field(description="Requests in this shard.")
    received: int = Field(description="Records that reached the driver.")
    status: Literal["ok", "lost"] = Field(description="'lost': the client actor died before finishing.")
    error: str | None = None


class ArmResult(_Model):
    name: str
    control_of: str | None = Field(None, description="For an A/A control arm: the arm it duplicates.")
    flags: OptimizationFlags
    flags_applied: bool = Field(description="False when the platform cannot apply the flags (see notes).")
    notes: list[str] = Field(default_factory=list)
    status: Literal["ok", "failed"]
    failure_reason: str | None = None
    engine: EngineInfo | None = None
    engine_log_tail: str | None = Field(None, description="End of the server log, kept when the arm failed.")
    requests_planned: int
    requests_sent: int
    requests_succeeded: int
    requests_failed: int = Field(description="Sent but not finished successfully.")
    requests_not_sent: int = Field(description="Never sent (engine down or run stopped).")
    summary: ArmSummary | None = None
    rounds: int = Field(1, description="Rounds this arm ran (one engine start each when interleaved).")
    shards: list[ShardResult] = Field(default_factory=list, description="Client actors of every round.")
    client_health: list[ClientHealth] = Field(
        default_factory=list, description="Event-loop lag and CPU of every client actor of this arm."
    )
    client_bound: ClientBound | None = Field(
        None,
        description="Client-bound check: merged p99 dispatch lag of this arm's records against the bound; "
        "null when not checked.",
    )
    window_metrics: dict[str, float] = Field(
        default_factory=dict,
        description="Growth of the engine's counters/histogram sums during the measured replay (all rounds), keyed "
        'by series_key (name{label="value",...}).',
    )
    triton_compiles_in_window: int | None = Field(
        None, description="Triton JIT compilations while requests were being measured; null if not exported."
    )
    records_file: str = Field(
        description="JSON Lines file (relative to the run folder), appended as requests finished."
    )
    records: list[RequestRecord] = Field(default_factory=list)


class ScheduleInfo(_Model):
    requests: int
    duration_s: float
    clipped_input: int
    clipped_output: int
    clipped_context: int = Field(0, description="Requests cut to fit the engine's context (max_model_len).")
    skipped: dict[str, int] = Field(default_factory=dict, description="Trace rows left out on purpose, by reason.")


class RunResult(_Model):
    schema_version: Literal[1, 2] = RESULT_SCHEMA_VERSION
    run_id: str
    experiment: str
    status: Literal["ok", "failed", "interrupted"] = Field(
        description="'ok' when every arm is ok; 'failed' when any arm failed; 'interrupted' on Ctrl-C."
    )
    started_at: str = Field(description="UTC, ISO 8601.")
    finished_at: str = Field(description="UTC, ISO 8601.")
    command: list[str] = Field(description="The command line that produced this run.")
    config: ExperimentConfig = Field(description="The resolved experiment config.")
    environment: dict[str, Any] = Field(description="Versions and hardware of the driver and the engine nodes.")
    schedule: ScheduleInfo
    arms: list[ArmResult]
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        if not (isinstance(data, dict) and data.get("schema_version") == 1 and isinstance(data.get("config"), dict)):
            return data
        engine = dict(data["config"].get("engine") or {})
        if "cache_state" not in engine and "fresh_triton_cache" not in engine:
            engine["cache_state"] = "as_found"
        return {**data, "config": {**data["config"], "engine": engine}}

    def arm(self, name: str) -> ArmResult:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)
