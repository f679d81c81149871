"""The whole fused MoE forward against its torch twin, over the switch grid, on small shapes.

The CPU interpreter is slow (about 0.3 s per forward), so shapes are tiny but awkward: odd hidden and
intermediate sizes (masked K and N tails), zero and one token, top-k 1/2/8.
"""

import pytest
import torch
from kernel_interp import skip_fp8_on_interpreter

from moe_opt.kernels import KernelSwitches, fused_experts, fused_experts_torch, fused_moe, fused_moe_torch
from moe_opt.kernels.testing import check_close, make_moe

CASES = [
    # (num_tokens, num_experts, top_k, hidden, inter)
    (0, 8, 2, 64, 32),
    (1, 8, 1, 64, 32),
    (1, 8, 8, 48, 40),
    (7, 8, 2, 72, 24),
    (5, 12, 8, 64, 40),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "T{}-E{}-k{}-H{}-I{}".format(*c))
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("swap_ab", [False, True])
def test_fused_moe_matches_twin(case, dtype, swap_ab):
    skip_fp8_on_interpreter(dtype == "fp8")
    num_tokens, num_experts, top_k, hidden, inter = case
    x, w13, w2, logits, scales = make_moe(num_tokens, num_experts, hidden, inter, dtype, seed=num_tokens)
    sw = KernelSwitches(swap_ab=swap_ab, respecialize=True, dtype=dtype)
    out = fused_moe(x, w13, w2, logits, top_k, switches=sw, scales=scales)
    ref = fused_moe_torch(x, w13, w2, logits, top_k, switches=sw, scales=scales)
    assert out.dtype == torch.bfloat16 and out.shape == (num_tokens, hidden)
    check_close(out, ref, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_no_respecialize_gives_same_result(dtype):
    skip_fp8_on_interpreter(dtype == "fp8")
    x, w13, w2, logits, scales = make_moe(6, 8, 64, 32, dtype, seed=3)
    topk_w, topk_ids = torch.softmax(logits, -1).topk(2, dim=-1)
    topk_ids = topk_ids.to(torch.int32)
    on = fused_experts(x, w13, w2, topk_w, topk_ids, switches=KernelSwitches(dtype=dtype), scales=scales)
    off = fused_experts(
        x, w13, w2, topk_w, topk_ids, switches=KernelSwitches(respecialize=False, dtype=dtype), scales=scales
    )
    assert torch.equal(on, off)
    check_close(on, fused_experts_torch(x, w13, w2, topk_w, topk_ids, switches=KernelSwitches(dtype=dtype),
                                        scales=scales), dtype)  # fmt: skip
