"""The tile configs tried per batch bucket: vLLM's config keys, bounded so a tune fits a short GPU lease.

A config is exactly one entry of vLLM's tuned JSON (``TILE_KEYS``): vLLM uses the same config for both GEMMs of
the fused MoE (``fused_experts_impl`` looks it up once per call), so a candidate is timed on the whole
``fused_experts`` call, never per GEMM.

Two spaces. ``full``: every combination vLLM's own tuner sweeps (block M 16-256, N 32-256, K 64-256, group 1-64,
4/8 warps, 2-5 stages), about 1,900 per bucket: hours per shape. ``small`` (default): the block M that fits the
bucket's tokens per expert (``M * top_k / E``, the rows one expert's tile holds), the rest a few values each,
about 50-150 per bucket, the configs shared between buckets of one regime so Triton compiles each once.

Both drop what cannot compile or cannot be right: tiles whose pipeline needs more than the H100/H200 shared memory
per block (227 KiB), and for block-quantised FP8 tiles that do not divide the quant block (vLLM 0.26
``get_default_config``: "any N tile dividing the quant block is valid"; ``invoke_fused_moe_triton_kernel``
clamps BLOCK_SIZE_K to the block, so larger K tiles only duplicate smaller ones).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Literal

from moe_opt.tune.shape import MoeShape

TILE_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
"""The keys of one bucket's entry in vLLM's tuned-config JSON."""
Space = Literal["small", "full"]
SPACES: tuple[Space, ...] = ("small", "full")
SHARED_MEMORY_BYTES = 227 * 1024
"""Largest dynamic shared memory per block on H100/H200 (SM90)."""

Tile = dict[str, int]


def tile(config: Mapping[str, int]) -> Tile:
    """The tuned-JSON entry of a config vLLM returns (drops SPLIT_K and anything else it adds at launch)."""
    return {k: int(config[k]) for k in TILE_KEYS}


def tile_key(config: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(int(config[k]) for k in TILE_KEYS)


def tokens_per_expert(bucket: int, shape: MoeShape) -> float:
    return bucket * shape.top_k / shape.experts


def _block_m_choices(bucket: int, shape: MoeShape) -> tuple[int, ...]:
    per_expert = tokens_per_expert(bucket, shape)
    if per_expert <= 16:
        return (16, 32)
    if per_expert <= 64:
        return (16, 32, 64)
    if per_expert <= 256:
        return (32, 64, 128)
    return (64, 128, 256)


def _grid(bucket: int, shape: MoeShape, space: Space) -> list[Tile]:
    fp8 = shape.dtype == "fp8_w8a8"
    if space == "full":
        axes: tuple[tuple[int, ...], ...] = (
            (16, 32, 64, 128, 256),
            (32, 64, 128, 256),
            (64, 128, 256),
            (1, 16, 32, 64),
            (4, 8),
            (2, 3, 4, 5),
        )
    else:
        block_m = _block_m_choices(bucket, shape)
        grouped = tokens_per_expert(bucket, shape) > min(block_m)  # several M tiles per expert: grouping can help
        axes = (
            block_m,
            (64, 128, 256),
            (128, 256) if fp8 else (64, 128),
            (1, 16) if grouped else (1,),
            (4, 8),
            (3, 4, 5) if max(block_m) <= 64 else (3, 4),
        )
    return [dict(zip(TILE_KEYS, values, strict=True)) for values in itertools.product(*axes)]


def fits(config: Mapping[str, int], shape: MoeShape) -> bool:
    """Whether the tile can compile (shared memory) and is valid for the shape's FP8 block."""
    elem_bytes = 1 if shape.dtype == "fp8_w8a8" else 2
    bm, bn, bk, stages = (config[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_stages"))
    if (bm * bk + bk * bn) * elem_bytes * stages > SHARED_MEMORY_BYTES:
        return False
    if shape.block_shape is not None:
        block_n, block_k = shape.block_shape
        if block_n % bn or block_k % bk:
            return False
    return True


def candidates(bucket: int, shape: MoeShape, space: Space = "small") -> list[Tile]:
    """The configs to time for batch ``bucket`` of ``shape``, deduplicated, in a stable order."""
    if space not in SPACES:
        raise ValueError(f"unknown space {space!r} ({' | '.join(SPACES)})")
    seen: dict[tuple[int, ...], Tile] = {}
    for c in _grid(bucket, shape, space):
        if fits(c, shape):
            seen.setdefault(tile_key(c), c)
    return [seen[k] for k in sorted(seen)]
