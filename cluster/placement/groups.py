"""One placement group per arm: the engine's CPU bundle plus one GPU bundle per TP rank, packed on one node.

Waiting on a placement group that can never be satisfied hangs forever in Ray; here it times out
with what the arm asked for and what the cluster has, which is what a user needs to fix it.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from experiment.config import EngineSpec


class PlacementError(RuntimeError):
    """An arm's resources could not be reserved in time."""


def arm_bundles(engine: EngineSpec, device: str) -> list[dict[str, float]]:
    bundles: list[dict[str, float]] = [{"CPU": engine.cpus_per_engine}]
    if device == "cuda":
        gpu: dict[str, float] = {"GPU": 1.0}
        if engine.accelerator_type:
            gpu[f"accelerator_type:{engine.accelerator_type}"] = 0.001
        bundles += [dict(gpu) for _ in range(engine.tensor_parallel_size)]
    return bundles


def reserve(arm: str, bundles: list[dict[str, float]], timeout_s: float) -> PlacementGroup:
    pg = placement_group(bundles, strategy="STRICT_PACK", name=f"moeperf-{arm}")
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(pg)
        raise PlacementError(
            f"arm {arm!r}: could not reserve {bundles} on one node (STRICT_PACK) within {timeout_s:.0f} s; "
            f"cluster total {_fmt(ray.cluster_resources())}, available now {_fmt(ray.available_resources())}"
        )
    return pg


def release(pg: PlacementGroup | None) -> None:
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception:  # already gone with the cluster: nothing left to free
            pass


@ray.remote(num_cpus=0)
def _gpu_ids_of_bundle() -> tuple[str, list[str]]:
    return ray.get_runtime_context().get_node_id(), [str(g) for g in ray.get_gpu_ids()]


def bundle_gpu_ids(pg: PlacementGroup, num_gpu_bundles: int) -> list[str]:
    """GPU ids Ray gave the arm's GPU bundles, asked by one tiny task per bundle.

    The EngineActor itself holds no GPU (the vLLM workers it spawns do), so it learns its
    devices this way and passes them on as CUDA_VISIBLE_DEVICES.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    refs = [
        _gpu_ids_of_bundle.options(
            num_gpus=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i + 1),
        ).remote()
        for i in range(num_gpu_bundles)
    ]
    return [gid for _, ids in ray.get(refs) for gid in ids]


def _fmt(resources: dict[str, Any]) -> str:
    keep = {k: v for k, v in resources.items() if not k.startswith("node:") and "memory" not in k}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"
