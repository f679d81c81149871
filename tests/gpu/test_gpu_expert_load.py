"""The routing count inside CUDA graphs on a GPU, inline and overlapped on a side stream.

Only a GPU has streams and graph capture: the CPU suite (tests/unit/test_plugin_expert_load.py) checks what is
counted and when the overlap mode forks and joins; here the overlapped count must capture as a parallel branch
(joined before the capture ends, or capture fails) and keep counting exactly on every replay, padding excluded.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

# moe_opt's kernels import Triton: imported inside the test, so that collecting this folder imports no Triton.
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("overlap", [False, True], ids=["inline", "overlap"])
@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_graph_replays_count_every_routed_token_and_no_padding(overlap: bool, tokens: int) -> None:
    from moe_opt.bench.expert_load_cost import check_replays_count
    from moe_opt.bench.layers import make_layers
    from moe_opt.bench.shapes import MoeShape

    shape = MoeShape("small", num_experts=16, top_k=4, hidden_size=256, intermediate_size=128)
    layers = make_layers(shape, "bf16", 64)
    check = check_replays_count(layers, shape, tokens, 64, overlap=overlap)
    assert check["counted"] == check["expected"] == 5 * tokens * shape.top_k
    assert check["counted_with_one_padding_row"] == check["expected_with_one_padding_row"]
    assert check["ok"]
