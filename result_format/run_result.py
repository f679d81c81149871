"""The versioned result file of a run: everything a report needs, without re-running anything.

It lives outside ``cluster`` so that the writer (the run driver) and the readers (``analysis``, the
nightly gate, the report, ``results/h200/tables.py``) share one definition without importing Ray. The
stored config is the typed experiment model, so a report reads ``result.config.slo`` rather than
guessing keys of a mapping; files written before it was typed validate unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from common.strict import StrictModel as _Model
from experiment.config import ExperimentConfig
from moe_opt.flags import FlagStatus, OptimizationFlags
from result_format.records_store import read_columns
from workloads.health import ClientBound, ClientHealth
from workloads.levels import AnyLoadLevel
from workloads.metrics import ArmSummary
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord

RESULT_SCHEMA_VERSION: Literal[3] = 3
"""3: request records live beside the file, one Parquet file per arm (``ArmResult.records_file``, with its
SHA-256 and row count), instead of inside it. 2: the engine's JIT cache state is recorded
(``config.engine.cache_state``). A version-1 file did not record it, so it loads as ``as_found``: nothing
guaranteed its arms started equally warm. Files of every version load; ``load_run`` gives them all columns."""

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
    startup_phases_s: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds per start-up phase as vLLM logged them (model_load_s, compilation_s, "
        "compile_cache_load_s, cuda_graph_capture_s, init_engine_s, ...; nested, not disjoint), the slowest "
        "rank's: which part of startup_s a cold or seeded JIT cache changed. Empty when the log names none.",
    )

    startup_timeline_s: dict[str, float] = Field(
        default_factory=dict,
        description="Whole seconds from the server's spawn to points of its start, from its log's stamps: "
        "api_server_first_line_s (imports done), config_resolved_s, engine_core_started_s, "
        "model_loading_started_s, engine_initialized_s, api_server_listening_s; healthy is startup_s. Where "
        "the time outside the phases went. Empty before 2026-12-05 or when the log has none of them.",
    )

    def describe_startup(self) -> str:
        """The healthy time and where it went, for the run log and the reports."""
        phases = self.startup_phases_s
        shown = [f"{key.removesuffix('_s').replace('_', ' ')} {seconds:.1f} s" for key, seconds in phases.items()]
        if "init_engine_s" in phases:
            outside = self.startup_s - phases.get("model_load_s", 0.0) - phases["init_engine_s"]
            shown.append(f"outside model load and init engine {outside:.1f} s")
        if self.startup_timeline_s:
            at = ", ".join(
                f"{key.removesuffix('_s').replace('_', ' ')} {s:.0f}" for key, s in self.startup_timeline_s.items()
            )
            shown.append(f"seconds after spawn: {at}")
        return f"{self.startup_s:.1f} s" + (f" ({', '.join(shown)})" if shown else "")


class SwapAbLaunches(_Model):
    swap_ab: bool = Field(description="SWAP_AB the fused_moe_kernel launches ran with (forced by the arm or vLLM's).")
    bucket: int = Field(description="Power of two at or above the launches' token count M (0: empty launch).")
    launches: int


class MoeConfigSource(_Model):
    config_file: str = Field(description="Tuned-config file name vLLM looked for: encodes E, N, device, dtype, block.")
    source: str = Field(
        description="The tuned JSON vLLM loaded for that shape, 'default' (none found: vLLM's heuristic config) or "
        "'unknown' (vLLM loaded one from a folder moeperf does not know)."
    )
    lookups: int = Field(description="Config lookups served from it (one per Triton MoE launch pair, host-side).")


class MoeLayerBackend(_Model):
    backend: str = Field(description="Backend vLLM's MoE oracle chose for the layers ('TRITON', 'CPU', ...).")
    experts: str = Field(description="Experts class the layers run (TritonExperts, CPUUnquantizedExperts, ...).")
    layers: int


class ObservedRank(_Model):
    """What one worker rank of the engine ran, as its moeperf plugin reported it on the engine's /metrics."""

    rank: int
    world_size: int = Field(description="Ranks of the engine, as this rank saw it (TP x PP).")
    platform: str = Field(description="'cuda', or the torch device type the worker ran on ('cpu').")
    gpu: str = Field(description="Physical GPU index, 'none' on CPU.")
    gpu_uuid: str
    vllm_version: str
    triton_version: str = Field(description="Triton vLLM ran with; 'none' when vLLM runs without Triton (CPU build).")
    flags: OptimizationFlags | None = Field(description="The arm's flags as the worker decoded them; null: unreadable.")
    flag_status: dict[str, FlagStatus] = Field(description="Per switch: applied, vllm_default or not_applicable_cpu.")
    flags_applied: bool = Field(description="At least one switch applied on this rank.")
    engine_moe_backend: str = Field(description="vllm_config.kernel_config.moe_backend as the worker saw it.")
    not_applied_reason: str | None = Field(None, description="Why this rank applied no switch; null if it applied one.")
    moe_layer_backends: list[MoeLayerBackend] = Field(default_factory=list)
    fused_moe_launches: list[SwapAbLaunches] = Field(
        default_factory=list, description="fused_moe_kernel launches since the engine started, by SWAP_AB and bucket."
    )
    config_sources: list[MoeConfigSource] = Field(default_factory=list)


