"""The fused MoE forward: routing, alignment, GEMM1 (gate|up), SiLU*up, GEMM2 (down), top-k weighted sum.

`fused_moe` runs the Triton kernels; `fused_moe_torch` is its plain-torch twin with the same signature.
The Triton path never reads a device value back to the host, so a whole forward can be captured in a
CUDA graph, and the GEMM grids are sized by a bound that depends only on (num_tokens, top_k, E).
At very sparse batches (`naive_block_assignment`) the alignment is skipped, as vLLM's Triton fused MoE
does: each (token, k) slot gets an M block of its own in both GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_opt.kernels.activation import (
    silu_and_mul,
    silu_and_mul_torch,
    static_fp8_quant,
    static_fp8_quant_torch,
)
from moe_opt.kernels.align import moe_align_block_size
from moe_opt.kernels.moe_gemm import moe_gemm
from moe_opt.kernels.routing import topk_softmax, topk_softmax_quant, topk_softmax_torch
from moe_opt.kernels.switches import Fp8Scales, KernelSwitches, TileConfig, UnsupportedKernelConfig
from moe_opt.kernels.tile_configs import TileChoice, TileTable, default_table
from moe_opt.kernels.topk_sum import topk_sum

DEFAULT_SWITCHES = KernelSwitches()

# vLLM's margin for its "naive block assignment": a batch whose num_tokens * top_k slots, times this
# factor, fit in the expert count skips `moe_align_block_size` (most experts get at most one slot, so
# aligning buys no reuse and costs a launch). vLLM writes it as the literal 4 beside a comment naming
# SPARSITY_FACTOR, in `_prepare_expert_assignment` of vllm/model_executor/layers/fused_moe/fused_moe.py
# (0.26 and 0.32 alike). Its LoRA MoE path (vllm/lora/punica_wrapper/punica_gpu.py) uses its own
# SPARSITY_FACTOR = 8, which is not the one that applies here.
SPARSITY_FACTOR = 4


@dataclass(frozen=True)
class GemmPlan:
    tile: TileConfig
    source: str  # where the tile came from: "table", "default" or "explicit"
    bucket: int
    swap_ab_applied: bool  # False with swap requested means "not applicable to this tile" (documented)


@dataclass(frozen=True)
class MoePlan:
    gemm1: GemmPlan
    gemm2: GemmPlan
    naive_slots: bool  # no alignment: one M block per (token, k) slot in both GEMMs (naive_block_assignment)


def naive_block_assignment(num_tokens: int, top_k: int, num_experts: int) -> bool:
    """vLLM's rule for skipping the alignment: num_tokens * top_k * SPARSITY_FACTOR <= num_experts.

    vLLM also requires no expert map (expert parallelism) and no block-quantised int8/int4 w8a16/w4a16
    weights; moe_opt has neither, so only the sparsity test remains."""
    return num_tokens * top_k * SPARSITY_FACTOR <= num_experts


def _gemm_plan(choice: TileChoice, switches: KernelSwitches) -> GemmPlan:
    applicable = choice.tile.swap_ab_applicable()
    if switches.swap_ab and not applicable and choice.source == "explicit":
        raise UnsupportedKernelConfig(
            f"swap_ab=True with explicit tile {choice.tile}: Swap-AB needs block_m < 64 and block_n >= 64"
        )
    return GemmPlan(choice.tile, choice.source, choice.bucket, switches.swap_ab and applicable)


def plan_fused_moe(
    num_tokens: int,
    num_experts: int,
    hidden_size: int,
    intermediate_size: int,
    top_k: int,
    switches: KernelSwitches,
    tile_table: TileTable | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> MoePlan:
    """Decide tiles, where Swap-AB applies and whether the alignment is skipped (`naive_slots`), without
    touching a GPU (also what the bench records)."""
    if tiles is not None:
        choices = [TileChoice(t, "explicit", num_tokens) for t in tiles]
    else:
        table = tile_table if tile_table is not None else default_table()
        choices = [
            table.lookup(num_tokens, num_experts, 2 * intermediate_size, hidden_size, top_k, switches.dtype),
            table.lookup(num_tokens, num_experts, hidden_size, intermediate_size, top_k, switches.dtype),
        ]
    return MoePlan(
        _gemm_plan(choices[0], switches),
        _gemm_plan(choices[1], switches),
        naive_block_assignment(num_tokens, top_k, num_experts),
    )


# (sorted_token_ids, expert_ids, num_tokens_post_padded) as `moe_gemm` takes them
SlotArgs = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]


def _slot_args(
    plan: MoePlan, topk_ids: torch.Tensor, num_experts: int, respecialize: bool
) -> tuple[SlotArgs, SlotArgs]:
    """The slot arguments of GEMM1 and GEMM2: one alignment per distinct block_m, or none at all."""
    if plan.naive_slots:
        # No alignment launch: both GEMMs give each (token, k) slot an M block of its own and read its
        # expert from the flattened ids.
        naive: SlotArgs = (None, topk_ids.reshape(-1), None)
        return naive, naive
    aligned: dict[int, SlotArgs] = {}
    for gp in (plan.gemm1, plan.gemm2):
        if gp.tile.block_m not in aligned:
            aligned[gp.tile.block_m] = moe_align_block_size(topk_ids, gp.tile.block_m, num_experts, respecialize)
    return aligned[plan.gemm1.tile.block_m], aligned[plan.gemm2.tile.block_m]


def _check_inputs(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    switches: KernelSwitches,
    scales: Fp8Scales | None,
) -> None:
    if hidden_states.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError("hidden_states [T, H], w13 [E, 2I, H], w2 [E, H, I] expected")
    num_experts, two_i, hidden = w13.shape
    if w2.shape != (num_experts, hidden, two_i // 2) or hidden_states.shape[1] != hidden:
        raise ValueError(f"shape mismatch: x {tuple(hidden_states.shape)} w13 {tuple(w13.shape)} w2 {tuple(w2.shape)}")
    if switches.dtype == "fp8":
        if w13.dtype != torch.float8_e4m3fn or w2.dtype != torch.float8_e4m3fn:
            raise UnsupportedKernelConfig("dtype='fp8' needs float8_e4m3fn weights")
        if scales is None:
            raise UnsupportedKernelConfig("dtype='fp8' needs static Fp8Scales (per-tensor w8a8)")
        if hidden_states.is_cuda and torch.cuda.get_device_capability(hidden_states.device) < (8, 9):
            raise UnsupportedKernelConfig("FP8 e4m3 dot needs compute capability >= 8.9")
    else:
        if w13.dtype != torch.bfloat16 or w2.dtype != torch.bfloat16:
            raise UnsupportedKernelConfig(f"dtype='bf16' needs bfloat16 weights, got {w13.dtype}/{w2.dtype}")
        if scales is not None:
            raise UnsupportedKernelConfig("Fp8Scales given with dtype='bf16'")
    if hidden_states.dtype != torch.bfloat16:
        raise UnsupportedKernelConfig(f"hidden_states must be bfloat16, got {hidden_states.dtype}")


def fused_experts(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    switches: KernelSwitches = DEFAULT_SWITCHES,
    scales: Fp8Scales | None = None,
    tile_table: TileTable | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> torch.Tensor:
    """Expert computation given a routing: sum_k w_k * W2[e_k] (silu(W1[e_k] x) * W3[e_k] x)."""
    return _fused_experts(hidden_states, None, w13, w2, topk_weights, topk_ids, switches, scales, tile_table, tiles)


def _fused_experts(
    hidden_states: torch.Tensor,
    a1_quantized: torch.Tensor | None,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    switches: KernelSwitches,
    scales: Fp8Scales | None,
    tile_table: TileTable | None,
    tiles: tuple[TileConfig, TileConfig] | None,
) -> torch.Tensor:
    _check_inputs(hidden_states, w13, w2, switches, scales)
    num_tokens, hidden = hidden_states.shape
    num_experts, two_i, _ = w13.shape
    top_k = topk_ids.shape[1]
    out = torch.empty((num_tokens, hidden), dtype=hidden_states.dtype, device=hidden_states.device)
    if num_tokens == 0:
        return out
    plan = plan_fused_moe(num_tokens, num_experts, hidden, two_i // 2, top_k, switches, tile_table, tiles)
    fp8 = switches.dtype == "fp8"
    if a1_quantized is not None:
        a1 = a1_quantized
    elif fp8 and scales is not None:
        a1 = static_fp8_quant(hidden_states, scales.a1_scale)
    else:
        a1 = hidden_states

    slots1, slots2 = _slot_args(plan, topk_ids, num_experts, switches.respecialize)
    num_slots = num_tokens * top_k
    cache1 = torch.empty((num_slots, two_i), dtype=torch.bfloat16, device=hidden_states.device)
    moe_gemm(
        a1, w13, cache1, None, *slots1, top_k, top_k, plan.gemm1.tile,
        plan.gemm1.swap_ab_applied, switches.respecialize,
        scales.a1_scale if fp8 and scales is not None else None,
        scales.w13_scale if fp8 and scales is not None else None,
        naive=plan.naive_slots,
    )  # fmt: skip
    # SiLU-and-mul stays a separate launch: folding it into GEMM2's A load was measured slower on the
    # H200 (each N block re-reads bf16 [gate | up], 4x the bytes of the fp8 activation, from L2).
    cache2 = silu_and_mul(cache1, scales.a2_scale if fp8 and scales is not None else None)
    cache3 = torch.empty((num_slots, hidden), dtype=torch.bfloat16, device=hidden_states.device)
    moe_gemm(
        cache2, w2, cache3, topk_weights, *slots2, top_k, 1, plan.gemm2.tile,
        plan.gemm2.swap_ab_applied, switches.respecialize,
        scales.a2_scale if fp8 and scales is not None else None,
        scales.w2_scale if fp8 and scales is not None else None,
        naive=plan.naive_slots,
    )  # fmt: skip
    return topk_sum(cache3, top_k, out)


def fused_experts_torch(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    switches: KernelSwitches = DEFAULT_SWITCHES,
    scales: Fp8Scales | None = None,
    tile_table: TileTable | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> torch.Tensor:
    """Plain-torch twin of `fused_experts`: a loop over experts in float32, with the same bf16/fp8
    rounding points as the kernels (cache1 in bf16, cache2 quantised for fp8, cache3 in bf16)."""
    del tile_table, tiles
    _check_inputs(hidden_states, w13, w2, switches, scales)
    num_tokens, hidden = hidden_states.shape
    num_experts, two_i, _ = w13.shape
    inter = two_i // 2
    top_k = topk_ids.shape[1]
    fp8 = switches.dtype == "fp8" and scales is not None
    if fp8:
        assert scales is not None
        x = static_fp8_quant_torch(hidden_states, scales.a1_scale).float() * scales.a1_scale.float()
    else:
        x = hidden_states.float()
    cache3 = torch.zeros((num_tokens * top_k, hidden), dtype=torch.float32, device=hidden_states.device)
    flat_ids = topk_ids.reshape(-1).long()
    flat_w = topk_weights.reshape(-1).float()
    for expert in range(num_experts):
        slots = torch.nonzero(flat_ids == expert).flatten()
        if slots.numel() == 0:
            continue
        w1e = w13[expert].float() * (scales.w13_scale[expert].float() if fp8 else 1.0)  # type: ignore[union-attr]
        w2e = w2[expert].float() * (scales.w2_scale[expert].float() if fp8 else 1.0)  # type: ignore[union-attr]
        h = (x[slots // top_k] @ w1e.t()).to(torch.bfloat16)
        if fp8:
            act = silu_and_mul_torch(h, scales.a2_scale).float() * scales.a2_scale.float()  # type: ignore[union-attr]
        else:
            act = silu_and_mul_torch(h).float()
        y = (act @ w2e.t()) * flat_w[slots][:, None]
        cache3[slots] = y.to(torch.bfloat16).float()
    del inter
    return cache3.view(num_tokens, top_k, hidden).sum(dim=1).to(hidden_states.dtype)


def fused_moe(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool = True,
    *,
    switches: KernelSwitches = DEFAULT_SWITCHES,
    scales: Fp8Scales | None = None,
    tile_table: TileTable | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> torch.Tensor:
    """Whole MoE layer forward (Triton): hidden_states [T, H] bf16 -> [T, H] bf16.

    Launches: routing (with the FP8 input quantisation folded in), alignment (none at very sparse batches,
    see `naive_block_assignment`; two launches past 1024 slots), GEMM1, SiLU-and-mul, GEMM2 and the top-k
    sum; a decode step is short enough for each launch to count.
    """
    if switches.dtype == "fp8" and scales is not None:
        _check_inputs(hidden_states, w13, w2, switches, scales)
        topk_weights, topk_ids, a1 = topk_softmax_quant(
            router_logits, top_k, renormalize, hidden_states, scales.a1_scale
        )
        return _fused_experts(hidden_states, a1, w13, w2, topk_weights, topk_ids, switches, scales, tile_table, tiles)
    topk_weights, topk_ids = topk_softmax(router_logits, top_k, renormalize)
    return fused_experts(
        hidden_states, w13, w2, topk_weights, topk_ids,
        switches=switches, scales=scales, tile_table=tile_table, tiles=tiles,
    )  # fmt: skip


def fused_moe_torch(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool = True,
    *,
    switches: KernelSwitches = DEFAULT_SWITCHES,
    scales: Fp8Scales | None = None,
    tile_table: TileTable | None = None,
    tiles: tuple[TileConfig, TileConfig] | None = None,
) -> torch.Tensor:
    """Plain-torch twin of `fused_moe` (the naive baseline of the benchmark)."""
    topk_weights, topk_ids = topk_softmax_torch(router_logits, top_k, renormalize)
    return fused_experts_torch(
        hidden_states, w13, w2, topk_weights, topk_ids,
        switches=switches, scales=scales, tile_table=tile_table, tiles=tiles,
    )  # fmt: skip
