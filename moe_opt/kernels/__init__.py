"""moeperf's own Triton fused-MoE kernels, each beside a plain-torch twin with the same signature.

Imports torch, triton, numpy and the standard library only, so it runs on a bare GPU box.
"""

from moe_opt.kernels.activation import (
    silu_and_mul,
    silu_and_mul_torch,
    static_fp8_quant,
    static_fp8_quant_torch,
)
from moe_opt.kernels.align import max_padded_slots, moe_align_block_size, moe_align_block_size_torch
from moe_opt.kernels.compile_counter import CompileCounter, CompileEvent
from moe_opt.kernels.fused_moe import (
    GemmPlan,
    MoePlan,
    fused_experts,
    fused_experts_torch,
    fused_moe,
    fused_moe_torch,
    naive_block_assignment,
    plan_fused_moe,
)
from moe_opt.kernels.moe_gemm import moe_gemm, moe_gemm_torch
from moe_opt.kernels.routing import (
    topk_softmax,
    topk_softmax_quant,
    topk_softmax_quant_torch,
    topk_softmax_torch,
)
from moe_opt.kernels.switches import Fp8Scales, KernelSwitches, TileConfig, UnsupportedKernelConfig
from moe_opt.kernels.tile_configs import BATCH_BUCKETS, TileTable, batch_bucket, default_table, table_key
from moe_opt.kernels.topk_sum import topk_sum, topk_sum_torch

__all__ = [
    "BATCH_BUCKETS",
    "CompileCounter",
    "CompileEvent",
    "Fp8Scales",
    "GemmPlan",
    "KernelSwitches",
    "MoePlan",
    "TileConfig",
    "TileTable",
    "UnsupportedKernelConfig",
    "batch_bucket",
    "default_table",
    "fused_experts",
    "fused_experts_torch",
    "fused_moe",
    "fused_moe_torch",
    "max_padded_slots",
    "moe_align_block_size",
    "moe_align_block_size_torch",
    "moe_gemm",
    "moe_gemm_torch",
    "naive_block_assignment",
    "plan_fused_moe",
    "silu_and_mul",
    "silu_and_mul_torch",
    "static_fp8_quant",
    "static_fp8_quant_torch",
    "table_key",
    "topk_softmax",
    "topk_softmax_quant",
    "topk_softmax_quant_torch",
    "topk_softmax_torch",
    "topk_sum",
    "topk_sum_torch",
]
