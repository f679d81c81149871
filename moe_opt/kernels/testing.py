"""Random MoE layers and error bounds for comparing a kernel with its torch twin.

Shared by the CPU interpreter tests, the GPU tests and the benchmark, so all three judge errors alike.
"""

from __future__ import annotations

import os

import torch

from moe_opt.kernels.switches import Fp8Scales

# Bounds relative to the reference's max |value| (max error) and RMS (RMS error). FP8 is loose because
# one e4m3 rounding flip of an intermediate (1/16 relative) is a legitimate difference between two
# correct implementations that accumulate in a different order.
BOUNDS = {"bf16": (0.04, 0.01), "fp8": (0.2, 0.06)}
# Triton 3.6's CPU interpreter truncates fp32 -> bf16 instead of rounding to nearest (measured: all
# errors toward zero), doubling each of the three bf16 rounding steps' error and biasing it.
BOUNDS_INTERPRETER = {"bf16": (0.08, 0.03), "fp8": (0.2, 0.06)}
# Read once, like triton.jit does: whether this process's kernels were built for the interpreter.
INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"


def device() -> str:
    """CUDA when present: the same builders serve the interpreter tests and the GPU runs."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def make_moe(
    num_tokens: int, num_experts: int, hidden: int, inter: int, dtype: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Fp8Scales | None]:
    """Random layer with O(1) outputs: weights scaled by 1/sqrt(fan-in); FP8 scales fit the data."""
    dev = device()
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(num_tokens, hidden, generator=g, device=dev).to(torch.bfloat16)
    logits = torch.randn(num_tokens, num_experts, generator=g, device=dev)
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=g, device=dev) / hidden**0.5
    w2 = torch.randn(num_experts, hidden, inter, generator=g, device=dev) / inter**0.5
    if dtype == "bf16":
        return x, w13.bfloat16(), w2.bfloat16(), logits, None
    w13_s = w13.abs().amax(dim=(1, 2)) / 448.0
    w2_s = w2.abs().amax(dim=(1, 2)) / 448.0
    w13_q = (w13 / w13_s[:, None, None]).to(torch.float8_e4m3fn)
    w2_q = (w2 / w2_s[:, None, None]).to(torch.float8_e4m3fn)
    scales = Fp8Scales(
        w13_s.float(),
        w2_s.float(),
        torch.tensor([4.0 / 448], device=dev),
        torch.tensor([2.0 / 448], device=dev),
    )
    return x, w13_q, w2_q, logits, scales


def check_close(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> tuple[float, float]:
    """Raise AssertionError past either bound; returns (max abs error, RMS error) for reporting."""
    if out.shape != ref.shape:
        raise AssertionError(f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    if ref.numel() == 0:
        return 0.0, 0.0
    diff = out.float() - ref.float()
    if not bool(torch.isfinite(out.float()).all()):
        raise AssertionError("non-finite values in the kernel output")
    max_err, rms_err = diff.abs().max().item(), diff.pow(2).mean().sqrt().item()
    ref_max, ref_rms = ref.float().abs().max().item(), ref.float().pow(2).mean().sqrt().item()
    bounds = BOUNDS_INTERPRETER if INTERPRETER else BOUNDS
    tol_max, tol_rms = bounds[dtype]
    if max_err > tol_max * ref_max + 1e-6:
        raise AssertionError(f"{dtype}: max abs error {max_err:.4g} > {tol_max} x max|ref| {ref_max:.4g}")
    if rms_err > tol_rms * ref_rms + 1e-6:
        raise AssertionError(f"{dtype}: RMS error {rms_err:.4g} > {tol_rms} x RMS(ref) {ref_rms:.4g}")
    return max_err, rms_err
