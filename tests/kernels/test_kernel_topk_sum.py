"""The top-k sum kernel against its torch twin (interpreter on CPU, real on GPU)."""

import pytest
import torch

from moe_opt.kernels import topk_sum, topk_sum_torch
from moe_opt.kernels.testing import device


@pytest.mark.parametrize("num_tokens", [0, 1, 7, 300])
@pytest.mark.parametrize("top_k,hidden", [(1, 64), (2, 40), (8, 1100)])
def test_topk_sum_matches_twin(num_tokens, top_k, hidden):
    x = torch.randn(num_tokens * top_k, hidden, device=device()).to(torch.bfloat16)
    got = topk_sum(x, top_k, torch.empty(num_tokens, hidden, dtype=torch.bfloat16, device=device()))
    ref = topk_sum_torch(x, top_k, torch.empty(num_tokens, hidden, dtype=torch.bfloat16, device=device()))
    # Both sum in fp32 and round once; only the order of the k additions may differ (a last-bit flip).
    torch.testing.assert_close(got.float(), ref.float(), rtol=2**-7, atol=1e-6)
    if num_tokens and top_k == 1:
        assert torch.equal(got, x)


def test_topk_sum_rejects_a_shape_that_is_not_k_rows_per_token():
    x = torch.zeros(6, 8, dtype=torch.bfloat16, device=device())
    for fn in (topk_sum, topk_sum_torch):
        with pytest.raises(ValueError, match="top_k 4"):
            fn(x, 4, torch.empty(2, 8, dtype=torch.bfloat16, device=device()))
