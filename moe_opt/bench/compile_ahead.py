"""Compile many GEMM tiles concurrently before timing them (Triton's AsyncCompileMode + threads).

Sequential compilation of a few hundred tile variants would eat most of a short GPU lease; the
compiler's native passes and ptxas run fine side by side.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import torch
from triton.runtime._async_compile import AsyncCompileMode

from moe_opt.bench.layers import Layer
from moe_opt.kernels import KernelSwitches, TileConfig, moe_align_block_size, moe_gemm
from moe_opt.kernels.fused_moe import SlotArgs


def precompile_gemms(
    layer: Layer, top_k: int, switches: KernelSwitches, variants: set[tuple[int, TileConfig, bool, bool]]
) -> None:
    """variants: (gemm index 1|2, tile, swap applied, naive slots). Same argument kinds as the real calls,
    so the real calls hit the in-process cache (respecialize=False: the batch size plays no part)."""
    if not variants:
        return
    dev = layer.x.device
    num_experts, two_i, hidden = layer.w13.shape
    topk_ids = torch.arange(top_k, device=dev, dtype=torch.int32).view(1, top_k) % num_experts
    topk_w = torch.full((1, top_k), 1.0 / top_k, device=dev)
    fp8 = switches.dtype == "fp8"
    sc = layer.scales
    a1 = layer.x[:1].to(torch.float8_e4m3fn) if fp8 else layer.x[:1]
    a2 = torch.zeros((top_k, two_i // 2), device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
    c1 = torch.empty((top_k, two_i), device=dev, dtype=torch.bfloat16)
    c2 = torch.empty((top_k, hidden), device=dev, dtype=torch.bfloat16)
    # block_m -> aligned slot arguments; None -> what `fused_experts` passes when the plan skips alignment
    slot_args: dict[int | None, SlotArgs] = {None: (None, topk_ids.reshape(-1), None)}
    for _, t, _, naive in variants:
        if not naive and t.block_m not in slot_args:
            slot_args[t.block_m] = moe_align_block_size(topk_ids, t.block_m, num_experts, False)
    workers = min(32, os.cpu_count() or 4)
    with AsyncCompileMode(ThreadPoolExecutor(workers), ignore_errors=True):  # bad tiles fail later, loudly
        for gemm, tile, swap, naive in sorted(variants, key=str):
            slots = slot_args[None if naive else tile.block_m]
            if gemm == 1:
                moe_gemm(
                    a1,
                    layer.w13,
                    c1,
                    None,
                    *slots,
                    top_k,
                    top_k,
                    tile,
                    swap,
                    switches.respecialize,
                    sc.a1_scale if fp8 and sc else None,
                    sc.w13_scale if fp8 and sc else None,
                    warmup=True,
                    naive=naive,
                )
            else:
                moe_gemm(
                    a2,
                    layer.w2,
                    c2,
                    topk_w,
                    *slots,
                    top_k,
                    1,
                    tile,
                    swap,
                    switches.respecialize,
                    sc.a2_scale if fp8 and sc else None,
                    sc.w2_scale if fp8 and sc else None,
                    warmup=True,
                    naive=naive,
                )