class ObservedEngine(_Model):
    """What an engine actually ran, read from inside its workers (not from what it was asked to run)."""

    ranks: list[ObservedRank] = Field(
        default_factory=list, description="One per worker rank whose plugin reported; empty: the plugin never ran."
    )
    moe_backends_logged: list[str] = Field(
        default_factory=list, description="MoE backends the server's start-up log names (as EngineInfo.moe_backends)."
    )
    nothing_applied: str | None = Field(
        None, description="'nothing applied: <reason>' when no rank applied any switch (every CPU engine); else null."
    )
    metrics_error: str | None = Field(None, description="Why the engine's /metrics could not be read, if it could not.")


class ShardResult(_Model):
    """One client actor's share of one arm in one round."""

    round: int
    client: int
    level: int | None = Field(None, description="Sweep level of this replay; null: the run has no sweep.")
    node_id: str | None = Field(description="Ray node the client actor ran on.")
    start_epoch_s: float = Field(description="Common start of the round (Unix time, s).")
    planned: int = Field(description="Requests in this shard.")
    received: int = Field(description="Records that reached the driver.")
    status: Literal["ok", "lost"] = Field(description="'lost': the client actor died before finishing.")
    error: str | None = None


class CompileEventRecord(_Model):
    """One Triton JIT compile (or on-disk cache load) of one worker rank, as the plugin logged it.

    Kept per event, not only as counters, so the analysis can tell which requests waited for it
    (``analysis.compile_attribution``): its end on the Unix clock, and its wall time before that.
    """

    round: int = Field(description="Round whose replay it was collected after (the engine instance of that round).")
    rank: int = Field(description="Worker rank that compiled.")
    kernel: str = Field(description="Qualified name of the @triton.jit function.")
    cache_hit: bool | None = Field(
        description="True: loaded from the on-disk cache; false: really compiled; null: Triton did not say."
    )
    wall_s: float = Field(description="Seconds from the cache miss to the kernel being ready (the launch waited).")
    compiler_s: float | None = Field(description="The compiler's own stage total; null for a cache load or unknown.")
    end_epoch_s: float = Field(description="When the kernel became ready (Unix time, s).")
    phase: Literal["startup", "serving"] = Field(
        description="'serving': after the rank's first model step (requests may have waited); 'startup': before."
    )


class LevelResult(_Model):
    """One sweep level of one arm: its measured requests (warm-up share excluded) over every round."""

    index: int = Field(description="Position in sweep.levels.")
    label: str
    kind: str = Field(description="The level's kind: concurrency, rate or trace_speed.")
    load: float = Field(description="The level's load in load_unit (concurrency, req/s, or trace speed-up).")
    load_unit: str
    requests_planned: int = Field(description="Requests per round, warm-up share included.")
    warmup_requests: int = Field(description="Of which the first ones, sent but not measured (per round).")
    summary: ArmSummary | None = Field(description="Measured requests only; null when none finished.")

    @classmethod
    def of(
        cls, index: int, spec: AnyLoadLevel, requests_planned: int, warmup_requests: int, summary: ArmSummary | None
    ) -> LevelResult:
        """A level's result named and placed on the load axis by its spec in ``sweep.levels``."""
        return cls(
            index=index,
            label=spec.label(),
            kind=spec.kind,
            load=spec.load,
            load_unit=spec.load_unit,
            requests_planned=requests_planned,
            warmup_requests=warmup_requests,
            summary=summary,
        )


