"""Switch validation, Swap-AB applicability and the tile table: typed errors, never silent fallbacks."""

import pytest
import torch

from moe_opt.kernels import (
    KernelSwitches,
    TileConfig,
    TileTable,
    UnsupportedKernelConfig,
    batch_bucket,
    fused_moe,
    plan_fused_moe,
    table_key,
)
from moe_opt.kernels.testing import make_moe


def test_switches_reject_unknown_dtype():
    with pytest.raises(UnsupportedKernelConfig):
        KernelSwitches(dtype="fp16")  # type: ignore[arg-type]


def test_switches_are_frozen_and_labelled():
    sw = KernelSwitches(swap_ab=True, respecialize=False, dtype="fp8")
    with pytest.raises(AttributeError):
        sw.swap_ab = False  # type: ignore[misc]
    assert sw.label() == "fp8-swapon-respecoff"


@pytest.mark.parametrize("bad", [dict(block_m=24), dict(block_k=8), dict(num_warps=3)])
def test_tile_config_rejects_bad_values(bad):
    args = dict(block_m=16, block_n=64, block_k=64, group_m=1, num_warps=4, num_stages=3) | bad
    with pytest.raises(UnsupportedKernelConfig):
        TileConfig(**args)


def test_explicit_tile_with_swap_ab_and_large_m_raises():
    big = TileConfig(64, 128, 64)
    with pytest.raises(UnsupportedKernelConfig):
        plan_fused_moe(512, 8, 64, 32, 2, KernelSwitches(swap_ab=True), tiles=(big, big))


def test_table_tile_with_large_m_reports_swap_not_applicable():
    table = TileTable()
    table.set(table_key(8, 64, 64, 2, "bf16"), 512, TileConfig(64, 128, 64))
    table.set(table_key(8, 64, 32, 2, "bf16"), 512, TileConfig(16, 64, 32))
    plan = plan_fused_moe(300, 8, 64, 32, 2, KernelSwitches(swap_ab=True), tile_table=table)
    assert plan.gemm1.source == "table" and not plan.gemm1.swap_ab_applied
    assert plan.gemm2.swap_ab_applied


def test_missing_table_row_is_reported_as_default():
    plan = plan_fused_moe(3, 8, 64, 32, 2, KernelSwitches(), tile_table=TileTable())
    assert plan.gemm1.source == "default" and plan.gemm1.bucket == 4


def test_fp8_switch_with_bf16_weights_raises():
    x, w13, w2, logits, _ = make_moe(2, 8, 64, 32, "bf16")
    with pytest.raises(UnsupportedKernelConfig):
        fused_moe(x, w13, w2, logits, 2, switches=KernelSwitches(dtype="fp8"))


def test_fp8_without_scales_raises():
    x, w13, w2, logits, _ = make_moe(2, 8, 64, 32, "fp8")
    with pytest.raises(UnsupportedKernelConfig):
        fused_moe(x, w13, w2, logits, 2, switches=KernelSwitches(dtype="fp8"), scales=None)


def test_bucket_lookup_and_roundtrip(tmp_path):
    assert [batch_bucket(n) for n in (1, 3, 64, 65, 10**6)] == [1, 4, 64, 128, 8192]
    table = TileTable(meta={"device": "test"})
    key = table_key(8, 3584, 4096, 2, "fp8")
    table.set(key, 16, TileConfig(16, 128, 128, 1, 4, 5))
    table.set(key, 256, TileConfig(64, 128, 128, 8, 4, 3))
    path = tmp_path / "t.json"
    table.save(path)
    loaded = TileTable.load(path)
    assert loaded.entries == table.entries and loaded.meta["device"] == "test"
    assert loaded.lookup(20, 8, 3584, 4096, 2, "fp8").tile.block_m == 64
    assert loaded.lookup(10**5, 8, 3584, 4096, 2, "fp8").bucket == 256
    assert loaded.buckets_for(8, 3584, 4096, 2, "fp8") == [16, 256]


def test_packaged_table_parses():
    TileTable.load()  # the committed JSON must always load


def test_zero_tokens_returns_empty():
    x, w13, w2, logits, _ = make_moe(0, 8, 64, 32, "bf16")
    out = fused_moe(x, w13, w2, logits, 2)
    assert out.shape == (0, 64) and out.dtype == torch.bfloat16
