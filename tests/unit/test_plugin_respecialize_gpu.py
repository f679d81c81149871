"""On a real GPU: the plugin's do_not_specialize patch really removes JIT re-specialisation.

Runs the real patch function on a Triton kernel shaped like vLLM's fused_moe_kernel (an integer
argument that changes with the batch), counting compilations with moe_opt.kernels' CompileCounter.
Needs CUDA (skipped otherwise; the CPU build of vLLM has no Triton JIT), not vLLM.
"""

from __future__ import annotations

import types

import pytest
import torch
import triton
import triton.language as tl

from moe_opt.kernels.compile_counter import CompileCounter
from moe_opt.plugin.patches import patch_no_respecialize

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SIZES = [1, 2, 3, 16, 17, 32, 33, 48, 100]  # ==1, %16 and neither: three specialisations


def _kernel_src(x_ptr, EM, num_valid_tokens, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs * 0 + EM + num_valid_tokens, mask=offs < num_valid_tokens)


def _drive(kernel, sizes: list[int]) -> None:
    for n in sizes:
        x = torch.empty(n, device="cuda", dtype=torch.int32)
        kernel[(triton.cdiv(n, 64),)](x, n, n, BLOCK=64)
        assert int(x[0]) == 2 * n
    torch.cuda.synchronize()


def test_specialised_kernel_compiles_per_size_class(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = triton.jit(_kernel_src)
    with CompileCounter() as cc:
        _drive(kernel, SIZES)
    assert cc.compiles(include_cache_hits=True) == 3


def test_patched_kernel_compiles_once_then_never(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = triton.jit(_kernel_src)
    module = types.ModuleType("fake_vllm_fused_moe")
    module.fused_moe_kernel = kernel  # type: ignore[attr-defined]
    patch_no_respecialize(
        "fake_vllm_fused_moe:fused_moe_kernel", ["EM", "num_valid_tokens"], "test", import_module=lambda _: module
    )
    with CompileCounter() as cc:
        _drive(kernel, SIZES[:1])  # warm-up
        warm = cc.mark()
        _drive(kernel, SIZES)
    assert warm == 1
    assert cc.compiles(warm, include_cache_hits=True) == 0
