"""The naive slot assignment (vLLM's "naive block assignment"): no alignment at very sparse batches.

Checked here: `moe_gemm(naive=True)` against the aligned launch and both torch twins; the whole forward
with the alignment skipped against the aligned forward and `fused_experts_torch`; the plan's choice at the
boundary of vLLM's rule; and that respecialize=False keeps one naive variant per GEMM across batch sizes.
The interpreter never compiles, so that last test computes the key Triton's compiled-mode JIT cache would
file each launch under (its binder for an sm_90 target, as `JITFunction.run` does) and counts distinct keys.
"""

import importlib

import pytest
import torch
from kernel_interp import skip_fp8_on_interpreter

from moe_opt.kernels import (
    KernelSwitches,
    TileConfig,
    fused_experts,
    fused_experts_torch,
    moe_align_block_size,
    moe_gemm,
    moe_gemm_torch,
    naive_block_assignment,
    plan_fused_moe,
)
from moe_opt.kernels.testing import check_close, device, make_moe

# The modules, not the functions of the same name that moe_opt.kernels exports.
fused_moe_mod = importlib.import_module("moe_opt.kernels.fused_moe")
moe_gemm_mod = importlib.import_module("moe_opt.kernels.moe_gemm")

TILE_SMALL = TileConfig(16, 64, 32, 1, 4, 2)  # Swap-AB applicable
TILE_GROUPED = TileConfig(16, 32, 64, 4, 4, 2)  # GROUP_M > 1: the pid swizzle over num_valid_tokens M blocks

GEMM_CASES = [
    # (num_tokens, num_experts, top_k, K, N): zero and one token, odd K and N (masked tails), top-k 1/2/8
    (0, 8, 2, 64, 32),
    (1, 8, 1, 64, 64),
    (1, 8, 2, 40, 72),
    (1, 12, 8, 48, 80),
    (3, 8, 2, 72, 24),
    (5, 12, 8, 64, 40),
]


def _routing(num_tokens: int, num_experts: int, top_k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device()).manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=g, device=device())
    w, ids = torch.topk(torch.softmax(scores, -1), top_k, dim=-1)
    return w.contiguous(), ids.to(torch.int32).contiguous()


def _gemm_operands(case, gemm: int, dtype: str, seed: int):
    """(a, w, routed weights or None, a_row_div, a_scale, w_scale) of GEMM1 (rows = tokens) or GEMM2 (rows = slots)."""
    num_tokens, num_experts, top_k, k, n = case
    g = torch.Generator(device=device()).manual_seed(seed)
    rows = num_tokens if gemm == 1 else num_tokens * top_k
    a = torch.randn(rows, k, generator=g, device=device())
    w = torch.randn(num_experts, n, k, generator=g, device=device()) / k**0.5
    topk_w, _ = _routing(num_tokens, num_experts, top_k, seed)
    routed = None if gemm == 1 else topk_w
    a_row_div = top_k if gemm == 1 else 1
    if dtype == "bf16":
        return a.bfloat16(), w.bfloat16(), routed, a_row_div, None, None
    w_scale = (w.abs().amax(dim=(1, 2)) / 448.0).float()
    a_scale = torch.tensor([4.0 / 448], device=device())
    wq = (w / w_scale[:, None, None]).to(torch.float8_e4m3fn)
    aq = (a / a_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return aq, wq, routed, a_row_div, a_scale, w_scale


@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: "T{}-E{}-k{}-K{}-N{}".format(*c))
@pytest.mark.parametrize("gemm", [1, 2])
@pytest.mark.parametrize("tile,swap_ab", [(TILE_SMALL, False), (TILE_SMALL, True), (TILE_GROUPED, False)],
                         ids=["plain", "swap", "grouped"])  # fmt: skip
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_moe_gemm_naive_matches_aligned_and_twins(case, gemm, tile, swap_ab, dtype):
    skip_fp8_on_interpreter(dtype == "fp8")
    num_tokens, num_experts, top_k, _, n = case
    a, w, routed, a_row_div, a_scale, w_scale = _gemm_operands(case, gemm, dtype, seed=num_tokens + 10 * gemm)
    _, topk_ids = _routing(num_tokens, num_experts, top_k, seed=num_tokens + 10 * gemm)
    aligned = moe_align_block_size(topk_ids, tile.block_m, num_experts, False)
    naive = (None, topk_ids.reshape(-1), None)
    common = (top_k, a_row_div, tile, swap_ab, False, a_scale, w_scale)

    def out():  # NaN-filled: a slot the kernel never writes fails the comparisons
        return torch.full((num_tokens * top_k, n), float("nan"), dtype=torch.bfloat16, device=device())

    got_naive = moe_gemm(a, w, out(), routed, *naive, *common, naive=True)
    got_aligned = moe_gemm(a, w, out(), routed, *aligned, *common)
    twin_naive = moe_gemm_torch(a, w, out(), routed, *naive, *common, naive=True)
    twin_aligned = moe_gemm_torch(a, w, out(), routed, *aligned, *common)
    # The same rows through the same tile and K loop: only where they sit in the M block differs.
    assert torch.equal(got_naive, got_aligned)
    assert torch.equal(twin_naive, twin_aligned)
    check_close(got_naive, twin_naive, dtype)


