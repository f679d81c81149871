"""Each GPU model reads its own tile table, and one without a table reads the packaged (H200) one.

Why: a tile tuned on the H200 lost 2-4% to vLLM's shipped H100 config on an H100 (Mixtral-8x7B bf16, 1024-4096
tokens, 2026-12-07); a per-GPU table is what fixes that without changing the H200's tiles.
"""

from __future__ import annotations

import pytest

from moe_opt.kernels import TileConfig, TileTable, table_key
from moe_opt.kernels import tile_configs as tc

H100 = "NVIDIA H100 80GB HBM3"


def test_gpu_slug_is_a_file_name_of_the_device_name() -> None:
    assert tc.gpu_slug(H100) == "nvidia_h100_80gb_hbm3"
    assert tc.gpu_slug("NVIDIA H200") == "nvidia_h200"


def test_the_packaged_tables_gpu_and_no_gpu_read_the_packaged_file() -> None:
    assert tc.table_path_for(tc.DEFAULT_TABLE_DEVICE) == tc.DEFAULT_TABLE_PATH
    assert tc.table_path_for(None) == tc.DEFAULT_TABLE_PATH
    assert tc.TileTable.load().meta["device"] == tc.DEFAULT_TABLE_DEVICE


@pytest.fixture
def packaged(tmp_path, monkeypatch) -> TileTable:
    path = tmp_path / "tile_configs.json"
    table = TileTable(meta={"device": tc.DEFAULT_TABLE_DEVICE})
    table.set(table_key(8, 28672, 4096, 2, "bf16"), 1024, TileConfig(64, 128, 64, 8, 4, 3))
    table.save(path)
    monkeypatch.setattr(tc, "DEFAULT_TABLE_PATH", path)
    return table


def test_a_gpu_without_its_own_table_uses_the_packaged_tiles(packaged: TileTable) -> None:
    assert tc.table_path_for(H100).name == "tile_configs.nvidia_h100_80gb_hbm3.json"
    assert not tc.table_path_for(H100).exists()
    got = tc.table_for(H100).lookup(1000, 8, 28672, 4096, 2, "bf16")
    assert (got.tile, got.source) == (TileConfig(64, 128, 64, 8, 4, 3), "table")


def test_a_gpu_with_its_own_table_uses_its_tiles_and_others_do_not(packaged: TileTable) -> None:
    own = TileTable(meta={"device": H100})
    own.set(table_key(8, 28672, 4096, 2, "bf16"), 1024, TileConfig(64, 256, 64, 8, 4, 4))
    own.save(tc.table_path_for(H100))
    assert tc.table_for(H100).lookup(1000, 8, 28672, 4096, 2, "bf16").tile == TileConfig(64, 256, 64, 8, 4, 4)
    assert tc.table_for(tc.DEFAULT_TABLE_DEVICE).lookup(1000, 8, 28672, 4096, 2, "bf16").tile == TileConfig(
        64, 128, 64, 8, 4, 3
    )


def test_every_packaged_table_sits_where_its_gpu_looks_for_it() -> None:
    """A table tuned on one GPU and saved under another's name would serve the wrong GPU without a sign."""
    tables = sorted(tc.DEFAULT_TABLE_PATH.parent.glob("tile_configs*.json"))
    assert tc.DEFAULT_TABLE_PATH in tables and len(tables) >= 2
    for path in tables:
        table = TileTable.load(path)
        assert table.path == path
        assert tc.table_path_for(table.meta["device"]) == path, path.name
        for rows in table.entries.values():
            assert set(rows) <= set(tc.BATCH_BUCKETS)
