"""The last step of the MoE forward: each token's top-k weighted expert outputs summed into one row.

`torch.sum(cache3.view(T, k, H), dim=1)` runs PyTorch's generic reduction, which reads the middle dimension
at a fraction of the copy bandwidth: on an H100 (2026-12-07) it took 80.8 us for Mixtral-8x7B's 4096 tokens
(top-2, H 4096), where vLLM's `moe_sum` took 30.3. Like the activation kernels this launches a 2-D grid
(tokens, column blocks) and takes no row count, so it compiles once per (top_k, H) whatever the batch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _topk_sum_kernel(x_ptr, out_ptr, n_cols, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        acc += tl.load(x_ptr + (token * TOP_K + k) * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * n_cols + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _check_shapes(x: torch.Tensor, top_k: int, out: torch.Tensor) -> None:
    if x.shape[0] != out.shape[0] * top_k or x.shape[1] != out.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} is not out {tuple(out.shape)} x top_k {top_k}")


def topk_sum(x: torch.Tensor, top_k: int, out: torch.Tensor) -> torch.Tensor:
    """x [T * top_k, H] (contiguous, the k rows of a token adjacent) -> out [T, H], summed in fp32."""
    _check_shapes(x, top_k, out)
    rows, cols = x.shape
    if rows == 0:
        return out
    block = min(1024, triton.next_power_of_2(cols))
    _topk_sum_kernel[(out.shape[0], triton.cdiv(cols, block))](x, out, cols, TOP_K=top_k, BLOCK=block)
    return out


def topk_sum_torch(x: torch.Tensor, top_k: int, out: torch.Tensor) -> torch.Tensor:
    """Plain-torch twin of `topk_sum`."""
    _check_shapes(x, top_k, out)
    out.copy_(x.float().view(out.shape[0], top_k, x.shape[1]).sum(dim=1).to(out.dtype))
    return out
