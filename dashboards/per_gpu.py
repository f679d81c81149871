"""Dashboard 2, per GPU: what one engine's ranks do, from the moeperf vLLM worker plugin.

vLLM reports latency per engine only; with TP=8 an engine is eight GPUs. The plugin's per-rank
series (``docs/metrics.md``) show which rank is slow, how long the others wait for it in every
collective (sync stall), the GPUs' NVML telemetry (GPU only: absent on vLLM's CPU build) and how
unevenly each MoE layer's router spreads the live traffic over its experts.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd

from dashboards.panels import GPU_ONLY, dashboard, heat, tab, ts
from dashboards.promql import RATE, Query, mean, quantile, rate, sel

UID = "moeperf-per-gpu"
R = sel(rank=True)
PLUGIN = "moeperf plugin, per rank (docs/metrics.md)."
WHO = "{{arm}} {{node}} r{{rank}}"


def latency_row() -> list[object]:
    return [
        ts(
            "Per-rank TTFT p50 / p99",
            "s",
            [
                Query(quantile(0.5, "moeperf_rank_ttft_seconds", R, "arm, node, rank"), f"{WHO} p50"),
                Query(quantile(0.99, "moeperf_rank_ttft_seconds", R, "arm, node, rank"), f"{WHO} p99"),
            ],
            f"{PLUGIN} From the first step that schedules a request on the rank to the end of the step that "
            "completes its prefill there (no queueing, no detokenisation).",
        ),
        ts(
            "Per-rank step time p50 by phase",
            "s",
            [Query(quantile(0.5, "moeperf_rank_step_seconds", R, "arm, node, rank, phase"), f"{WHO} {{{{phase}}}}")],
            f"{PLUGIN} execute_model + sample_tokens per step, by phase (prefill, decode, mixed).",
        ),
        ts(
            "Per-rank steps/s",
            "ops",
            [Query(rate("moeperf_rank_step_seconds_count", R, "arm, node, rank"), WHO)],
            f"{PLUGIN} Model steps per second on each rank.",
        ),
        ts(
            "Mean step time per rank",
            "s",
            [Query(mean("moeperf_rank_step_seconds", R, "arm, node, rank"), WHO)],
            f"{PLUGIN} Mean step time (all phases) per rank.",
        ),
    ]


def sync_row() -> list[object]:
    return [
        heat(
            "Sync stall p90 per rank (heatmap)",
            "s",
            [Query(quantile(0.9, "moeperf_rank_sync_stall_seconds", R, "arm, node, rank"), WHO)],
            f"{PLUGIN} One row per rank, colour = p90 time the rank waited in collectives for the slowest "
            "rank. TP=1 engines observe 0 every step; with CUDA graphs the stall is only measured with "
            "--enforce-eager.",
        ),
        heat(
            "Sync stall distribution (all selected ranks)",
            "s",
            [
                Query(
                    f"sum by (le) (increase(moeperf_rank_sync_stall_seconds_bucket{R}[{RATE}]))", "{{le}}", heatmap=True
                )
            ],  # fmt: skip
            f"{PLUGIN} Steps per stall bucket over time.",
        ),
        ts(
            "Step skew p99 (slowest - fastest rank busy time)",
            "s",
            [Query(quantile(0.99, "moeperf_step_skew_seconds", sel(), "arm, node"), "{{arm}} {{node}}")],
            "moeperf plugin, per engine (rank 0): spread of busy time between ranks in a step.",
        ),
        ts(
            "Slow steps by the rank that gated them",
            "ops",
            [
                Query(
                    rate("moeperf_steps_gated_total", sel(), "arm, node, gating_rank"),
                    "{{arm}} {{node}} gated by r{{gating_rank}}",
                )
            ],
            "moeperf plugin, per engine (rank 0): steps per second whose skew reached 1 ms, by the rank with the "
            "most busy time (the one every other rank waited for). One rank above the rest is the rank to look "
            "at; TP=1 engines count none.",
        ),
        ts(
            "Share of time in collectives",
            "percentunit",
            [Query(rate("moeperf_rank_collective_seconds_total", R, "arm, node, rank"), WHO)],
            f"{PLUGIN} Host seconds per second spent inside vLLM collectives during steps.",
        ),
    ]


def gpu_row() -> list[object]:
    by = "arm, node, rank, gpu"
    who = "{{arm}} {{node}} r{{rank}} gpu{{gpu}}"
    gauges = (
        ("GPU utilisation", "percentunit", "moeperf_gpu_utilization_ratio"),
        ("GPU memory used", "bytes", "moeperf_gpu_memory_used_bytes"),
        ("GPU SM clock", "hertz", "moeperf_gpu_sm_clock_hertz"),
        ("GPU power", "watt", "moeperf_gpu_power_watts"),
        ("GPU memory clock", "hertz", "moeperf_gpu_memory_clock_hertz"),
        ("GPU temperature", "celsius", "moeperf_gpu_temperature_celsius"),
    )
    panels: list[object] = [
        ts(title, unit, [Query(f"max by ({by}) ({metric}{R})", who)], GPU_ONLY, span=6)
        for title, unit, metric in gauges
    ]
    panels.append(
        ts(
            "GPU memory used / total",
            "percentunit",
            [
                Query(
                    f"max by ({by}) (moeperf_gpu_memory_used_bytes{R}) / max by ({by}) "
                    f"(moeperf_gpu_memory_total_bytes{R})",
                    who,
                )
            ],  # fmt: skip
            GPU_ONLY,
        )
    )
    panels.append(
        ts(
            "GPU time per step, by phase",
            "s",
            [Query(mean("moeperf_gpu_step_seconds", R, "arm, node, rank, phase"), WHO + " {{phase}}")],
            f"{GPU_ONLY} Mean GPU time of a model step between CUDA events at its start and end; beside the host "
            "step time above, it says whether the GPU or the host made steps slow.",
        )
    )
    panels.append(
        ts(
            "GPU throttle reasons (bitmask, 0 = none)",
            "short",
            [Query(f"max by ({by}) (moeperf_gpu_throttle_reasons{R})", who)],
            GPU_ONLY,
        )
    )
    return panels


def host_row() -> list[object]:
    """The host side of each engine's steps: two engines of one setting that differ while their GPUs do not
    (seen on the H200 VM) differ here, if anywhere."""

    def node(metric: str) -> str:  # node-wide: every rank of a node exports the same value
        return f"max by (node) (rate({metric}{R}[{RATE}]))"

    return [
        ts(
            "Worker CPU per second, by mode",
            "percentunit",
            [Query(rate("moeperf_rank_process_cpu_seconds_total", R, "arm, node, rank, mode"), WHO + " {{mode}}")],
            f"{PLUGIN} CPU seconds per second of each rank's worker process (all threads): 1 = one core busy.",
            span=6,
        ),
        ts(
            "Worker involuntary context switches",
            "ops",
            [Query(rate("moeperf_rank_involuntary_switches_total", R, "arm, node, rank"), WHO)],
            f"{PLUGIN} Times per second the kernel took a CPU from a runnable worker thread: contention for cores.",
            span=6,
        ),
        *(
            ts(title, "percentunit", [Query(node(metric), "{{node}}")], f"{PLUGIN} {what}", span=6)
            for title, metric, what in (
                (
                    "Node CPU steal",
                    "moeperf_node_cpu_steal_seconds_total",
                    "vCPU-seconds per second the hypervisor gave to others while this node's vCPUs were "
                    "runnable (all CPUs summed; 1 = one vCPU's worth). Zero on bare metal.",
                ),
                (
                    "Node CPU pressure",
                    "moeperf_node_cpu_pressure_seconds_total",
                    "Share of time some task of the node waited for a CPU (Linux PSI); empty where the kernel "
                    "has no PSI.",
                ),
            )
        ),
    ]


def routing_row() -> list[object]:
    tokens = f"rate(moeperf_expert_tokens_total{R}[{RATE}])"
    by = "arm, node, layer"
    return [
        ts(
            "Expert-load imbalance per MoE layer",
            "short",
            [Query(f"max by ({by}) ({tokens}) / avg by ({by}) ({tokens})", "{{arm}} {{node}} layer {{layer}}")],
            f"{PLUGIN} Per MoE layer, tokens/s of its busiest expert over the mean expert's (1 = perfectly "
            "balanced; E = every token to one expert), from moeperf_expert_tokens_total (counted on the device "
            "inside the MoE forward, CUDA-graph replays included). With TP every rank routes identically.",
        )
    ]


def info_row() -> list[object]:
    return [
        tab(
            "Ranks and the arm's flags",
            [
                Query(
                    f"max by (arm, node, rank, gpu, gpu_uuid, platform, vllm_version, swap_ab, swap_ab_status, "
                    f"moe_backend, moe_backend_status, no_respecialize, no_respecialize_status, flags_applied) "
                    f"(moeperf_plugin_info{R})",
                    table=True,
                )
            ],  # fmt: skip
            f"{PLUGIN} One row per worker rank: its GPU and whether each requested flag was applied, left at "
            "vLLM's default or is not applicable (CPU build).",
        )
    ]


def build() -> object:
    d = dashboard(
        UID,
        "moeperf: per GPU",
        "Per-rank TTFT, step time, cross-rank sync stall and GPU telemetry from the moeperf vLLM worker plugin.",
        rank=True,
    )
    rows = (
        ("Per-rank latency and steps", latency_row()),
        ("Cross-rank synchronisation", sync_row()),
        ("GPU telemetry (NVML; GPU only)", gpu_row()),
        ("Host CPU of each engine", host_row()),
        ("MoE routing", routing_row()),
        ("Ranks", info_row()),
    )
    for title, panels in rows:
        d = d.with_row(gd.Row(title))
        for p in panels:
            d = d.with_panel(p)  # type: ignore[arg-type]
    return d.build()
