"""The grouped expert GEMM at the heart of the fused MoE forward (used for both up and down projections).

Each program owns one M block of the expert-sorted slots (all of one expert) and one N block of that
expert's weight, and streams K. Three switches change the code:
  SWAP_AB: accumulate C^T = W_tile^T-major x A_tile^T so the weight rows (BLOCK_N >= 64) sit in wgmma's
      64-row slot when the token tile (BLOCK_M) is smaller; the accumulator is transposed back.
  respecialize=False: the arguments that follow the batch size (EM, num_valid_tokens) are
      `do_not_specialize`, so Triton's ==1 / %16 integer specialisation cannot compile new variants.
  NAIVE (vLLM's "naive block assignment"): no alignment at all; M block pid_m holds the single (token, k)
      slot pid_m in its row 0 (its other rows are masked) and takes its expert straight from the flattened
      top-k ids, passed as `expert_ids`. `plan_fused_moe` picks it at very sparse decode batches: there
      almost every expert gets at most one slot, aligned M blocks would hold one row each anyway, and
      the alignment launch is pure cost.

Why NAIVE is a constexpr although it follows the batch (the plan sets it from num_tokens * top_k vs E,
see `plan_fused_moe`): the two paths differ in code (no padded-count read and early exit, no sorted-id
gather), and a bool has two values, so it costs exactly one more variant per GEMM shape and tile, compiled
the first time a sparse batch comes, never one per batch size. That is what respecialize=False promises:
`do_not_specialize` still covers the naive path's batch-varying integers (EM = num_valid_tokens * BLOCK_M
and num_valid_tokens), and its other arguments keep one type and alignment class whatever the batch (the
flattened top-k ids, a fresh int32 tensor from the routing, also stand in for the unread sorted ids and
padded count), so every naive batch size after the first finds its kernel in the cache.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from moe_opt.kernels.switches import TileConfig, UnsupportedKernelConfig

BATCH_VARYING_ARGS = ["EM", "num_valid_tokens"]
# Triton 3.6's CPU interpreter computes bf16 tl.dot wrongly (numpy has no bf16); upcasting there only
# keeps the CPU tests meaningful and leaves the GPU code unchanged.
_INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _moe_gemm_body(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_tokens,
    stride_am,
    stride_be,
    stride_bn,
    stride_cm,
    A_ROW_DIV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    USE_FP8: tl.constexpr,
    SWAP_AB: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    NAIVE: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    if NAIVE:
        # One (token, k) slot per M block: the grid has exactly num_valid_tokens M blocks (EM =
        # num_valid_tokens * BLOCK_M), so no block lies past the end and nothing is read to find out.
        offs_token = tl.where(tl.arange(0, BLOCK_M) == 0, pid_m, num_valid_tokens).to(tl.int64)
        token_mask = offs_token < num_valid_tokens
        expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    else:
        num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
        if pid_m * BLOCK_M >= num_tokens_post_padded:
            return

        offs_slot = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_token = tl.load(sorted_token_ids_ptr + offs_slot).to(tl.int64)
        token_mask = offs_token < num_valid_tokens
        expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)

    # Wrapping the N offsets keeps weight loads unmasked; the store masks the wrapped columns.
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_bn = (offs_n % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_token[:, None] // A_ROW_DIV) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_bn[None, :] * stride_bn + offs_k[:, None]

    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=token_mask[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST_DOT:  # CPU interpreter only: its bf16 dot returns garbage (Triton 3.6)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if SWAP_AB:
            acc_t = tl.dot(tl.trans(b), tl.trans(a), acc_t)
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if SWAP_AB:
        acc = tl.trans(acc_t)

    if USE_FP8:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr + expert))
    if MUL_ROUTED_WEIGHT:
        routed_w = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0.0)
        acc = acc * routed_w[:, None]
    c_ptrs = c_ptr + offs_token[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=token_mask[:, None] & (offs_n[None, :] < N))


_moe_gemm_spec = triton.jit(_moe_gemm_body)
_moe_gemm_nospec = triton.jit(do_not_specialize=BATCH_VARYING_ARGS)(_moe_gemm_body)


def _check_gemm_args(a: torch.Tensor, w: torch.Tensor, c: torch.Tensor, use_fp8: bool) -> None:
    if a.stride(-1) != 1 or w.stride(-1) != 1 or c.stride(-1) != 1:
        raise ValueError("moe_gemm needs the K dimension of a and w, and N of c, contiguous")
    if w.shape[2] != a.shape[1]:
        raise ValueError(f"K mismatch: a {tuple(a.shape)} vs w {tuple(w.shape)}")
    if use_fp8 != (w.dtype == torch.float8_e4m3fn):
        raise UnsupportedKernelConfig(f"use_fp8={use_fp8} with weights of dtype {w.dtype}")


def _check_slot_args(
    c: torch.Tensor,
    sorted_token_ids: torch.Tensor | None,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor | None,
    naive: bool,
) -> None:
    if naive:
        if expert_ids.numel() != c.shape[0]:
            raise ValueError(
                f"naive=True takes the flattened top-k ids as expert_ids: {expert_ids.numel()} ids for "
                f"{c.shape[0]} slots"
            )
    elif sorted_token_ids is None or num_tokens_post_padded is None:
        raise ValueError("sorted_token_ids and num_tokens_post_padded are needed unless naive=True")


def moe_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    c: torch.Tensor,
    topk_weights: torch.Tensor | None,
    sorted_token_ids: torch.Tensor | None,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor | None,
    top_k: int,
    a_row_div: int,
    tile: TileConfig,
    swap_ab: bool,
    respecialize: bool,
    a_scale: torch.Tensor | None = None,
    w_scale: torch.Tensor | None = None,
    warmup: bool = False,
    naive: bool = False,
) -> torch.Tensor:
    """c[slot, :] = (a[slot // a_row_div] @ w[expert].T) * scales * routed weight (when given).

    a [rows, K], w [E, N, K], c [T * top_k, N]. Slots come from `moe_align_block_size` with
    block_m == tile.block_m. `swap_ab` must already be decided (see `plan_fused_moe`): asking for it
    with a tile where it does not apply raises. `warmup=True` only compiles (no launch), which lets a
    benchmark compile many tiles concurrently under Triton's AsyncCompileMode.

    `naive=True` (vLLM's naive block assignment, chosen by `plan_fused_moe`): no alignment; expert_ids
    is the flattened top-k ids [T * top_k] (the expert of each slot), each slot gets an M block of its
    own, and sorted_token_ids / num_tokens_post_padded are not used (None is fine).
    """
    use_fp8 = a_scale is not None
    _check_gemm_args(a, w, c, use_fp8)
    _check_slot_args(c, sorted_token_ids, expert_ids, num_tokens_post_padded, naive)
    if swap_ab and not tile.swap_ab_applicable():
        raise UnsupportedKernelConfig(f"Swap-AB needs block_m < 64 and block_n >= 64, got {tile}")
    num_valid_tokens = c.shape[0]
    if naive:
        em = num_valid_tokens * tile.block_m  # one M block per slot
        # Never read under NAIVE; the ids stand in so that these arguments keep one type.
        sorted_token_ids = num_tokens_post_padded = expert_ids
    else:
        assert sorted_token_ids is not None and num_tokens_post_padded is not None
        em = sorted_token_ids.shape[0]
    n, k = w.shape[1], w.shape[2]
    if num_valid_tokens == 0:
        return c
    grid = (triton.cdiv(em, tile.block_m) * triton.cdiv(n, tile.block_n),)
    kernel = _moe_gemm_spec if respecialize else _moe_gemm_nospec
    dummy = num_tokens_post_padded  # never read when the matching constexpr is off
    launch = (lambda *args, **kw: kernel.warmup(*args, grid=grid, **kw)) if warmup else kernel[grid]
    launch(
        a,
        w,
        c,
        a_scale if a_scale is not None else dummy,
        w_scale if w_scale is not None else dummy,
        topk_weights if topk_weights is not None else dummy,
        sorted_token_ids,
        expert_ids,
        num_tokens_post_padded,
        n,
        k,
        em,
        num_valid_tokens,
        a.stride(0),
        w.stride(0),
        w.stride(1),
        c.stride(0),
        A_ROW_DIV=a_row_div,
        BLOCK_M=tile.block_m,
        BLOCK_N=tile.block_n,
        BLOCK_K=tile.block_k,
        GROUP_M=tile.group_m,
        MUL_ROUTED_WEIGHT=topk_weights is not None,
        USE_FP8=use_fp8,
        SWAP_AB=swap_ab,
        EVEN_K=k % tile.block_k == 0,
        UPCAST_DOT=_INTERPRETER and not use_fp8,
        NAIVE=naive,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
    )
    return c


def moe_gemm_torch(
    a: torch.Tensor,
    w: torch.Tensor,
    c: torch.Tensor,
    topk_weights: torch.Tensor | None,
    sorted_token_ids: torch.Tensor | None,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor | None,
    top_k: int,
    a_row_div: int,
    tile: TileConfig,
    swap_ab: bool,
    respecialize: bool,
    a_scale: torch.Tensor | None = None,
    w_scale: torch.Tensor | None = None,
    warmup: bool = False,
    naive: bool = False,
) -> torch.Tensor:
    """Plain-torch twin of `moe_gemm` (float32 math; swap_ab/respecialize have no effect here).

    naive=True: every slot arange(T * top_k) with its expert from the flattened top-k ids in expert_ids.
    """
    del top_k, swap_ab, respecialize
    if warmup:
        return c
    use_fp8 = a_scale is not None
    _check_gemm_args(a, w, c, use_fp8)
    _check_slot_args(c, sorted_token_ids, expert_ids, num_tokens_post_padded, naive)
    num_valid = c.shape[0]
    if naive:
        slots = torch.arange(num_valid, device=c.device)
        slot_experts = expert_ids.reshape(-1).long()
    else:
        assert sorted_token_ids is not None and num_tokens_post_padded is not None
        padded = int(num_tokens_post_padded.item())
        slots = sorted_token_ids[:padded].long()
        block_experts = expert_ids[: padded // tile.block_m].long().repeat_interleave(tile.block_m)
        valid = slots < num_valid
        slots, slot_experts = slots[valid], block_experts[valid]
    for expert in torch.unique(slot_experts).tolist():
        rows = slots[slot_experts == expert]
        x = a[rows // a_row_div].float()
        wt = w[expert].float()
        y = x @ wt.t()
        if use_fp8:
            assert a_scale is not None and w_scale is not None
            y = y * (a_scale.float() * w_scale[expert].float())
        if topk_weights is not None:
            y = y * topk_weights.reshape(-1)[rows].float()[:, None]
        c[rows] = y.to(c.dtype)
    return c
