"""The work a fused MoE forward cannot avoid: bytes it must move and FLOPs it must do."""

from __future__ import annotations

from moe_opt.bench.shapes import MoeShape

BYTES_PER_WEIGHT = {"bf16": 2, "fp8": 1}


def flops(shape: MoeShape, num_tokens: int) -> int:
    """Two GEMMs per (token, expert) pair: 2*H*2I (gate|up) + 2*I*H (down)."""
    return 6 * num_tokens * shape.top_k * shape.hidden_size * shape.intermediate_size


def bytes_moved_min(shape: MoeShape, dtype: str, num_tokens: int, active_experts: float) -> int:
    """Each touched expert's weights once, plus bf16 hidden in and out and fp32 router logits.

    Intermediates are left out: a perfectly fused kernel would keep them on chip, so they are a cost
    of this implementation, not of the problem.
    """
    per_expert = 3 * shape.hidden_size * shape.intermediate_size * BYTES_PER_WEIGHT[dtype]
    activations = num_tokens * (2 * shape.hidden_size * 2 + 4 * shape.num_experts)
    return int(active_experts * per_expert) + activations
