"""`moeperf plan`: where each arm and client actor would go on the current cluster, before starting any.

Placement is simulated with the same bundles the run reserves (STRICT_PACK: all of an arm's
bundles on one node) against what the cluster has free now. A plan that cannot fit is refused with
what is missing, rather than discovered as a placement timeout an hour into a nightly job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cluster.placement.clients import alive_nodes, is_head
from cluster.placement.groups import arm_bundles
from experiment.config import ExperimentConfig
from workloads.schedule import PlannedRequest
from workloads.schedule_columns import ScheduleColumns, as_columns, most_within

CLIENT_CAPACITY_RPS = 200.0
"""Requests/s one client actor is planned for. Deliberately below what one process sustained in
bench/ (see bench/results), so a plan leaves headroom for streaming many tokens per request."""


@dataclass
class NodeFree:
    node_id: str
    address: str
    head: bool
    free: dict[str, float]


@dataclass
class ArmPlan:
    arm: str
    node_id: str | None
    bundles: list[dict[str, float]]
    missing: str | None = None
    client_nodes: list[str] = field(default_factory=list)


def peak_rate_rps(requests: ScheduleColumns | Sequence[PlannedRequest], window_s: float = 1.0) -> float:
    """Most requests inside any window of ``window_s`` seconds, per second (whole-array: a week-long trace's
    plan is checked in a fraction of a second)."""
    return most_within(np.sort(as_columns(requests).send_offset_s), window_s) / window_s


def _fits(bundles: list[dict[str, float]], free: dict[str, float]) -> bool:
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in need.items())


def _take(bundles: list[dict[str, float]], free: dict[str, float]) -> None:
    for b in bundles:
        for k, v in b.items():
            free[k] = free.get(k, 0.0) - v


def cluster_nodes() -> list[NodeFree]:
    from ray._private.state import available_resources_per_node

    avail = available_resources_per_node()
    out = []
    for n in alive_nodes():
        free = {k: float(v) for k, v in avail.get(n["NodeID"], n["Resources"]).items()}
        out.append(NodeFree(n["NodeID"], n["NodeManagerAddress"], is_head(n), free))
    return out


def make_plan(cfg: ExperimentConfig, device: str, nodes: list[NodeFree]) -> list[ArmPlan]:
    plans = []
    shared = {n.node_id: dict(n.free) for n in nodes}
    for arm in cfg.arms:
        bundles = arm_bundles(cfg.engine, device)
        pool = shared if cfg.placement == "parallel" else {n.node_id: dict(n.free) for n in nodes}
        node = next((nid for nid, free in pool.items() if _fits(bundles, free)), None)
        plan = ArmPlan(arm.name, node, bundles)
        if node is None:
            best = max((n.free for n in nodes), key=lambda f: f.get("GPU", 0.0) + f.get("CPU", 0.0), default={})
            plan.missing = f"needs {bundles} on one node; the best node has free {_short(best)}"
        else:
            _take(bundles, pool[node])
            workers = [n.node_id for n in nodes if not n.head] or [n.node_id for n in nodes]
            k = cfg.client.actors_per_arm
            plan.client_nodes = (
                [node] * k if cfg.client.placement == "engine_node" else [workers[i % len(workers)] for i in range(k)]
            )
        plans.append(plan)
    return plans


def _short(res: dict[str, float]) -> str:
    keep = {k: v for k, v in res.items() if not k.startswith("node:") and "memory" not in k}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"


def render(cfg: ExperimentConfig, device: str, nodes: list[NodeFree], plans: list[ArmPlan], peak_rps: float) -> str:
    needed = max(1, math.ceil(peak_rps / CLIENT_CAPACITY_RPS))
    lines = [f"cluster: {len(nodes)} node(s), device {device}, placement {cfg.placement}, rounds {cfg.rounds}"]
    for n in nodes:
        lines.append(f"  node {n.node_id[:12]} {n.address}{' (head)' if n.head else ''} free {_short(n.free)}")
    lines.append(
        f"trace peak rate {peak_rps:.1f} req/s per arm -> at least {needed} client actor(s) per arm "
        f"at {CLIENT_CAPACITY_RPS:g} req/s each (configured: {cfg.client.actors_per_arm})"
    )
    for p in plans:
        if p.missing:
            lines.append(f"  arm {p.arm}: CANNOT PLACE: {p.missing}")
            continue
        assert p.node_id is not None
        clients = ", ".join(n[:12] for n in p.client_nodes)
        lines.append(f"  arm {p.arm}: engine on node {p.node_id[:12]} with bundles {p.bundles}; clients on [{clients}]")
    if cfg.client.actors_per_arm < needed:
        lines.append(
            f"warning: client.actors_per_arm={cfg.client.actors_per_arm} is below the {needed} the peak rate "
            "needs; the run may be client-bound"
        )
    return "\n".join(lines)
