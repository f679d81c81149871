"""The experiment file: one strict model, read from YAML, from which the CLI is also generated.

``ExperimentConfig()`` with no arguments *is* the embedded default (local Ray, vLLM's CPU build,
the generated tiny Mixtral, a bundled Azure trace sample), so ``moeperf run`` needs no file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from common.strict import FrozenStrictModel
from experiment.slo import SloSpec
from modelgen.tiny_moe import TinyMoeSpec
from moe_opt.flags import TUNED_CONFIG_ENV_VAR, OptimizationFlags
from workloads.levels import ConcurrencyLevel
from workloads.sweep import SweepSpec
from workloads.traces.azure import AzureTraceSpec
from workloads.workload import WorkloadSpec

SteadyStateRule = Literal["mser5", "none"]
"""Which of an arm-round's requests the verdicts judge: after the MSER-5 warm-up cut on TTFT, or all of them."""

ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class ModelSpec(FrozenStrictModel):
    path: str | None = Field(
        None,
        description="Model directory (config.json + tokenizer) on every engine node, or a Hugging Face id; "
        "null generates the embedded tiny Mixtral into the cache folder.",
    )
    tiny: TinyMoeSpec = Field(default_factory=TinyMoeSpec, description="Shape of the generated model (path: null).")
    load_format: Literal["dummy", "auto", "safetensors"] = Field(
        "dummy", description="vLLM --load-format; 'dummy' gives random weights with the real shapes."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field("bfloat16", description="vLLM --dtype.")
    quantization: Literal["fp8"] | None = Field(
        None,
        description="vLLM --quantization. fp8: per-tensor w8a8; bf16 weights are quantised online (dynamic "
        "activation scales) unless tiny.fp8_checkpoint makes the model an FP8 checkpoint, whose scheme is used.",
    )
    max_model_len: int = Field(1024, ge=16, description="vLLM --max-model-len; prompts + outputs must fit.")
    served_name: str = Field("moeperf-model", description="Name the server answers to (--served-model-name).")
    prompt_token_ids: tuple[int, int] | None = Field(
        None,
        description="[low, high) range of token ids used to synthesise prompts; null: the tiny model's "
        "printable characters, or [1000, min(vocab, 32000)) for a real model (clear of special tokens).",
    )


CacheState = Literal["shared_warm", "seeded", "cold_per_arm", "as_found"]
RUN_CACHE_STATES = frozenset({"shared_warm", "seeded"})
"""Cache states in which every engine of the run shares the run's one JIT cache, ``<run_dir>/jit-cache``."""


class EngineSpec(FrozenStrictModel):
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' picks cuda when the Ray cluster has GPUs, else vLLM's CPU build."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per engine (TP); one placement bundle each.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="vLLM --gpu-memory-utilization; null: 0.12 on CPU (share of RAM), 0.9 on GPU."
    )
    cpu_kvcache_space_gib: float = Field(1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE for the CPU build.")
    enforce_eager: bool = Field(False, description="vLLM --enforce-eager: no torch.compile and no CUDA graphs.")
    cpus_per_engine: float = Field(1.0, gt=0, description="Ray CPUs reserved for each EngineActor.")
    accelerator_type: str | None = Field(None, description="Ray accelerator type the GPUs must have, e.g. 'H200'.")
    startup_timeout_s: float = Field(600.0, gt=0, description="Give up on an engine not healthy after this.")
    placement_timeout_s: float = Field(120.0, gt=0, description="Give up on an arm not placed after this.")
    host: str = Field(
        "127.0.0.1",
        description="Address the server binds: loopback keeps clients on the engine's node; 'node-ip' binds the "
        "node's Ray address so client actors on other nodes can reach it.",
    )
    cache_state: CacheState = Field(
        "shared_warm",
        description="JIT cache state every engine starts in, the same for every arm. 'shared_warm': all engines "
        "of the run share one run-scoped cache (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT) that "
        "a warm-up pass fills before the first measured arm (one unmeasured replay per distinct arm setting), as "
        "a long-running service would have it. 'cold_per_arm': every engine gets empty caches and pays its own "
        "compiles (only vLLM's facts about the model class, which hold no compiled code, are kept per node). "
        "'as_found': whatever the node's caches hold (arms may start in different states; the report "
        "marks comparisons where one side compiled and the other did not). 'seeded': like shared_warm, but the "
        "run's cache starts as a copy of jit_cache_seed (the jit-cache folder an earlier run of the same engine "
        "left) and there is no warm-up pass, so a short GPU hold spends its time on measured rounds. Old files' "
        "fresh_triton_cache: true reads as cold_per_arm, false as as_found.",
    )
    jit_cache_seed: str | None = Field(
        None,
        min_length=1,
        description="With cache_state 'seeded' (and only then): a folder holding the JIT caches of an earlier run "
        "of the same model, vLLM and kernels, i.e. that run's <run_dir>/jit-cache (subfolders triton, inductor, "
        "vllm). Copied into the new run's cache before any engine starts. A seed that lacks a kernel the arms "
        "need shows as compiles in the measured window.",
    )
    warmup_pass_fraction: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="With cache_state 'shared_warm': the share of each level's requests (the first ones, at least "
        "the level's concurrency) that the warm-up pass replays per setting. 1.0 replays the whole round. Less "
        "keeps a hold short. Measured arms still count their compiles in the window, so a pass that was too "
        "short shows there.",
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="vLLM --max-num-seqs, the most requests a step batches; null: vLLM's default (see "
        "vllm_default_max_num_seqs). A sweep level's concurrency may not exceed it.",
    )
    api_key_env: str | None = Field(
        None,
        min_length=1,
        description="Name of an environment variable (read by the driver) holding the API key every engine is "
        "started with and every request carries; null: a random key per run. The key itself is never written "
        "anywhere.",
    )
    extra_args: list[str] = Field(default_factory=list, description="More vLLM server arguments, for every arm.")
    env: dict[str, str] = Field(default_factory=dict, description="More environment variables for every engine.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_fresh_triton_cache(cls, data: Any) -> Any:
        """Files (and stored results) from before cache_state said ``fresh_triton_cache: true|false``."""
        if isinstance(data, dict) and "fresh_triton_cache" in data:
            data = dict(data)
            fresh = data.pop("fresh_triton_cache")
            if "cache_state" in data:
                raise ValueError("fresh_triton_cache: replaced by cache_state; give cache_state only")
            data["cache_state"] = "cold_per_arm" if fresh else "as_found"
        return data

    @model_validator(mode="after")
    def _seed_with_seeded(self) -> EngineSpec:
        """A seed without 'seeded' would be silently unused; 'seeded' without one would start cold."""
        if self.cache_state == "seeded" and self.jit_cache_seed is None:
            raise ValueError("cache_state seeded needs jit_cache_seed (an earlier run's <run_dir>/jit-cache)")
        if self.cache_state != "seeded" and self.jit_cache_seed is not None:
            raise ValueError(f"jit_cache_seed is used only with cache_state seeded, not {self.cache_state}")
        return self

    @property
    def shares_run_cache(self) -> bool:
        """Every engine of the run starts from the run's one JIT cache (``<run_dir>/jit-cache``)."""
        return self.cache_state in RUN_CACHE_STATES

    @property
    def fresh_triton_cache(self) -> bool:
        """Every engine gets its own empty JIT caches."""
        return self.cache_state == "cold_per_arm"


class ClientSpec(FrozenStrictModel):
    max_in_flight: int | None = Field(None, ge=1, description="Cap on requests in flight per arm; null: no cap.")
    request_timeout_s: float = Field(600.0, gt=0, description="A request not finished after this is failed.")
    warmup_requests: int = Field(2, ge=0, description="Requests sent to each engine before the measured replay.")
    max_dispatch_lag_p99_ms: float = Field(
        1.0,
        gt=0,
        description="Flag an arm as client-bound when the p99 of its measured records' dispatch lag (actual minus "
        "intended send time, without in-flight-cap waits; merged over every client actor; warm-up requests left "
        "out) exceeds this.",
    )
    actors_per_arm: int = Field(
        1, ge=1, description="Client actors per arm; each replays a round-robin shard of the schedule."
    )
    placement: Literal["engine_node", "spread"] = Field(
        "engine_node",
        description="'engine_node': client actors on the engine's node; 'spread': round-robin over the cluster's "
        "worker nodes (the head only if it is the only node).",
    )


class ArmSpec(FrozenStrictModel):
    name: str = Field(description="Unique arm name (letters, digits, '_', '.', '-').")
    flags: OptimizationFlags = Field(default_factory=OptimizationFlags, description="Optimizations of this arm.")
    control_of: str | None = Field(
        None,
        description="Make this an A/A control of the named arm: same flags, its own engine; measures the noise "
        "floor the verdicts are judged against.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="This arm's vLLM --enforce-eager, overriding engine.enforce_eager; null: the engine's. False "
        "keeps vLLM's own warm-up (torch.compile and CUDA-graph capture run the model at every capture batch size "
        "before serving, so Triton JIT compiles happen at start-up); true skips it, so they land on live requests.",
    )
    engine_env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables for this arm's engine only, laid over engine.env: for an arm that "
        "studies a knob with no flag, such as the plugin's own instruments (MOEPERF_EXPERT_LOAD: '0' turns the "
        "per-expert token count off). An A/A control runs with its target's.",
    )

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not ARM_NAME.match(v):
            raise ValueError(f"arm name {v!r} must match {ARM_NAME.pattern}")
        return v

    @model_serializer(mode="wrap")
    def _control_inherits(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A control that was given no flags is written without them, so that the saved config (config.yaml,
        result.json) reads back: written out, its default flags would be a control whose flags differ from
        a flagged target's. Default flags on a control are none given (as the validator reads them), so an older
        file that wrote them dumps the same as a newer one (``moeperf combine`` compares dumps)."""
        data: dict[str, Any] = handler(self)
        if self.control_of is not None and ("flags" not in self.model_fields_set or self.flags == OptimizationFlags()):
            data.pop("flags", None)
        if not self.engine_env:  # results written before arms had their own variables dump the same
            data.pop("engine_env", None)
        return data


class ChaosSpec(FrozenStrictModel):
    """Fault injection for the harness's own tests: kills real engines at chosen points."""

    kill_engine_after_records: dict[str, int] = Field(
        default_factory=dict,
        description="arm name -> SIGKILL that arm's vLLM server once this many of its records are finished.",
    )
    kill_client_after_records: dict[str, int] = Field(
        default_factory=dict,
        description="arm name -> kill that arm's first client actor once this many of its records are finished.",
    )
    stop_engine_after_records: dict[str, int] = Field(
        default_factory=dict,
        description="arm name -> SIGSTOP that arm's vLLM server (a hang: alive, answering nothing) once this many "
        "of its records are finished.",
    )
    records_unwritable_after_records: dict[str, int] = Field(
        default_factory=dict,
        description="arm name -> that arm's records file fails every write (as on a full disk, ENOSPC) once this "
        "many of its records are on disk.",
    )


class SimulationSpec(FrozenStrictModel):
    """TEST SETTING for clusters whose GPUs are only declared (ray.cluster_utils.Cluster, num_gpus=8).

    Placement uses engine.tensor_parallel_size and real GPU bundles; the engine started inside the
    placement is vLLM's CPU build at this size. Never set on a real cluster.
    """

    cpu_engine_on_simulated_gpus: bool = Field(
        False, description="Start the CPU build of vLLM inside GPU placement groups (simulated GPUs only)."
    )
    engine_tensor_parallel_size: int = Field(1, ge=1, description="TP of that CPU engine.")


class MetricsSpec(FrozenStrictModel):
    """Prometheus export of a run (dashboards/README.md): engine targets and the harness's client metrics."""

    enabled: bool = Field(
        True,
        description="Write Prometheus file_sd targets for the run's engines and serve the client metrics from the "
        "driver (moeperf_client_*).",
    )
    targets_dir: Path = Field(
        Path("/tmp/moeperf/prometheus"),
        description="Where the run writes its targets files (engines-<run>.json, client-<run>.json); "
        "dashboards/prometheus/prometheus.yml reads them from here.",
    )
    listen_host: str = Field(
        "127.0.0.1",
        description="Address of the driver's client-metrics endpoint; 'node-ip' binds the driver node's Ray address "
        "(for a Prometheus on another node).",
    )
    ray_dashboard: bool = Field(
        False,
        description="Start Ray's dashboard with a private local Ray, so that Ray writes its Prometheus "
        "service-discovery file (Ray's own metrics); a cluster's Ray has it already.",
    )
    final_scrape_timeout_s: float = Field(
        30.0,
        ge=0,
        description="At the end of a run wait up to this long for Prometheus to scrape the final client counts "
        "(no wait when nothing ever scraped the endpoint).",
    )


def _default_arms() -> list[ArmSpec]:
    # The A/A control gives every verdict its engine-instance noise term: without it (or two rounds) a
    # one-round comparison of two engines cannot tell a configuration from an engine instance.
    return [
        ArmSpec(name="baseline"),
        ArmSpec(name="baseline-control", control_of="baseline"),
        ArmSpec(
            name="all-optimizations",
            flags=OptimizationFlags(swap_ab=True, moe_backend="triton", no_respecialize=True),
        ),
    ]


def _default_workload() -> WorkloadSpec:
    return WorkloadSpec(
        trace=AzureTraceSpec(max_requests=200),
        speedup=4.0,
        input_scale=1 / 16,
        output_scale=1 / 8,
        max_input_tokens=512,
        max_output_tokens=64,
    )


DEFAULT_ENGINE: dict[str, Any] = {"enforce_eager": True, "cache_state": "cold_per_arm"}
"""What an experiment's engine is unless its file says otherwise (a quick, reproducible CPU run)."""


class ExperimentConfig(FrozenStrictModel):
    schema_version: Literal[1] = Field(1, description="Version of this file's format.")
    name: str = Field("quick-cpu", description="Experiment name; prefixes the run id.")
    output_dir: Path = Field(Path("runs"), description="Where runs/<run-id>/ folders are written.")
    ray_address: str | None = Field(
        None, description="Ray cluster to join ('auto', 'ray://...'); null: RAY_ADDRESS, else a new local Ray."
    )
    placement: Literal["interleaved", "parallel"] = Field(
        "interleaved",
        description="'interleaved': arms one after another on the same resources; 'parallel': all arms at once.",
    )
    model: ModelSpec = Field(default_factory=ModelSpec, description="The model every arm serves.")
    engine: EngineSpec = Field(
        default_factory=lambda: EngineSpec(**DEFAULT_ENGINE),
        description="vLLM engines. A partial section (or --set engine.X=...) keeps the experiment defaults it does "
        "not set: enforce_eager true and cache_state cold_per_arm.",
    )
    client: ClientSpec = Field(default_factory=ClientSpec, description="The load generator.")
    arms: list[ArmSpec] = Field(default_factory=_default_arms, min_length=1, description="The arms to compare.")
    workload: WorkloadSpec = Field(default_factory=_default_workload, description="Trace and its scaling.")
    rounds: int = Field(
        1,
        ge=1,
        description="Rounds. interleaved: arms run A B C, C B A, then B C A, A C B, ... (mirrored pairs of rounds, "
        "each pair starting one arm further on) on the same resources, a fresh engine each turn; "
        "parallel: engines stay up and the prefix cache is reset and health checked between rounds.",
    )
    first_round: int = Field(
        0,
        ge=0,
        description="Index of this run's first round. A run that continues an earlier run's rounds in another "
        "stretch of machine time (a GPU hold too short for all of them) starts where that one stopped: its rounds "
        "get prompts of their own, the arms' order and the sweep's level order carry on, and `moeperf combine` "
        "pools the runs into one result whose rounds are all of theirs.",
    )
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock seconds the run may take from its start, for a machine lent for a fixed time: a "
        "round after the first starts only if the longest round so far (engine starts included) fits in what is "
        "left. The rounds not started are named in the notes, and the result holds the rounds run as a whole run "
        "of that many (config.rounds), so `--first_round` continues it and `moeperf combine` pools it. null: no "
        "budget.",
    )
    sweep: SweepSpec | None = Field(
        None,
        description="Load levels every arm runs on one engine per round (a throughput-latency curve per arm); "
        "null: one replay of the workload per round.",
    )
    steady_state: SteadyStateRule = Field(
        "mser5",
        description="Which requests the verdicts judge (`moeperf run`'s summary and `moeperf report`, whose "
        "--steady-state overrides it): 'mser5' drops each arm-round's warm-up by the MSER-5 rule on TTFT, for "
        "steady-state speed; 'none' keeps every request, for an experiment whose question is the cold start "
        "(JIT compiles while serving), which the cut would remove. Sweep levels are never cut (their warm-up share "
        "is excluded instead).",
    )
    slo: SloSpec = Field(
        default_factory=SloSpec,
        description="Service-level objectives: a request counts towards goodput when it succeeded and meets each "
        "limit. Used by the live goodput metric, the report and the nightly gate.",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Prometheus export of the run.")
    chaos: ChaosSpec = Field(default_factory=ChaosSpec, description="Fault injection (tests only).")
    simulate: SimulationSpec = Field(
        default_factory=SimulationSpec, description="Simulated-cluster test setting (see SimulationSpec)."
    )

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: Any) -> Any:
        """A partial ``engine:`` is laid over the experiment's default engine, not over EngineSpec's field
        defaults (vLLM's own): ``--set engine.api_key_env=K`` must not also turn on torch.compile and a warm-up
        pass. The legacy ``fresh_triton_cache`` stands for cache_state."""
        if isinstance(data, dict) and isinstance(data.get("engine"), dict):
            engine = dict(data["engine"])
            engine.setdefault("enforce_eager", DEFAULT_ENGINE["enforce_eager"])
            if "cache_state" not in engine and "fresh_triton_cache" not in engine:
                engine["cache_state"] = DEFAULT_ENGINE["cache_state"]
            data = {**data, "engine": engine}
        return data

    @model_validator(mode="after")
    def _check(self) -> ExperimentConfig:
        names = [a.name for a in self.arms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"arms: duplicate arm name(s) {dupes}")
        for field in ChaosSpec.model_fields:
            unknown = sorted(set(getattr(self.chaos, field)) - set(names))
            if unknown:
                raise ValueError(f"chaos.{field}: unknown arm(s) {unknown}")
        self._check_sweep_concurrency()
        by_name = {a.name: a for a in self.arms}
        for i, arm in enumerate(self.arms):
            if arm.control_of is None:
                continue
            target = by_name.get(arm.control_of)
            if target is None or target.control_of is not None or target is arm:
                raise ValueError(f"arms.{i}.control_of: {arm.control_of!r} is not another, non-control arm")
            # Default flags on a control read as none given: files written before controls were saved without
            # them (2026-12-02) hold a flagged target's control with every flag at its default.
            if "flags" in arm.model_fields_set and arm.flags not in (target.flags, OptimizationFlags()):
                raise ValueError(f"arms.{i}.flags: an A/A control must have the flags of {target.name!r}")
            if arm.enforce_eager is not None and arm.enforce_eager != self.arm_enforce_eager(target):
                raise ValueError(f"arms.{i}.enforce_eager: an A/A control must run like {target.name!r}")
            if arm.engine_env and arm.engine_env != target.engine_env:
                raise ValueError(f"arms.{i}.engine_env: an A/A control must run like {target.name!r}")
        given = ["engine.env"] if TUNED_CONFIG_ENV_VAR in self.engine.env else []
        given += [f"arms.{i}.engine_env" for i, a in enumerate(self.arms) if TUNED_CONFIG_ENV_VAR in a.engine_env]
        if given and any(a.flags.tuned_config_dir for a in self.arms):
            raise ValueError(  # laid over the flags' environment: the arms' folders would be lost
                f"{given[0]}.{TUNED_CONFIG_ENV_VAR}: an arm sets flags.tuned_config_dir; give the folder per arm "
                "there, not as a variable"
            )
        return self

    def _check_sweep_concurrency(self) -> None:
        """A closed loop above the engine's batch limit queues inside vLLM: the level would measure the queue,
        not the concurrency it names. Checked against the limit the engine will run with (its default on
        ``engine.device: auto`` is the smallest of vLLM's, 128 per CPU rank, unless given)."""
        if self.sweep is None:
            return
        limit = self.engine.max_num_seqs or vllm_default_max_num_seqs(self.engine)
        for i, level in enumerate(self.sweep.levels):
            if isinstance(level, ConcurrencyLevel) and level.concurrency > limit:
                given = "engine.max_num_seqs" if self.engine.max_num_seqs else "vLLM's default max_num_seqs"
                raise ValueError(
                    f"sweep.levels.{i}.concurrency: {level.concurrency} is above {given} ({limit}): requests "
                    "beyond it wait in the engine's queue; lower the level or raise engine.max_num_seqs"
                )

    def _runs_like(self, arm: ArmSpec) -> ArmSpec:
        """The arm whose settings this one runs with: itself, or for an A/A control the arm it duplicates."""
        return arm if arm.control_of is None else next(a for a in self.arms if a.name == arm.control_of)

    def arm_flags(self, arm: ArmSpec) -> OptimizationFlags:
        """The flags an arm runs with: a control arm inherits those of the arm it duplicates."""
        return self._runs_like(arm).flags

    def arm_enforce_eager(self, arm: ArmSpec) -> bool:
        """Whether an arm's engine skips vLLM's warm-up: its own setting, its control target's, or the engine's."""
        eager = self._runs_like(arm).enforce_eager
        return self.engine.enforce_eager if eager is None else eager

    def arm_engine_env(self, arm: ArmSpec) -> dict[str, str]:
        """The variables an arm's engine gets from the experiment: engine.env, then the arm's (or its target's)."""
        return {**self.engine.env, **self._runs_like(arm).engine_env}


def vllm_default_max_num_seqs(engine: EngineSpec) -> int:
    """vLLM 0.26-0.32's API-server default (``EngineArgs.get_default_values``): 128 per rank on its CPU build,
    1024 on GPUs of 70 GiB and more but A100 (H100, H200, B200), else 256. ``device: auto`` or a GPU without a
    declared accelerator type reads as the smallest that device kind can have."""
    if engine.device in ("cpu", "auto"):
        return 128 * engine.tensor_parallel_size
    big = (engine.accelerator_type or "").upper().startswith(("H100", "H200", "H20", "B200", "B300", "GB200"))
    return 1024 if big else 256


class ConfigError(ValueError):
    """An experiment that cannot run; the message names the file and the field."""


def _format_validation(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid experiment"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


def parse_experiment(data: dict[str, Any], source: str = "<config>") -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, source)) from None


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the experiment must be a YAML mapping, got {type(data).__name__}")
    return data


def load_experiment(path: Path) -> ExperimentConfig:
    return parse_experiment(read_yaml(path), str(path))
