"""``moe_opt.bench.vs_vllm`` on a GPU: moe_opt's and vLLM's fused_experts timed side by side on the smallest
benchmark shape, both dtypes, a decode and a prefill-ish batch, and the JSON it writes.

The CPU suite (tests/unit/test_bench_vs_vllm.py) covers arguments, cells and the summary; only here do both
kernels run, so only here is it checked that they compute the same layer on the same inputs.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# vLLM (and so Triton) is looked up, not imported: tests/kernels, collected after this folder, can only pick
# Triton's CPU interpreter while Triton is not imported yet (tests/unit/test_boundaries.py guards it).
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM"),
]

SHAPE = "qwen3-30b-a3b"  # the smallest experts: fastest to compile and run
BATCHES = [1, 64]


def test_both_kernels_timed_side_by_side_agree_and_are_recorded(tmp_path: Path) -> None:
    from moe_opt.bench import vs_vllm
    from moe_opt.bench.shapes import SHAPES
    from moe_opt.kernels import KernelSwitches, plan_fused_moe

    out = tmp_path / "vs_vllm.json"
    args = ["--shapes", SHAPE, "--dtypes", "bf16,fp8", "--batches", ",".join(map(str, BATCHES)), "--trials", "3"]
    assert vs_vllm.main([*args, "--out", str(out), "--profile"]) == 0  # 1 would mean some cell's outputs disagree

    doc = json.loads(out.read_text())
    assert "partial" not in doc
    env = doc["environment"]
    assert env["gpu"] != "none" and env["vllm"] and env["torch"] and env["triton"] and env["date_utc"]
    assert {"driver", "command"} <= set(env)
    assert doc["settings"]["trials"] == 3 and doc["settings"]["vllm_tuned_config_folder"] is None

    cells = doc["cells"]
    assert [(c["shape"], c["dtype"], c["batch"]) for c in cells] == [
        (SHAPE, d, b) for d in ("bf16", "fp8") for b in BATCHES
    ]
    s = SHAPES[SHAPE]
    for c in cells:
        assert c["moe_opt_us"] > 0 and c["vllm_us"] > 0
        assert c["ratio"] == pytest.approx(c["vllm_us"] / c["moe_opt_us"])
        assert c["check"]["ok"], c["check"]
        assert c["check"]["max_abs_diff"] <= c["check"]["bounds_rel"]["max"] * c["check"]["vllm_max_abs"] + 1e-6
        # moe_opt's tiles: what its own planner picks for the cell (the launch uses the same plan)
        sw = KernelSwitches(swap_ab=False, respecialize=False, dtype=c["dtype"])
        plan = plan_fused_moe(c["batch"], s.num_experts, s.hidden_size, s.intermediate_size, s.top_k, sw)
        assert c["moe_opt"]["gemm1"]["tile"] == plan.gemm1.tile.to_dict()
        assert c["moe_opt"]["gemm2"]["swap_ab_applied"] is False  # Swap-AB off by default
        assert c["moe_opt"]["naive_slots"] is plan.naive_slots is (c["batch"] == 1)  # 1 * 8 * 4 <= 128 experts
        assert c["moe_opt"]["switches"] == f"{c['dtype']}-swapoff-respecoff"
        # vLLM's config: its own lookup without a tuned folder, and its own Swap-AB rule
        vllm = c["vllm"]
        assert {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages"} <= set(vllm["config"])
        assert vllm["config_source"] in ("shipped", "default") and vllm["config_file"].startswith("E=128,N=96,")
        assert isinstance(vllm["swap_ab"], bool)
        if c["dtype"] == "bf16":
            assert vllm["swap_ab"] is False  # vLLM consults enable_swap_ab for FP8 w8a8 only
        # --profile: each side's GPU time per kernel; both run two expert GEMMs, each side its own kernel
        kernels = c["kernels_us"]
        assert any("moe_gemm" in k for k in kernels["moe_opt"]) and any("fused_moe" in k for k in kernels["vllm"])
        for side in ("moe_opt", "vllm"):
            assert all(v["us_per_call"] > 0 and v["launches_per_call"] > 0 for v in kernels[side].values())

    summary = doc["summary"]
    assert summary["cells"] == 4 and summary["mismatched_cells"] == []
    assert summary["at_least_as_fast"] + len(summary["slower_cells"]) == 4
    assert summary["at_least_as_fast"] == sum(c["ratio"] >= 0.99 for c in cells)