def test_moe_gemm_naive_argument_checks():
    a, w, _, _, _, _ = _gemm_operands((2, 8, 2, 64, 32), 1, "bf16", seed=0)
    _, ids = _routing(2, 8, 2, seed=0)
    c = torch.empty((4, 32), dtype=torch.bfloat16, device=device())
    for fn in (moe_gemm, moe_gemm_torch):
        with pytest.raises(ValueError, match="flattened top-k ids"):
            fn(a, w, c, None, None, ids.reshape(-1)[:3], None, 2, 2, TILE_SMALL, False, False, naive=True)
        with pytest.raises(ValueError, match="unless naive=True"):
            fn(a, w, c, None, None, ids.reshape(-1), None, 2, 2, TILE_SMALL, False, False)


@pytest.fixture
def align_calls(monkeypatch):
    """Counts `moe_align_block_size` launches made by the forward."""
    calls = []

    def counting(topk_ids, block_m, num_experts, respecialize=True):
        calls.append(block_m)
        return moe_align_block_size(topk_ids, block_m, num_experts, respecialize)

    monkeypatch.setattr(fused_moe_mod, "moe_align_block_size", counting)
    return calls


FORWARD_CASES = [
    # (num_tokens, num_experts, top_k, hidden, inter): naive by vLLM's rule unless marked
    (1, 8, 1, 64, 32),
    (1, 8, 2, 48, 40),  # 1 * 2 * 4 == 8: Mixtral's decode step, on the boundary
    (1, 32, 8, 72, 24),  # 1 * 8 * 4 == 32
    (2, 64, 8, 64, 40),  # 2 * 8 * 4 == 64
    (3, 40, 2, 40, 48),
]
DENSE_CASES = [(7, 8, 2, 72, 24), (5, 12, 8, 64, 40)]  # aligned by the rule; naive forced below


@pytest.mark.parametrize("case", FORWARD_CASES + DENSE_CASES, ids=lambda c: "T{}-E{}-k{}-H{}-I{}".format(*c))
@pytest.mark.parametrize("swap_ab", [False, True])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_forward_without_alignment_matches_aligned_and_twin(case, swap_ab, dtype, align_calls, monkeypatch):
    skip_fp8_on_interpreter(dtype == "fp8")
    num_tokens, num_experts, top_k, hidden, inter = case
    x, w13, w2, logits, scales = make_moe(num_tokens, num_experts, hidden, inter, dtype, seed=num_tokens)
    topk_w, topk_ids = torch.softmax(logits, -1).topk(top_k, dim=-1)
    topk_ids = topk_ids.to(torch.int32)
    sw = KernelSwitches(swap_ab=swap_ab, respecialize=False, dtype=dtype)

    def forward():
        return fused_experts(x, w13, w2, topk_w, topk_ids, switches=sw, scales=scales)

    if case in DENSE_CASES:
        assert not plan_fused_moe(num_tokens, num_experts, hidden, inter, top_k, sw).naive_slots
        monkeypatch.setattr(fused_moe_mod, "SPARSITY_FACTOR", 0)  # every batch passes the rule
    assert plan_fused_moe(num_tokens, num_experts, hidden, inter, top_k, sw).naive_slots
    naive = forward()
    assert align_calls == []  # the alignment is skipped for both GEMMs
    monkeypatch.setattr(fused_moe_mod, "SPARSITY_FACTOR", 10**9)  # no batch passes the rule
    aligned = forward()
    assert align_calls  # and this time it ran
    assert torch.equal(naive, aligned)
    check_close(naive, fused_experts_torch(x, w13, w2, topk_w, topk_ids, switches=sw, scales=scales), dtype)


def test_zero_tokens_forward(align_calls):
    x, w13, w2, logits, _ = make_moe(0, 8, 64, 32, "bf16")
    topk_w, topk_ids = torch.softmax(logits, -1).topk(2, dim=-1)
    assert plan_fused_moe(0, 8, 64, 32, 2, KernelSwitches()).naive_slots  # 0 <= E, as in vLLM
    out = fused_experts(x, w13, w2, topk_w, topk_ids.to(torch.int32))
    assert out.shape == (0, 64) and align_calls == []


