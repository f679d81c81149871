"""Dashboard 3, JIT: Triton compilations per kernel and rank over time, and what they cost.

A kernel that re-specialises on a batch-dependent argument compiles again while serving: that is
a latency spike in production and what the ``no_respecialize`` arm removes. Compile events come
from the moeperf plugin's Triton hooks (GPU only: vLLM's CPU build runs no Triton kernels). Run
and arm annotations show which arm was replaying when a compilation happened.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd

from dashboards.panels import TRITON_ONLY, dashboard, single, tab, ts
from dashboards.promql import RATE, Query, quantile, sel

UID = "moeperf-jit"
R = sel(rank=True)
BY = "arm, node, rank, kernel, during"
WHO = "{{arm}} r{{rank}} {{kernel}} ({{during}})"
SERVING = sel(rank=True, extra='during="serving"')


def compile_row() -> list[object]:
    return [
        ts(
            "Triton compilations per kernel and rank",
            "short",
            [Query(f"sum by ({BY}) (increase(moeperf_triton_compiles_total{R}[{RATE}]))", WHO)],
            f"{TRITON_ONLY} Compilations in each interval; 'serving' ones happened after the rank's first served "
            "step (a re-specialisation under load).",
            span=24,
        ),
        ts(
            "Cumulative compilations",
            "short",
            [Query(f"sum by ({BY}) (moeperf_triton_compiles_total{R})", WHO)],
            f"{TRITON_ONLY} Compilations since the engine started.",
        ),
        single(
            "Compilations while serving (range)",
            "short",
            [Query(f"sum by (arm) (increase(moeperf_triton_compiles_total{SERVING}[$__range]))", "{{arm}}")],
            f"{TRITON_ONLY} Per arm: compilations after warm-up over the dashboard's range (0 is the goal).",
        ),
        ts(
            "Compile time p90 per kernel",
            "s",
            [
                Query(
                    quantile(0.9, "moeperf_triton_compile_seconds", R, "arm, kernel, during"),
                    "{{arm}} {{kernel}} ({{during}})",
                )
            ],  # fmt: skip
            f"{TRITON_ONLY} From a Triton cache miss to the kernel being ready.",
        ),
        ts(
            "Compile seconds per second",
            "percentunit",
            [
                Query(
                    f"sum by (arm, node, rank) (rate(moeperf_triton_compile_seconds_sum{R}[{RATE}]))",
                    "{{arm}} {{node}} r{{rank}}",
                )
            ],  # fmt: skip
            f"{TRITON_ONLY} Share of wall time each rank spent compiling.",
        ),
        ts(
            "Disk-cache hits per kernel and rank",
            "short",
            [Query(f"sum by ({BY}) (increase(moeperf_triton_cache_hits_total{R}[{RATE}]))", WHO)],
            f"{TRITON_ONLY} Kernels loaded from Triton's on-disk cache instead of compiled.",
        ),
    ]


def flags_row() -> list[object]:
    return [
        tab(
            "Re-specialisation flag per arm and rank",
            [
                Query(
                    f"max by (arm, node, rank, platform, no_respecialize, no_respecialize_status, flags_applied) "
                    f"(moeperf_plugin_info{R})",
                    table=True,
                )
            ],  # fmt: skip
            "moeperf plugin: whether no_respecialize was requested and applied on each rank "
            "(not_applicable_cpu on vLLM's CPU build).",
        )
    ]


def build() -> object:
    d = dashboard(
        UID,
        "moeperf: JIT compilations",
        "Triton compilations per kernel and rank over time, compile seconds and cache hits, with run and arm "
        "annotations.",
        rank=True,
    )
    for title, panels in (("Triton JIT (GPU only)", compile_row()), ("Flags", flags_row())):
        d = d.with_row(gd.Row(title))
        for p in panels:
            d = d.with_panel(p)  # type: ignore[arg-type]
    return d.build()
