"""Every kernel against its torch twin on a real GPU: the small awkward grid and the real per-rank
shapes, both dtypes, Swap-AB on and off; plus graph capture and real compile counting."""

import pytest
import torch

if not torch.cuda.is_available():
    # Skip before importing moe_opt.kernels: on a CPU box that import must happen in interpreter mode,
    # which tests/kernels/conftest.py arranges.
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from moe_opt.bench.shapes import SHAPES
from moe_opt.kernels import (
    CompileCounter,
    KernelSwitches,
    TileConfig,
    fused_moe,
    fused_moe_torch,
    moe_align_block_size,
    moe_align_block_size_torch,
    plan_fused_moe,
    topk_softmax,
    topk_softmax_torch,
)
from moe_opt.kernels.align import moe_align_chunked, moe_align_one_launch
from moe_opt.kernels.testing import check_close, make_moe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SMALL = [(0, 8, 2, 64, 32), (1, 8, 1, 64, 32), (1, 8, 8, 48, 40), (7, 8, 2, 72, 24), (33, 12, 8, 200, 72)]


@pytest.mark.parametrize("case", SMALL, ids=lambda c: "T{}-E{}-k{}-H{}-I{}".format(*c))
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("swap_ab", [False, True])
@pytest.mark.parametrize("respecialize", [False, True])
def test_small_grid(case, dtype, swap_ab, respecialize):
    num_tokens, num_experts, top_k, hidden, inter = case
    x, w13, w2, logits, scales = make_moe(num_tokens, num_experts, hidden, inter, dtype, seed=num_tokens)
    sw = KernelSwitches(swap_ab=swap_ab, respecialize=respecialize, dtype=dtype)
    out = fused_moe(x, w13, w2, logits, top_k, switches=sw, scales=scales)
    check_close(out, fused_moe_torch(x, w13, w2, logits, top_k, switches=sw, scales=scales), dtype)


@pytest.mark.parametrize("shape", list(SHAPES), ids=str)
@pytest.mark.parametrize("num_tokens", [1, 13, 64, 600])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("swap_ab", [False, True])
def test_real_shapes(shape, num_tokens, dtype, swap_ab):
    s = SHAPES[shape]
    x, w13, w2, logits, scales = make_moe(num_tokens, s.num_experts, s.hidden_size, s.intermediate_size, dtype)
    sw = KernelSwitches(swap_ab=swap_ab, respecialize=False, dtype=dtype)
    out = fused_moe(x, w13, w2, logits, s.top_k, switches=sw, scales=scales)
    check_close(out, fused_moe_torch(x, w13, w2, logits, s.top_k, switches=sw, scales=scales), dtype)


@pytest.mark.parametrize("num_tokens,num_experts,top_k", [(1, 8, 2), (4096, 256, 8), (777, 128, 8)])
def test_routing_and_align_real_sizes(num_tokens, num_experts, top_k):
    logits = torch.randn(num_tokens, num_experts, device="cuda")
    w, ids = topk_softmax(logits, top_k)
    w_ref, ids_ref = topk_softmax_torch(logits, top_k)
    assert torch.equal(ids, ids_ref)
    torch.testing.assert_close(w, w_ref)
    for block_m in (16, 64):
        ref = moe_align_block_size_torch(ids, block_m, num_experts)
        for align in (moe_align_block_size, moe_align_one_launch, moe_align_chunked):
            got = align(ids, block_m, num_experts)
            assert all(torch.equal(g, r) for g, r in zip(got, ref, strict=True)), align.__name__


def test_align_paths_bench_times_both_paths(tmp_path):
    import json

    from moe_opt.bench import align_paths

    out = tmp_path / "align_paths.json"
    assert align_paths.main(["--slots", "1024,4096", "--block-m", "16", "--trials", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    experts = sorted({s.num_experts for s in SHAPES.values()})
    assert [(r["experts"], r["slots"]) for r in doc["rows"]] == [(e, n) for e in experts for n in (1024, 4096)]
    assert all(r["one_launch_us"] > 0 and r["chunked_us"] > 0 for r in doc["rows"])
    assert set(doc["one_launch_no_slower_up_to_slots"]) == {f"E={e} block_m=16" for e in experts}
    assert doc["environment"]["gpu"] != "none"


def test_cuda_graph_replay_matches_eager():
    x, w13, w2, logits, scales = make_moe(24, 8, 256, 128, "fp8")
    sw = KernelSwitches(swap_ab=True, respecialize=False, dtype="fp8")
    eager = fused_moe(x, w13, w2, logits, 2, switches=sw, scales=scales)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused_moe(x, w13, w2, logits, 2, switches=sw, scales=scales)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, fused_moe(x, w13, w2, logits, 2, switches=sw, scales=scales))
    assert not torch.equal(captured, eager)


@pytest.mark.parametrize("respecialize", [False, True])
def test_compile_counter_sees_respecialisation(respecialize, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    # A shape no other test uses, so the in-process kernel cache is cold for it.
    hidden, inter = 96 + 16 * int(respecialize), 48
    tile = TileConfig(16, 64, 32, 1, 4, 2)
    sw = KernelSwitches(respecialize=respecialize)
    with CompileCounter() as cc:
        for n in (1, 3, 8, 16, 17, 40):
            x, w13, w2, logits, _ = make_moe(n, 4, hidden, inter, "bf16")
            fused_moe(x, w13, w2, logits, 2, switches=sw, tiles=(tile, tile))
    gemm = sum(v for k, v in cc.per_kernel().items() if "moe_gemm" in k)
    assert all(e.cache_hit is False for e in cc.events)
    if respecialize:
        assert gemm >= 3  # ==1 / %16 / other classes of (EM, num_valid_tokens)
    else:
        assert gemm == 2  # one per GEMM shape (w13 and w2), whatever the batch


@pytest.mark.parametrize("respecialize", [False, True])
def test_compile_counter_sees_one_naive_variant(respecialize, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    # Shapes no other test uses; every batch here skips the alignment (n * top_k 1 * 4 <= 64 experts).
    hidden, inter = 160 + 16 * int(respecialize), 48
    tile = TileConfig(16, 64, 32, 1, 4, 2)
    sw = KernelSwitches(respecialize=respecialize)
    with CompileCounter() as cc:
        for n in (1, 2, 3, 7, 16):
            x, w13, w2, logits, _ = make_moe(n, 64, hidden, inter, "bf16")
            assert plan_fused_moe(n, 64, hidden, inter, 1, sw, tiles=(tile, tile)).naive_slots
            fused_moe(x, w13, w2, logits, 1, switches=sw, tiles=(tile, tile))
    per_kernel = cc.per_kernel()
    gemm = sum(v for k, v in per_kernel.items() if "moe_gemm" in k)
    assert not any("align" in k for k in per_kernel)  # the alignment kernel never even compiled
    if respecialize:
        assert gemm >= 3  # ==1 / %16 / other classes of num_valid_tokens
    else:
        assert gemm == 2  # one naive variant per GEMM shape, whatever the batch