@pytest.mark.parametrize(
    "num_tokens,top_k,num_experts,naive",
    [
        (0, 2, 8, True),
        (1, 1, 4, True),
        (1, 1, 3, False),
        (1, 2, 8, True),  # Mixtral-8x7B decode, batch 1
        (1, 2, 7, False),
        (2, 2, 8, False),  # Mixtral-8x7B, batch 2
        (2, 2, 16, True),
        (2, 2, 15, False),
        (1, 8, 32, True),
        (1, 8, 31, False),
        (4, 8, 128, True),  # Qwen3-235B-A22B / Qwen3-30B-A3B (E=128, k=8): batches 1-4
        (5, 8, 128, False),
        (8, 8, 256, True),  # DeepSeek-V3 (E=256, k=8): batches 1-8
        (9, 8, 256, False),
    ],
)
def test_plan_follows_vllms_rule(num_tokens, top_k, num_experts, naive):
    assert fused_moe_mod.SPARSITY_FACTOR == 4  # vLLM's `num_tokens * top_k_num * 4 <= global_num_experts`
    assert naive_block_assignment(num_tokens, top_k, num_experts) is naive
    for sw in (KernelSwitches(), KernelSwitches(swap_ab=True, respecialize=False, dtype="fp8")):
        assert plan_fused_moe(num_tokens, num_experts, 256, 128, top_k, sw).naive_slots is naive
        explicit = plan_fused_moe(num_tokens, num_experts, 256, 128, top_k, sw, tiles=(TILE_SMALL, TILE_SMALL))
        assert explicit.naive_slots is naive


def test_bench_records_carry_the_choice():
    import dataclasses

    sparse, dense = (plan_fused_moe(t, 8, 256, 128, 2, KernelSwitches()) for t in (1, 2))
    # moe_opt.bench.vs_vllm records dataclasses.asdict(plan)
    assert dataclasses.asdict(sparse)["naive_slots"] is True and dataclasses.asdict(dense)["naive_slots"] is False
    pytest.importorskip("matplotlib")  # moe_opt.bench.run draws its plots with it
    from moe_opt.bench.run import _plan_dict

    assert set(_plan_dict(sparse)) == {"gemm1", "gemm2", "naive_slots"}
    assert _plan_dict(sparse)["naive_slots"] is True and _plan_dict(dense)["naive_slots"] is False


# ----- compiled variants -----------------------------------------------------------------------------


def _compiled_mode_keyer(kernel):
    """key(args, kwargs) -> the key `JITFunction.run` files a launch of `kernel` under (for an sm_90 target)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature
    except ImportError as exc:  # internals of Triton 3.x; the GPU tests count real compilations
        pytest.skip(f"Triton internals moved: {exc}")
    dns = getattr(kernel, "do_not_specialize", None) or getattr(kernel, "kwargs", {}).get("do_not_specialize")
    jit_fn = JITFunction(kernel.fn, do_not_specialize=dns)
    binder = create_function_from_signature(jit_fn.signature, jit_fn.params, make_backend(GPUTarget("cuda", 90, 32)))

    def key(args, kwargs) -> str:
        _, specialization, options = binder(*args, **kwargs)
        return compute_cache_key({}, specialization, options)

    return key


class _RecordingKernel:
    """Stands in for a module's jitted kernel: files each launch's compiled-mode key, then launches."""

    def __init__(self, kernel):
        self.kernel, self.key, self.launches = kernel, _compiled_mode_keyer(kernel), []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((kwargs["NAIVE"], args[1].shape, self.key(args, kwargs)))
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize("respecialize", [False, True])
def test_naive_batches_share_one_variant_per_gemm(respecialize, monkeypatch):
    recorders = {name: _RecordingKernel(getattr(moe_gemm_mod, name)) for name in ("_moe_gemm_spec", "_moe_gemm_nospec")}
    for name, rec in recorders.items():
        monkeypatch.setattr(moe_gemm_mod, name, rec)
    num_experts, top_k, hidden, inter = 64, 1, 64, 32
    sw = KernelSwitches(respecialize=respecialize)
    x, w13, w2, logits, _ = make_moe(24, num_experts, hidden, inter, "bf16")
    # num_valid_tokens = 1 (==1), 16 (%16) and neither; all naive (T * 1 * 4 <= 64); then two aligned batches.
    naive_batches, aligned_batches = [1, 2, 3, 7, 16], [17, 24]
    for t in naive_batches + aligned_batches:
        assert plan_fused_moe(t, num_experts, hidden, inter, top_k, sw).naive_slots is (t in naive_batches)
        topk_w, topk_ids = torch.softmax(logits[:t], -1).topk(top_k, dim=-1)
        fused_experts(x[:t], w13, w2, topk_w, topk_ids.to(torch.int32), switches=sw)
    launches = recorders["_moe_gemm_spec" if respecialize else "_moe_gemm_nospec"].launches
    assert len(launches) == 2 * len(naive_batches + aligned_batches)
    naive_keys = {(shape, key) for is_naive, shape, key in launches if is_naive}
    aligned_keys = {(shape, key) for is_naive, shape, key in launches if not is_naive}
    assert len({shape for shape, _ in naive_keys}) == 2  # w13 and w2
    if respecialize:
        assert len(naive_keys) >= 2 * 3  # ==1 / %16 / other classes of num_valid_tokens: the keys see them
    else:
        assert len(naive_keys) == 2  # one naive variant per GEMM, whatever the batch
        assert len(aligned_keys) == 2  # beside the aligned one it adds to, per GEMM
        assert not naive_keys & aligned_keys
