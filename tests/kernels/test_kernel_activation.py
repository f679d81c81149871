"""Static FP8 quantisation and SiLU-and-multiply against their torch twins."""

import pytest
import torch
from kernel_interp import skip_fp8_on_interpreter

from moe_opt.kernels import silu_and_mul, silu_and_mul_torch, static_fp8_quant, static_fp8_quant_torch
from moe_opt.kernels.testing import device


@pytest.mark.parametrize("rows,cols", [(0, 16), (1, 5), (9, 130)])
def test_static_fp8_quant_matches_twin(rows, cols):
    skip_fp8_on_interpreter(True)
    x = (torch.randn(rows, cols, device=device()) * 3).to(torch.bfloat16)
    scale = torch.tensor([0.01], device=device())
    got, ref = static_fp8_quant(x, scale), static_fp8_quant_torch(x, scale)
    assert got.dtype == torch.float8_e4m3fn
    # Rounding of exact ties may differ (interpreter vs torch cast): allow one e4m3 step on few elements.
    torch.testing.assert_close(got.float(), ref.float(), rtol=0.13, atol=0.0)
    assert (got.float() != ref.float()).sum().item() <= 0.02 * got.numel()


@pytest.mark.parametrize("rows,inter", [(0, 8), (1, 3), (7, 48)])
@pytest.mark.parametrize("quant", [False, True])
def test_silu_and_mul_matches_twin(rows, inter, quant):
    skip_fp8_on_interpreter(quant)
    x = torch.randn(rows, 2 * inter, device=device()).to(torch.bfloat16)
    scale = torch.tensor([0.005], device=device()) if quant else None
    got, ref = silu_and_mul(x, scale), silu_and_mul_torch(x, scale)
    assert got.shape == (rows, inter) and got.dtype == ref.dtype
    # One rounding step (bf16 or e4m3) may differ where exp() differs in the last bit.
    step = 0.13 if quant else 0.01
    torch.testing.assert_close(got.float(), ref.float(), rtol=step, atol=step * (scale.item() if quant else 0.01))
