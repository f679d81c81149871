"""Top-k softmax routing: router logits -> (weights, expert ids) per token.

One program per token row, so no batch-dependent integer reaches the kernel: a new batch size can
never trigger a recompilation here, whatever the specialisation switch says.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from moe_opt.kernels.activation import FP8_DTYPE, static_fp8_quant_torch


@triton.jit
def _topk_softmax_kernel(
    logits_ptr,
    weights_ptr,
    ids_ptr,
    num_experts,
    stride_row,
    TOP_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_TOPK: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    x_ptr,
    xq_ptr,
    x_scale_ptr,
    hidden,
    QUANT_X: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    if QUANT_X:
        # The FP8 path's static quantisation of this token's hidden state rides along: same row grid,
        # one launch fewer per forward.
        inv_scale = 1.0 / tl.load(x_scale_ptr)
        for h0 in range(0, hidden, BLOCK_H):
            offs_h = h0 + tl.arange(0, BLOCK_H)
            xv = tl.load(x_ptr + row * hidden + offs_h, mask=offs_h < hidden, other=0.0).to(tl.float32)
            xq = tl.clamp(xv * inv_scale, -448.0, 448.0)
            tl.store(xq_ptr + row * hidden + offs_h, xq.to(xq_ptr.dtype.element_ty), mask=offs_h < hidden)
    offs_e = tl.arange(0, BLOCK_E)
    mask_e = offs_e < num_experts
    x = tl.load(logits_ptr + row * stride_row + offs_e, mask=mask_e, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, 0)
    p = tl.exp(x)
    p = tl.where(mask_e, p, 0.0)
    p = p / tl.sum(p, 0)
    # Masked-out experts get -1 so they can never be picked, even against a probability of 0.
    remaining = tl.where(mask_e, p, -1.0)
    offs_k = tl.arange(0, BLOCK_TOPK)
    sel_w = tl.zeros([BLOCK_TOPK], dtype=tl.float32)
    sel_i = tl.zeros([BLOCK_TOPK], dtype=tl.int32)
    for k in tl.static_range(TOP_K):
        best = tl.max(remaining, 0)
        # Lowest index among ties, like a stable sort.
        idx = tl.min(tl.where(remaining == best, offs_e, BLOCK_E), 0)
        sel_w = tl.where(offs_k == k, best, sel_w)
        sel_i = tl.where(offs_k == k, idx, sel_i)
        remaining = tl.where(offs_e == idx, -2.0, remaining)
    if RENORMALIZE:
        sel_w = sel_w / tl.sum(tl.where(offs_k < TOP_K, sel_w, 0.0), 0)
    mask_k = offs_k < TOP_K
    tl.store(weights_ptr + row * TOP_K + offs_k, sel_w, mask=mask_k)
    tl.store(ids_ptr + row * TOP_K + offs_k, sel_i, mask=mask_k)


def _check_routing_args(router_logits: torch.Tensor, top_k: int) -> None:
    if router_logits.dim() == 2 and router_logits.stride(-1) != 1:
        raise ValueError("router_logits must be contiguous in the expert dimension")
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [num_tokens, num_experts], got {tuple(router_logits.shape)}")
    if not 1 <= top_k <= router_logits.shape[1]:
        raise ValueError(f"top_k={top_k} must be in [1, num_experts={router_logits.shape[1]}]")


def topk_softmax(
    router_logits: torch.Tensor, top_k: int, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over experts, then the top_k largest; returns (weights float32, ids int32), [T, top_k]."""
    weights, ids, _ = _route(router_logits, top_k, renormalize, None, None)
    return weights, ids


def topk_softmax_quant(
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool,
    hidden_states: torch.Tensor,
    a1_scale: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`topk_softmax` plus the static e4m3 quantisation of hidden_states [T, H] in the same launch."""
    weights, ids, xq = _route(router_logits, top_k, renormalize, hidden_states, a1_scale)
    assert xq is not None
    return weights, ids, xq


def topk_softmax_quant_torch(
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool,
    hidden_states: torch.Tensor,
    a1_scale: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain-torch twin of `topk_softmax_quant`."""
    weights, ids = topk_softmax_torch(router_logits, top_k, renormalize)
    return weights, ids, static_fp8_quant_torch(hidden_states, a1_scale)


def _route(
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool,
    hidden_states: torch.Tensor | None,
    a1_scale: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    _check_routing_args(router_logits, top_k)
    num_tokens, num_experts = router_logits.shape
    weights = torch.empty((num_tokens, top_k), dtype=torch.float32, device=router_logits.device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int32, device=router_logits.device)
    quant = hidden_states is not None and a1_scale is not None
    xq = None
    if quant:
        assert hidden_states is not None
        if hidden_states.shape[0] != num_tokens or hidden_states.stride(-1) != 1:
            raise ValueError("hidden_states must be contiguous [num_tokens, H]")
        xq = torch.empty(hidden_states.shape, dtype=FP8_DTYPE, device=hidden_states.device)
    if num_tokens == 0:
        return weights, ids, xq
    hidden = hidden_states.shape[1] if quant and hidden_states is not None else 0
    _topk_softmax_kernel[(num_tokens,)](
        router_logits,
        weights,
        ids,
        num_experts,
        router_logits.stride(0),
        TOP_K=top_k,
        BLOCK_E=triton.next_power_of_2(num_experts),
        BLOCK_TOPK=triton.next_power_of_2(top_k),
        RENORMALIZE=renormalize,
        x_ptr=hidden_states if quant else weights,
        xq_ptr=xq if quant else weights,
        x_scale_ptr=a1_scale if quant else weights,
        hidden=hidden,
        QUANT_X=quant,
        BLOCK_H=min(1024, triton.next_power_of_2(max(hidden, 1))),
        num_warps=4 if quant else (1 if num_experts <= 64 else 2),
    )
    return weights, ids, xq


def topk_softmax_torch(
    router_logits: torch.Tensor, top_k: int, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain-torch twin of `topk_softmax`."""
    _check_routing_args(router_logits, top_k)
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1, sorted=True)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.contiguous(), ids.to(torch.int32).contiguous()
