"""Routing and alignment kernels against their torch twins (interpreter on CPU, real on GPU)."""

import pytest
import torch

from moe_opt.kernels import (
    max_padded_slots,
    moe_align_block_size,
    moe_align_block_size_torch,
    topk_softmax,
    topk_softmax_torch,
)
from moe_opt.kernels.align import ONE_LAUNCH_MAX_SLOTS, moe_align_chunked, moe_align_one_launch
from moe_opt.kernels.testing import device


@pytest.mark.parametrize("num_tokens", [0, 1, 7])
@pytest.mark.parametrize("num_experts,top_k", [(8, 1), (8, 2), (12, 8)])
@pytest.mark.parametrize("renormalize", [True, False])
def test_topk_softmax_matches_twin(num_tokens, num_experts, top_k, renormalize):
    logits = torch.randn(num_tokens, num_experts, device=device())
    w, ids = topk_softmax(logits, top_k, renormalize)
    w_ref, ids_ref = topk_softmax_torch(logits, top_k, renormalize)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert torch.equal(ids, ids_ref)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)
    if renormalize and num_tokens:
        torch.testing.assert_close(w.sum(-1), torch.ones(num_tokens, device=device()))


def test_topk_softmax_rejects_bad_top_k():
    with pytest.raises(ValueError):
        topk_softmax(torch.randn(2, 4, device=device()), 5)


# Both paths at every size, though each serves only one side of ONE_LAUNCH_MAX_SLOTS: one slot over a
# 1024-slot chunk, several chunks with a ragged last one, and an expert count that is not a power of two.
@pytest.mark.parametrize(
    "num_tokens,top_k,num_experts",
    [(0, 2, 8), (1, 1, 8), (1, 8, 12), (7, 2, 8), (33, 8, 12), (1025, 1, 8), (301, 8, 12), (129, 8, 160)],
)
@pytest.mark.parametrize("block_m", [16, 32])
@pytest.mark.parametrize("respecialize", [True, False])
@pytest.mark.parametrize("align", [moe_align_one_launch, moe_align_chunked])
def test_align_matches_twin(num_tokens, top_k, num_experts, block_m, respecialize, align):
    check_align(align, num_tokens, top_k, num_experts, block_m, respecialize)


# The dispatcher on both sides of its limit (one slot past it is a ragged fifth chunk).
@pytest.mark.parametrize("num_tokens", [ONE_LAUNCH_MAX_SLOTS, ONE_LAUNCH_MAX_SLOTS + 1])
def test_align_dispatch_matches_twin(num_tokens):
    check_align(moe_align_block_size, num_tokens, 1, 8, 16, False)


def check_align(align, num_tokens, top_k, num_experts, block_m, respecialize):
    scores = torch.rand(num_tokens, num_experts, device=device())
    topk_ids = torch.topk(scores, top_k, dim=-1).indices.to(torch.int32)
    got = align(topk_ids, block_m, num_experts, respecialize)
    ref = moe_align_block_size_torch(topk_ids, block_m, num_experts, respecialize)
    for g, r in zip(got, ref, strict=True):
        assert torch.equal(g, r)
    sorted_ids, expert_ids, num_post_pad = got
    numel = topk_ids.numel()
    padded = int(num_post_pad.item())
    assert padded % block_m == 0 and padded <= sorted_ids.numel() == max_padded_slots(numel, num_experts, block_m)
    # Every slot appears exactly once; padding is the sentinel; each block holds one expert's slots.
    valid = sorted_ids[:padded][sorted_ids[:padded] < numel]
    assert torch.equal(torch.sort(valid.long()).values, torch.arange(numel, device=device()))
    assert bool((sorted_ids[padded:] == numel).all())
    flat = topk_ids.reshape(-1).long()
    for blk in range(padded // block_m):
        members = sorted_ids[blk * block_m : (blk + 1) * block_m].long()
        members = members[members < numel]
        assert bool((flat[members] == int(expert_ids[blk])).all())


@pytest.mark.parametrize("num_tokens,hidden", [(0, 64), (1, 40), (5, 1100)])
def test_topk_softmax_quant_matches_twin(num_tokens, hidden):
    from kernel_interp import skip_fp8_on_interpreter

    from moe_opt.kernels import topk_softmax_quant, topk_softmax_quant_torch

    skip_fp8_on_interpreter(True)
    logits = torch.randn(num_tokens, 8, device=device())
    x = torch.randn(num_tokens, hidden, device=device()).to(torch.bfloat16)
    scale = torch.tensor([0.02], device=device())
    w, ids, xq = topk_softmax_quant(logits, 2, True, x, scale)
    w_ref, ids_ref, xq_ref = topk_softmax_quant_torch(logits, 2, True, x, scale)
    assert torch.equal(ids, ids_ref) and xq.dtype == torch.float8_e4m3fn
    torch.testing.assert_close(w, w_ref)
    torch.testing.assert_close(xq.float(), xq_ref.float(), rtol=0.13, atol=0.0)
