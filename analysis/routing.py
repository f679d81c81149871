"""How the engines routed tokens to experts while they served: the report's check of ``arms[].expert_load``.

Why: kernel choices that depend on routing (tiles tuned for a skew, padding per expert) are only tested by a run
whose routing has that skew, and nothing else in a result shows it. A dummy-weight model's router can tie and
collapse: every token to the same k experts (on the H200, 48 layers of Qwen3-30B-A3B's shapes in FP8 without a
bias, 2026-12-03: experts 0-7 of 128 in every layer); so could a constant bias (2026-12-02, before the bias
sampled: 8 of 256). An A/B then compares something no deployment runs. ``MOEPERF_ROUTER_BIAS=uniform`` or
``zipf:S`` makes each token draw its experts. The report says so in one table per run and a warning line per arm,
from the result file alone.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from result_format.run_result import ArmResult

HEADERS = [
    "arm",
    "MoE layers",
    "routed tokens x top-k",
    "experts used (min of layers)",
    "hottest expert's share (max)",
    "max / mean load (median of layers)",
    "max / mean load (max)",
    "layers where every token went to the same experts",
]


@dataclass(frozen=True)
class ArmRouting:
    """One arm's routing over the measured window, summarised over its MoE layers."""

    arm: str
    layers: int
    experts: int
    routed: int
    min_experts_used: int
    max_hottest_share: float
    median_imbalance: float
    max_imbalance: float
    collapsed_layers: int
    collapsed_width: int | None  # how many experts took every token in a collapsed layer (the first one)

    def row(self) -> list[str]:
        return [
            self.arm,
            str(self.layers),
            f"{self.routed:,}",
            f"{self.min_experts_used} of {self.experts}",
            f"{self.max_hottest_share:.1%}",
            f"{self.median_imbalance:.2f}",
            f"{self.max_imbalance:.2f}",
            str(self.collapsed_layers),
        ]

    def warning(self) -> str | None:
        if not self.collapsed_layers:
            return None
        return (
            f"{self.arm}: in {self.collapsed_layers} of {self.layers} MoE layers every token went to the same "
            f"{self.collapsed_width} of {self.experts} experts (each got exactly the same count): the routing is "
            "collapsed, and results that depend on routing do not describe a served model (a dummy-weight model: "
            "set engine.env MOEPERF_ROUTER_BIAS to uniform or zipf:S)."
        )


def _collapsed(tokens: list[int]) -> int | None:
    """The number of experts that took every token, when each used expert got the same count and some got none;
    else None (a layer that used every expert, however evenly, is not collapsed)."""
    used = [t for t in tokens if t > 0]
    if not used or len(used) == len(tokens) or len(set(used)) != 1:
        return None
    return len(used)


def arm_routing(arm: ArmResult) -> ArmRouting | None:
    """None for an arm without routing counts (failed, or an engine without the plugin's counter)."""
    rows = [row.tokens for row in arm.expert_load if sum(row.tokens) > 0]
    if not rows:
        return None
    imbalance = [max(t) / (sum(t) / len(t)) for t in rows]
    collapsed = [w for w in map(_collapsed, rows) if w is not None]
    return ArmRouting(
        arm=arm.name,
        layers=len(rows),
        experts=max(len(t) for t in rows),
        routed=sum(sum(t) for t in rows),
        min_experts_used=min(sum(1 for x in t if x > 0) for t in rows),
        max_hottest_share=max(max(t) / sum(t) for t in rows),
        median_imbalance=statistics.median(imbalance),
        max_imbalance=max(imbalance),
        collapsed_layers=len(collapsed),
        collapsed_width=collapsed[0] if collapsed else None,
    )


def run_routing(arms: list[ArmResult]) -> list[ArmRouting]:
    return [r for r in map(arm_routing, arms) if r is not None]


def warnings(arms: list[ArmRouting]) -> list[str]:
    """The arms' collapsed-routing warnings, in arm order (both reports print them under the table)."""
    return [w for w in (a.warning() for a in arms) if w]


SECTION_TITLE = "Routing while serving (tokens per expert)"
SECTION_INTRO = (
    "From each engine's routing counter over the measured window (arms[].expert_load). Max / mean load is the "
    "hottest expert's tokens over the mean per expert: 1 is even; a skew tuned for shows here."
)
