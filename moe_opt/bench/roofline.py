"""The two ceilings, measured on the GPU in the same run as the kernels they judge."""

from __future__ import annotations

import torch
import triton


def copy_bandwidth_gbs(size_bytes: int = 2 << 30) -> float:
    """Device-to-device copy of a buffer far larger than L2, counting bytes read plus written."""
    src = torch.randint(0, 255, (size_bytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * size_bytes / (ms * 1e-3) / 1e9


def matmul_tflops(dtype: str = "bf16", n: int = 8192) -> float:
    """n^3 GEMM on random data through torch (cuBLAS); fp8 through torch._scaled_mm."""
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    if dtype == "bf16":
        a16, b16 = a.bfloat16(), b.bfloat16()

        def fn() -> torch.Tensor:
            return a16 @ b16
    else:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major second operand
        one = torch.ones((), device="cuda")

        def fn() -> torch.Tensor:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
    return 2 * n**3 / (ms * 1e-3) / 1e12
