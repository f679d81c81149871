"""Where a fused-MoE call spends its GPU time, kernel by kernel: the answer a slower benchmark cell needs.

Why: ``vs_vllm`` times each side as one CUDA graph, which says *that* moe_opt is slower in a cell, not *where*.
When both sides run the same GEMM tile and moe_opt is still slower (measured on the H200, vLLM 0.26: Qwen3-235B
FP8 and DeepSeek-V3 at 4096 tokens, 2-4%), the difference is outside the tile (alignment, activation, the final
sum, a copy), and only a per-kernel breakdown shows which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

NAME_CHARS = 96
"""Kernel names are kept to this many characters (Triton's and CUTLASS's are long; the start says which)."""


def per_call_us(events: Iterable[tuple[str, float, int]], calls: int) -> dict[str, dict[str, float]]:
    """``(kernel name, device time in us, launches)`` rows (one per kernel name, as the profiler averages them)
    -> ``{name: {"us_per_call", "launches_per_call"}}`` over ``calls`` calls, the most expensive first; rows
    with no device time (host-side events) are dropped and names that shorten alike are merged."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    merged: dict[str, list[float]] = {}
    for name, device_us, launches in events:
        if device_us <= 0:
            continue
        row = merged.setdefault(name[:NAME_CHARS], [0.0, 0.0])
        row[0] += device_us
        row[1] += launches
    ordered = sorted(merged.items(), key=lambda kv: -kv[1][0])
    return {k: {"us_per_call": v[0] / calls, "launches_per_call": v[1] / calls} for k, v in ordered}


def profile_calls(fn: Callable[[], Any], calls: int = 10) -> dict[str, dict[str, float]]:
    """Run ``fn`` ``calls`` times eagerly (after one unprofiled call) under the CUDA profiler; per-kernel time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, float(getattr(e, "self_device_time_total", 0.0)), int(e.count)) for e in prof.key_averages()]
    return per_call_us(rows, calls)
