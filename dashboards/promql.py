"""PromQL building blocks shared by every dashboard: one place decides how a panel filters by run/arm/node/rank.

Template variables are multi-value with an "All" value of ``.*``, so every filter uses ``=~``.
"""

from __future__ import annotations

from dataclasses import dataclass

RATE = "$__rate_interval"


def sel(*, rank: bool = False, node: bool = True, arm: bool = True, extra: str = "") -> str:
    """The label filter of a panel: run always; arm, node and rank as the panel's data carries them."""
    parts = ['run=~"$run"']
    if arm:
        parts.append('arm=~"$arm"')
    if node:
        parts.append('node=~"$node"')
    if rank:
        parts.append('rank=~"$rank"')
    if extra:
        parts.append(extra)
    return "{" + ", ".join(parts) + "}"


def quantile(q: float, histogram: str, selector: str, by: str) -> str:
    """Quantile of a Prometheus histogram over the rate window, per ``by`` group."""
    return f"histogram_quantile({q:g}, sum by (le, {by}) (rate({histogram}_bucket{selector}[{RATE}])))"


def rate(metric: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{RATE}]))"


def mean(histogram: str, selector: str, by: str) -> str:
    """Mean observation of a histogram over the rate window (sum over count)."""
    return f"{rate(histogram + '_sum', selector, by)} / {rate(histogram + '_count', selector, by)}"


@dataclass(frozen=True)
class Query:
    """One panel target. ``legend`` uses Grafana's ``{{label}}`` syntax."""

    expr: str
    legend: str = ""
    instant: bool = False
    heatmap: bool = False
    table: bool = False
