"""The real timing function of a tune: one config's ``fused_experts`` call on the GPU, in microseconds.

Each call is captured in a CUDA graph and replayed (``moe_opt.bench.timing.time_graph_ms``), as vLLM serves
decode batches, so host launch gaps do not favour tiles with fewer launches. Inputs per bucket are drawn once
(same routing for every candidate of the bucket) so candidates differ only by their tile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from moe_opt.tune.shape import MoeShape
from moe_opt.tune.vllm_path import VllmMoe

TimeFn = Callable[[int, Mapping[str, int]], float]
"""(bucket, config) -> median microseconds of one fused_experts call; raises when the config cannot run."""


def gpu_time_fn(shape: MoeShape, routing: str, seed: int = 0, trials: int = 10) -> TimeFn:
    """A TimeFn on the current CUDA device; the weights are allocated on first use."""
    from moe_opt.bench.timing import time_graph_ms

    moe: list[VllmMoe] = []
    inputs: dict[int, Callable[[Mapping[str, int]], Callable[[], object]]] = {}

    def time_us(bucket: int, config: Mapping[str, int]) -> float:
        if not moe:
            moe.append(VllmMoe(shape))
        if bucket not in inputs:
            inputs[bucket] = moe[0].runner(bucket, routing, seed=seed + bucket)
        return 1000.0 * time_graph_ms([inputs[bucket](config)], trials=trials)

    return time_us
