"""Random MoE layers at the benchmark shapes, several copies when one would fit in the L2."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from moe_opt.bench.cost import BYTES_PER_WEIGHT
from moe_opt.bench.shapes import MoeShape
from moe_opt.kernels import Fp8Scales
from moe_opt.kernels.testing import make_moe

# H200 L2 is 50 MB (60 MiB class); keep the rotated weight footprint well past it.
ROTATION_BYTES = 400 << 20


@dataclass
class Layer:
    x: torch.Tensor  # [max_tokens, H] bf16
    w13: torch.Tensor
    w2: torch.Tensor
    logits: torch.Tensor  # [max_tokens, E]
    scales: Fp8Scales | None


def num_sets(shape: MoeShape, dtype: str) -> int:
    weight_bytes = shape.weight_params * BYTES_PER_WEIGHT[dtype]
    return max(1, min(8, math.ceil(ROTATION_BYTES / weight_bytes)))


def make_layers(shape: MoeShape, dtype: str, max_tokens: int) -> list[Layer]:
    layers = []
    for seed in range(num_sets(shape, dtype)):
        x, w13, w2, logits, scales = make_moe(
            max_tokens, shape.num_experts, shape.hidden_size, shape.intermediate_size, dtype, seed=seed
        )
        layers.append(Layer(x, w13, w2, logits, scales))
    torch.cuda.empty_cache()
    return layers