class ExpertLoad(_Model):
    layer: int = Field(description="Decoder-layer index of the MoE layer (from its prefix, model.layers.N....).")
    tokens: list[int] = Field(
        description="Tokens its router sent to each expert during the measured replay (index = expert id; each token "
        "counts once per selected expert, so a layer's sum is about tokens processed x top_k). From "
        "moeperf_expert_tokens_total of the lowest rank holding the layer (with TP every rank routes identically)."
    )


# An arm's failure_reason when the run's end cut it short (the driver stopped, or died and `moeperf recover` rebuilt
# it), alone or as the start of a longer reason: its records are whole as far as they go, which `combine --levels`
# relies on to count the levels it did finish.
INTERRUPTED = "interrupted"


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
        'by series_key (name{label="value",...}); moeperf_expert_tokens_total is kept as expert_load instead '
        "(results written before that hold its series here too).",
    )
    window_metrics_by_round: dict[int, dict[str, float]] = Field(
        default_factory=dict,
        description="Per measured round (key: round index), the same growth as window_metrics but of the step-time "
        "series only (moeperf_rank_step_seconds_{count,sum} and moeperf_gpu_step_seconds_{count,sum}, per rank "
        "and phase): with interleaved placement each round is a fresh engine, so a round's step means are one "
        "engine's (analysis/step_time_rounds.py). The rounds add up to those series in window_metrics. Empty in "
        "results written before it and when the engine exports no step times.",
    )
    triton_compiles_in_window: int | None = Field(
        None, description="Triton JIT compilations while requests were being measured; null if not exported."
    )
    expert_load: list[ExpertLoad] = Field(
        default_factory=list,
        description="Routing seen in the measured replay (all rounds): per MoE layer, in layer order, the tokens sent "
        "to each expert, from the growth of moeperf_expert_tokens_total in the window (serving traffic only: "
        "not engine start, warm-up or CUDA-graph capture). Empty when the engine did not export it (no plugin, a "
        "monolithic MoE kernel, results written before it).",
    )
    compile_events: list[CompileEventRecord] = Field(
        default_factory=list,
        description="Every Triton compile the engine's ranks logged, per round (start-up ones included); empty when "
        "the engine logged none or the result predates them.",
    )
    observed: ObservedEngine | None = Field(
        None,
        description="What the engine's workers report they ran (flags decoded and applied, MoE backends, Triton, "
        "Swap-AB launches, config sources); read when healthy and refreshed after each replay. Null: not observed "
        "(results written before moeperf observed engines).",
    )
    records_file: str = Field(
        description="The arm's request records, relative to the run folder: Parquet (schema 3; see "
        "result_format/records_store.py), an unsealed Arrow journal (.arrows) of an interrupted run, or JSON "
        "Lines (schema 2 and before, whose records are also inline in ``records``)."
    )
    records_count: int | None = Field(None, description="Rows of records_file; null before schema 3.")
    records_sha256: str | None = Field(None, description="SHA-256 of records_file, checked on load; null before 3.")
    levels: list[LevelResult] = Field(
        default_factory=list, description="Per sweep level, in sweep order; empty when the run has no sweep."
    )
    records: list[RequestRecord] = Field(
        default_factory=list, description="Inline records of files before schema 3 (and of tests); empty since."
    )
    _columns: RecordColumns | None = PrivateAttr(None)
    _records_source: Path | None = PrivateAttr(None)

    @property
    def columns(self) -> RecordColumns:
        """The arm's records as columns, read on first use: from ``records_file`` when ``load_run`` said where
        the run folder is, else from the inline ``records``."""
        if self._columns is None:
            if self._records_source is not None and not self.records:
                self._columns = read_columns(self._records_source, self.records_sha256)
            elif self.records or not self.records_count:
                self._columns = RecordColumns.from_records(self.records)
            else:
                raise RecordsNotLoadedError(
                    f"arm {self.name}: its {self.records_count} records are in {self.records_file}; load the result "
                    "with result_format.run_result.load_run to read them"
                )
        return self._columns

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ArmResult:
        """A copy given new inline ``records`` forgets the columns read from the old ones."""
        out = super().model_copy(update=update, deep=deep)
        if update and "records" in update:
            out._columns = None
            out._records_source = None
        return out

    @property
    def records_source(self) -> Path | None:
        """Where ``columns`` reads the records from (set by ``load_run``); None: inline, or already in memory."""
        return self._records_source

    def relocated(self, records_file: str) -> ArmResult:
        """A copy naming its records file otherwise (a copy of result.json written in another folder), still
        reading the records from where they are."""
        out = super().model_copy(update={"records_file": records_file})
        out._records_source = self._records_source
        return out

    def with_columns(self, columns: RecordColumns, **update: Any) -> ArmResult:
        """A copy of this arm holding ``columns`` as its records (a view of one level, a part of a run)."""
        out = self.model_copy(update={"records": [], "records_count": len(columns), **update})
        out._columns = columns
        out._records_source = None
        return out


