"""Every Prometheus metric the plugin exports, defined once (docs/metrics.md is pinned to this list).

Names use ``_`` only (no ``:``) so that any Prometheus version stores them under the same name.
The metrics are created lazily in the worker processes. With ``PROMETHEUS_MULTIPROC_DIR`` set for
the engine (the EngineActor sets a fresh one per engine) prometheus_client writes them to that
directory and vLLM's own ``/metrics`` endpoint on the API server serves them next to ``vllm:*``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

RANK_LABELS = ("engine", "arm", "node", "rank", "gpu", "gpu_uuid")
ENGINE_LABELS = ("engine", "arm", "node")
FLAG_STATUS_LABELS = ("swap_ab_status", "moe_backend_status", "no_respecialize_status")
INFO_LABELS = (
    *RANK_LABELS,
    "run_id",
    "vllm_version",
    "platform",
    "swap_ab",
    "moe_backend",
    "no_respecialize",
    *FLAG_STATUS_LABELS,
    "flags_applied",
    "world_size",
    "triton_version",
    "engine_moe_backend",
    "not_applied_reason",
    "flags",
)
PLUGIN_INFO = "moeperf_plugin_info"
FUSED_MOE_LAUNCHES = "moeperf_fused_moe_launches_total"
MOE_CONFIG_LOOKUPS = "moeperf_moe_config_lookups_total"
MOE_BACKEND_LAYERS = "moeperf_moe_backend_layers"
EXPERT_TOKENS = "moeperf_expert_tokens_total"
EXPERT_TOKENS_UNPUBLISHED = "moeperf_expert_tokens_unpublished"
STEPS_GATED = "moeperf_steps_gated_total"
GPU_STEP_SECONDS = "moeperf_gpu_step_seconds"
RANK_STEP_SECONDS = "moeperf_rank_step_seconds"
STEPS_GATED_SECONDS = "moeperf_steps_gated_seconds_total"
GATED_MIN_SKEW_S = 0.001
"""A step counts as gated when its skew reaches this: below it, which rank was last is scheduling noise (a decode
step on an H200 takes some 5-50 ms, so 1 ms is a 2-20% slowdown of every rank but one)."""

TTFT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
STEP_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.5, 5, 10)
STALL_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
COMPILE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True)
class MetricSpec:
    name: str  # as exposed (counters: with the _total suffix)
    kind: Kind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        PLUGIN_INFO,
        "gauge",
        INFO_LABELS,
        "1 per worker rank running the moeperf plugin; labels carry the arm's requested flags and, per flag, "
        "whether it was applied, left at vLLM's default or not applicable (CPU build).",
    ),
    MetricSpec(
        FUSED_MOE_LAUNCHES,
        "counter",
        (*RANK_LABELS, "swap_ab", "bucket"),
        "Launches of vLLM's Triton fused_moe_kernel on this rank by the SWAP_AB they ran with (true/false, "
        "whether forced by the arm or chosen by vLLM) and bucket = power of two at or above the launch's "
        "token count M; host-side, so CUDA-graph replays are not counted.",
    ),
    MetricSpec(
        MOE_CONFIG_LOOKUPS,
        "counter",
        (*RANK_LABELS, "config_file", "source"),
        "vLLM's fused-MoE tile-config lookups on this rank by the file name it looked for (one per MoE shape) "
        "and source = the tuned JSON it loaded, or default (none found: vLLM's built-in heuristic config).",
    ),
    MetricSpec(
        MOE_BACKEND_LAYERS,
        "gauge",
        (*RANK_LABELS, "backend", "experts"),
        "MoE layers of the model on this rank per backend vLLM's oracle chose and experts class it runs, read "
        "once after the model is loaded.",
    ),
    MetricSpec(
        EXPERT_TOKENS,
        "counter",
        (*RANK_LABELS, "layer", "expert"),
        "Tokens the router of MoE layer `layer` (decoder-layer index) sent to expert `expert` on this rank while "
        "serving (each token counts once per selected expert: top_k per token and layer); counted on the device "
        "inside the MoE forward (CUDA-graph replays included, padding excluded), exported about every 5 s while "
        "serving and at once when the rank goes idle.",
    ),
    MetricSpec(
        EXPERT_TOKENS_UNPUBLISHED,
        "gauge",
        RANK_LABELS,
        "1 while this rank has served steps whose routing is not yet in moeperf_expert_tokens_total, 0 once all "
        "is (set to 1 by the first step after a publish, to 0 by the publish that covers the last step); the "
        "harness waits for 0 before it reads a window.",
    ),
    MetricSpec(
        "moeperf_rank_ttft_seconds",
        "histogram",
        RANK_LABELS,
        "Per-rank time to first token: from the start of the first step that schedules a request on this "
        "rank to the end of the step that completes its prefill on this rank.",
        TTFT_BUCKETS_S,
    ),
    MetricSpec(
        RANK_STEP_SECONDS,
        "histogram",
        (*RANK_LABELS, "phase"),
        "Per-rank host time of each model step (execute_model + sample_tokens), by phase: prefill, decode or "
        "mixed. With vLLM's asynchronous scheduling (its default on CUDA) the host returns before the GPU finishes, "
        "so this is the host's share of a step, not the step: on an H200 decode steps took 3.1 ms here and 8.8 ms "
        "on the GPU (moeperf_gpu_step_seconds).",
        STEP_BUCKETS_S,
    ),
    MetricSpec(
        "moeperf_rank_sync_stall_seconds",
        "histogram",
        RANK_LABELS,
        "Per step, time this rank spent in tensor-parallel collectives beyond the least any rank spent in "
        "that step: how long it waited for the slowest rank.",
        STALL_BUCKETS_S,
    ),
    MetricSpec(
        "moeperf_step_skew_seconds",
        "histogram",
        ENGINE_LABELS,
        "Per step, slowest minus fastest rank's busy time (step time outside collectives); observed by rank 0.",
        STALL_BUCKETS_S,
    ),
    MetricSpec(
        STEPS_GATED,
        "counter",
        (*ENGINE_LABELS, "gating_rank"),
        f"Slow steps (skew at least {GATED_MIN_SKEW_S * 1e3:g} ms) by the rank that gated them: the one with the most "
        "busy time, which every other rank waited for; observed by rank 0.",
    ),
    MetricSpec(
        STEPS_GATED_SECONDS,
        "counter",
        (*ENGINE_LABELS, "gating_rank"),
        "Skew of those slow steps, summed by the rank that gated them: the waiting each rank cost the others.",
    ),
    MetricSpec(
        "moeperf_rank_collective_seconds_total",
        "counter",
        RANK_LABELS,
        "Host time this rank spent inside vLLM collectives (all-reduce, all-gather, ...) during model steps.",
    ),
    MetricSpec(
        "moeperf_plugin_overhead_seconds_total",
        "counter",
        RANK_LABELS,
        "Host time the plugin's own per-step bookkeeping took on this rank (its instrument cost; compare "
        "with the sum of moeperf_rank_step_seconds).",
    ),
    MetricSpec(
        "moeperf_triton_compiles_total",
        "counter",
        (*RANK_LABELS, "kernel", "during"),
        "Triton JIT compilations per kernel on this rank (disk-cache loads excluded); during = startup "
        "(before the first served step) or serving.",
    ),
    MetricSpec(
        "moeperf_triton_cache_hits_total",
        "counter",
        (*RANK_LABELS, "kernel", "during"),
        "Triton kernels loaded from the on-disk cache instead of compiled, per kernel on this rank.",
    ),
    MetricSpec(
        "moeperf_triton_compile_seconds",
        "histogram",
        (*RANK_LABELS, "kernel", "during"),
        "Wall time from a Triton cache miss to the kernel being ready (compile or disk-cache load).",
        COMPILE_BUCKETS_S,
    ),
    MetricSpec(
        "moeperf_rank_process_cpu_seconds_total",
        "counter",
        (*RANK_LABELS, "mode"),
        "CPU time of this rank's worker process (all its threads), by mode = user or system, since the plugin "
        "started; sampled every MOEPERF_GPU_POLL_S seconds.",
    ),
    MetricSpec(
        "moeperf_rank_involuntary_switches_total",
        "counter",
        RANK_LABELS,
        "Involuntary context switches of this rank's worker threads (the kernel took the CPU from a runnable "
        "thread), summed over the threads alive at each sample.",
    ),
    MetricSpec(
        "moeperf_node_cpu_steal_seconds_total",
        "counter",
        RANK_LABELS,
        "CPU time the node's hypervisor gave to others while this node's vCPUs were runnable (/proc/stat steal, "
        "all CPUs summed); node-wide, the same on every rank of a node. Absent where the kernel has no steal field.",
    ),
    MetricSpec(
        "moeperf_node_cpu_pressure_seconds_total",
        "counter",
        RANK_LABELS,
        "Time some task of the node waited for a CPU (/proc/pressure/cpu 'some' total); node-wide, the same on "
        "every rank of a node. Absent where the kernel has no PSI.",
    ),
    MetricSpec(
        "moeperf_gpu_utilization_ratio",
        "gauge",
        RANK_LABELS,
        "NVML GPU utilisation (0-1) of this rank's GPU, sampled every MOEPERF_GPU_POLL_S seconds.",
    ),
    MetricSpec("moeperf_gpu_memory_used_bytes", "gauge", RANK_LABELS, "NVML memory used on this rank's GPU."),
    MetricSpec("moeperf_gpu_memory_total_bytes", "gauge", RANK_LABELS, "NVML total memory of this rank's GPU."),
    MetricSpec("moeperf_gpu_sm_clock_hertz", "gauge", RANK_LABELS, "NVML SM clock of this rank's GPU."),
    MetricSpec("moeperf_gpu_power_watts", "gauge", RANK_LABELS, "NVML power draw of this rank's GPU."),
    MetricSpec("moeperf_gpu_memory_clock_hertz", "gauge", RANK_LABELS, "NVML memory (HBM) clock of this rank's GPU."),
    MetricSpec("moeperf_gpu_temperature_celsius", "gauge", RANK_LABELS, "NVML core temperature of this rank's GPU."),
    MetricSpec(
        GPU_STEP_SECONDS,
        "histogram",
        (*RANK_LABELS, "phase"),
        "GPU time of each model step on this rank, by phase: between CUDA events recorded on the step's stream "
        "when it begins and when it ends (its kernels, plus any gap while the GPU waited for the host); read "
        "without waiting, a few steps late. Beside moeperf_rank_step_seconds (host time) it says whether the GPU "
        "or the host made a step slow.",
        STEP_BUCKETS_S,
    ),
    MetricSpec(
        "moeperf_gpu_throttle_reasons",
        "gauge",
        RANK_LABELS,
        "NVML clocks-event (throttle) reasons bitmask of this rank's GPU (0 = not throttled).",
    ),
)
GPU_SPECS = tuple(s for s in SPECS if s.name.startswith("moeperf_gpu_"))


def spec(name: str) -> MetricSpec:
    return next(s for s in SPECS if s.name == name)


def create(s: MetricSpec, registry: Any = None) -> Any:
    """The prometheus_client object of a spec (imported here: only worker processes pay for it)."""
    import prometheus_client as pc

    kwargs: dict[str, Any] = {} if registry is None else {"registry": registry}
    if s.kind == "counter":
        return pc.Counter(s.name.removesuffix("_total"), s.help, s.labels, **kwargs)
    if s.kind == "histogram":
        return pc.Histogram(s.name, s.help, s.labels, buckets=s.buckets, **kwargs)
    # Gauges: one writer per label set (each rank owns its labels), so "mostrecent" is exact.
    return pc.Gauge(s.name, s.help, s.labels, multiprocess_mode="mostrecent", **kwargs)


class Metrics:
    """All plugin metrics of one process, created on first use."""

    def __init__(self, registry: Any = None) -> None:
        self._registry = registry
        self._objs: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        obj = self._objs.get(name)
        if obj is None:
            obj = self._objs[name] = create(spec(name), self._registry)
        return obj
