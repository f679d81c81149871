"""Activation-side elementwise ops of the MoE forward: static FP8 quantisation and SiLU-and-multiply.

Both launch a 2-D grid (rows, column blocks) and take no row count, so no batch-dependent integer
ever reaches them and they compile once per shape whatever the specialisation switch says.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0


@triton.jit
def _static_fp8_quant_kernel(x_ptr, out_ptr, scale_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    inv_scale = 1.0 / tl.load(scale_ptr)
    y = tl.clamp(x * inv_scale, -448.0, 448.0)
    tl.store(out_ptr + row * n_cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def static_fp8_quant(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [R, C] (contiguous, any float) -> e4m3 with a per-tensor static scale (x ~ q * scale)."""
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=FP8_DTYPE, device=x.device)
    if rows == 0:
        return out
    block = min(1024, triton.next_power_of_2(cols))
    _static_fp8_quant_kernel[(rows, triton.cdiv(cols, block))](x, out, scale, cols, BLOCK=block)
    return out


def static_fp8_quant_torch(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Plain-torch twin of `static_fp8_quant`."""
    return (x.float() * (1.0 / scale.float())).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, scale_ptr, n_cols, QUANT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    gate = tl.load(x_ptr + row * 2 * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * n_cols + n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    if QUANT:
        inv_scale = 1.0 / tl.load(scale_ptr)
        y = tl.clamp(y * inv_scale, -448.0, 448.0)
    tl.store(out_ptr + row * n_cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor, quant_scale: torch.Tensor | None = None) -> torch.Tensor:
    """x [R, 2I] = [gate | up] -> silu(gate) * up, [R, I]; e4m3 with the static scale when given."""
    rows, two_i = x.shape
    n_cols = two_i // 2
    out_dtype = FP8_DTYPE if quant_scale is not None else x.dtype
    out = torch.empty((rows, n_cols), dtype=out_dtype, device=x.device)
    if rows == 0:
        return out
    block = min(1024, triton.next_power_of_2(n_cols))
    scale = quant_scale if quant_scale is not None else out  # unused pointer when QUANT is False
    _silu_and_mul_kernel[(rows, triton.cdiv(n_cols, block))](
        x, out, scale, n_cols, QUANT=quant_scale is not None, BLOCK=block
    )
    return out


def silu_and_mul_torch(x: torch.Tensor, quant_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch twin of `silu_and_mul`."""
    n_cols = x.shape[1] // 2
    gate, up = x[:, :n_cols].float(), x[:, n_cols:].float()
    y = torch.nn.functional.silu(gate) * up
    if quant_scale is not None:
        return static_fp8_quant_torch(y, quant_scale)
    return y.to(x.dtype)