class ScheduleInfo(_Model):
    requests: int
    duration_s: float
    clipped_input: int
    clipped_output: int
    clipped_context: int = Field(0, description="Requests cut to fit the engine's context (max_model_len).")
    skipped: dict[str, int] = Field(default_factory=dict, description="Trace rows left out on purpose, by reason.")


class WarmupPassInfo(_Model):
    """One engine of the warm-up pass (``engine.cache_state: shared_warm``), run before the first measured arm.

    It started with the run's shared JIT cache, replayed the schedule once unmeasured and stopped, so every
    measured engine of its setting starts with what that setting compiles already in the cache.
    """

    setting: str = Field(description="The setting's name: the first arm (in the file's order) that runs with it.")
    arms: list[str] = Field(description="Arms that run with this setting (an A/A control with its target).")
    flags: OptimizationFlags = Field(description="The setting's flags.")
    enforce_eager: bool = Field(description="The setting's --enforce-eager.")
    status: Literal["ok", "failed"] = Field(description="'failed': the arms of this setting failed without running.")
    failure_reason: str | None = None
    startup_s: float | None = Field(None, description="Process start to first healthy /health; null: never healthy.")
    requests: int = Field(0, description="Records of the unmeasured replay (succeeded or not).")
    requests_succeeded: int = 0
    triton_compiles: int | None = Field(
        None,
        description="Triton JIT compilations of this engine from its start to the end of its replay (start-up "
        "included): what it put into the shared cache. Null if the engine exports no compile counter.",
    )
    triton_compiles_in_replay: int | None = Field(
        None, description="The part of triton_compiles that happened while its schedule was replayed."
    )
    records_file: str = Field(description="JSON Lines file of its records (relative to the run folder).")


class RecordsNotLoadedError(RuntimeError):
    pass


class TurnRecord(_Model):
    """One turn of the run as the driver ran it: which engines, in which round, when."""

    kind: Literal["warmup", "measured"] = Field(description="'warmup': the unmeasured warm-up pass of one setting.")
    round: int = Field(description="Round of a measured turn (0 for the warm-up pass).")
    arms: list[str] = Field(description="The arm (interleaved), every arm (parallel), or the warm-up's setting.")
    started_at: str | None = Field(
        description="UTC, ISO 8601; null in a turn `moeperf recover` rebuilt from the run's plan (the driver's clock "
        "died with it)."
    )
    ended_at: str | None = Field(None, description="UTC, ISO 8601; null when the turn did not end (the run stopped).")


class RunResult(_Model):
    schema_version: Literal[1, 2, 3] = RESULT_SCHEMA_VERSION
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
    error: str | None = Field(
        None,
        description="Why the driver itself stopped the run (an exception outside every arm: type and message); the "
        "status is then 'failed' and arms with rounds still to run are failed with it. Null otherwise.",
    )
    warmup_pass: list[WarmupPassInfo] = Field(
        default_factory=list,
        description="The warm-up pass of engine.cache_state shared_warm, one engine per distinct arm setting, in the "
        "order they ran (all before the first measured arm). Empty for cold_per_arm and as_found.",
    )
    turns: list[TurnRecord] = Field(
        default_factory=list,
        description="Every turn in the order it ran: with interleaved placement an arm's place among its round's "
        "engines, which the analysis checks for a place effect read as an arm's (analysis/places.py). A combined "
        "result holds its parts' turns in part order. Empty in files written before 2026-12-03; in a recovered "
        "result, the measured turns of the run's plan up to the last engine that wrote a record, without times.",
    )

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


def load_run(path: Path) -> RunResult:
    """A run folder (``runs/<id>``) or its ``result.json``, each arm's records found beside it (read lazily:
    a history that only wants summaries never opens them)."""
    file = path / "result.json" if path.is_dir() else path
    result = RunResult.model_validate_json(file.read_bytes())
    attach_records(result, file.parent)
    return result


def attach_records(result: RunResult, run_dir: Path) -> RunResult:
    """Tell every arm without inline records where its records file is (relative to ``run_dir``)."""
    for arm in result.arms:
        if not arm.records and arm.records_file:
            arm._records_source = run_dir / arm.records_file
    return result
