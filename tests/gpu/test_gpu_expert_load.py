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


def test_the_router_bias_draws_fresh_experts_on_every_graph_replay() -> None:
    """MOEPERF_ROUTER_BIAS inside a captured graph: its Gumbel noise comes from the generator the capture registers,
    so each replay routes anew (a noise frozen at capture would send every replay's tokens to the same experts),
    and over the replays the shares are the tuner's Zipf routing."""
    from moe_opt.bench.routing_dist import sample_routing
    from moe_opt.plugin.router_bias import LayerBiases, RouterBias

    experts, top_k, tokens, replays = 64, 4, 256, 40
    router, biases = object(), LayerBiases()
    biases.bind(router, RouterBias("zipf", 1.0).logits(experts, layer=0), "cuda")
    logits = 1e-3 * torch.randn(tokens, experts, device="cuda", dtype=torch.bfloat16)
    ids = torch.empty(tokens, top_k, device="cuda", dtype=torch.int64)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # warm up off the default stream, as graph capture wants
        ids.copy_(torch.topk(biases.apply(router, logits), top_k).indices)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ids.copy_(torch.topk(biases.apply(router, logits), top_k).indices)
    counts = torch.zeros(experts, device="cuda", dtype=torch.float64)
    first = None
    for _ in range(replays):
        graph.replay()
        first = ids.clone() if first is None else first
        counts += torch.bincount(ids.flatten(), minlength=experts).double()
    assert not torch.equal(ids, first)  # the last replay routed otherwise than the first
    _, tuner_ids = sample_routing("zipf:1.0", tokens * replays, experts, top_k, seed=3, device="cpu")
    tuner = torch.bincount(tuner_ids.flatten().long(), minlength=experts).double()
    assert torch.allclose((counts / counts.sum()).cpu(), tuner / tuner.sum(), atol=0.01)
