"""Where an arm's client actors go: on the engine's node, or spread over the worker nodes."""

from __future__ import annotations

from typing import Any

import ray

LOOPBACK_PREFIXES = ("127.", "localhost", "::1")


class ClientPlacementError(RuntimeError):
    """Client actors were asked to run where they could not reach the engine."""


def alive_nodes() -> list[dict[str, Any]]:
    return sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])


def is_head(node: dict[str, Any]) -> bool:
    return "node:__internal_head__" in node.get("Resources", {})


def client_nodes(placement: str, engine_node_id: str, num_actors: int, engine_host: str) -> list[str]:
    """Node id for each client actor, in shard order."""
    if placement == "engine_node":
        return [engine_node_id] * num_actors
    nodes = alive_nodes()
    workers = [n for n in nodes if not is_head(n)] or nodes
    chosen = [workers[i % len(workers)] for i in range(num_actors)]
    if engine_host.startswith(LOOPBACK_PREFIXES):
        engine_addr = next(n["NodeManagerAddress"] for n in nodes if n["NodeID"] == engine_node_id)
        far = sorted({n["NodeManagerAddress"] for n in chosen if n["NodeManagerAddress"] != engine_addr})
        if far:
            raise ClientPlacementError(
                f"client.placement=spread puts clients on hosts {far}, but the engine binds {engine_host} on "
                f"{engine_addr}: set engine.host: node-ip"
            )
    return [n["NodeID"] for n in chosen]
