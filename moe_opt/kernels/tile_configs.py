"""Tile configurations per (experts, N, K, top-k, dtype, batch bucket), read from a JSON table.

The table is written by `python -m moe_opt.bench.tune` on the target GPU. A lookup that finds no entry
uses `default_tile` (a fixed heuristic) and says so through `TileChoice.source`, so a missing table row
shows up in every plan and result file instead of passing unnoticed.

One table per GPU model: a tile tuned on the H200 is not the best one on an H100 (2026-12-07, vLLM 0.26: on an H100
moe_opt's H200 tile for Mixtral-8x7B bf16 at 1024-4096 tokens was 2-4% slower than the H100 config vLLM ships).
The packaged ``tile_configs.json`` is the H200's and serves every GPU without a table of its own
(``tile_configs.<gpu slug>.json`` beside it, written by ``moe_opt.bench.tune`` on that GPU).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from moe_opt.kernels.switches import KernelDtype, TileConfig

DEFAULT_TABLE_PATH = Path(__file__).with_name("tile_configs.json")
DEFAULT_TABLE_DEVICE = "NVIDIA H200"
"""The GPU the packaged table was tuned on (its ``device`` field): that GPU's table is ``DEFAULT_TABLE_PATH``."""
BATCH_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TABLE_FORMAT = 1


def table_key(num_experts: int, n: int, k: int, top_k: int, dtype: KernelDtype) -> str:
    """Row key of one grouped GEMM (w13: N = 2 * intermediate, K = hidden; w2: N = hidden, K = inter)."""
    return f"E={num_experts},N={n},K={k},topk={top_k},dtype={dtype}"


def batch_bucket(num_tokens: int, buckets: tuple[int, ...] | list[int] = BATCH_BUCKETS) -> int:
    """Smallest bucket >= num_tokens (the largest one past the end): the batch a tile was tuned for."""
    ordered = sorted(buckets)
    for b in ordered:
        if num_tokens <= b:
            return b
    return ordered[-1]


def default_tile(num_tokens: int, num_experts: int, top_k: int, dtype: KernelDtype) -> TileConfig:
    """Heuristic used when the table has no row: small token tiles while experts see few tokens."""
    tokens_per_expert = max(1, num_tokens * top_k // max(1, num_experts))
    block_k = 128 if dtype == "fp8" else 64
    if tokens_per_expert <= 16:
        return TileConfig(16, 64, 128 if dtype == "bf16" else 256, 1, 4, 4)
    if tokens_per_expert <= 32:
        return TileConfig(32, 64, 128, 1, 4, 4)
    if tokens_per_expert <= 96:
        return TileConfig(64, 128, block_k, 8, 4, 3)
    return TileConfig(128, 128, block_k, 8, 8, 3)


@dataclass(frozen=True)
class TileChoice:
    tile: TileConfig
    source: str  # "table", "default" or "explicit"
    bucket: int


class TileTable:
    """In-memory view of the JSON table; `entries[key][bucket] -> TileConfig`."""

    def __init__(
        self,
        entries: dict[str, dict[int, TileConfig]] | None = None,
        meta: dict | None = None,
        path: Path | None = None,
    ):
        self.entries: dict[str, dict[int, TileConfig]] = entries or {}
        self.meta: dict = meta or {}
        self.path = path  # the file it was read from (None: built in memory), so a result can name its table

    @classmethod
    def load(cls, path: Path | str = DEFAULT_TABLE_PATH) -> TileTable:
        path = Path(path)
        if not path.exists():
            return cls()
        raw = json.loads(path.read_text())
        if raw.get("format") != TABLE_FORMAT:
            raise ValueError(f"{path}: unknown tile table format {raw.get('format')!r}")
        entries = {
            key: {int(b): TileConfig.from_dict(cfg) for b, cfg in rows.items()}
            for key, rows in raw.get("entries", {}).items()
        }
        return cls(entries, {k: v for k, v in raw.items() if k != "entries"}, path)

    def save(self, path: Path | str = DEFAULT_TABLE_PATH) -> None:
        out = {
            **self.meta,
            "format": TABLE_FORMAT,
            "entries": {
                key: {str(b): cfg.to_dict() for b, cfg in sorted(rows.items())}
                for key, rows in sorted(self.entries.items())
            },
        }
        Path(path).write_text(json.dumps(out, indent=1) + "\n")

    def set(self, key: str, bucket: int, tile: TileConfig) -> None:
        self.entries.setdefault(key, {})[bucket] = tile

    def lookup(self, num_tokens: int, num_experts: int, n: int, k: int, top_k: int, dtype: KernelDtype) -> TileChoice:
        rows = self.entries.get(table_key(num_experts, n, k, top_k, dtype))
        if rows:
            bucket = batch_bucket(num_tokens, list(rows))
            return TileChoice(rows[bucket], "table", bucket)
        bucket = batch_bucket(num_tokens)
        return TileChoice(default_tile(bucket, num_experts, top_k, dtype), "default", bucket)

    def buckets_for(self, num_experts: int, n: int, k: int, top_k: int, dtype: KernelDtype) -> list[int]:
        """Batch sizes that select every distinct tile of this GEMM: what a warm-up must visit."""
        rows = self.entries.get(table_key(num_experts, n, k, top_k, dtype))
        return sorted(rows) if rows else list(BATCH_BUCKETS)


def gpu_slug(device_name: str) -> str:
    """File-name form of a CUDA device name: ``NVIDIA H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3``."""
    return "_".join(re.findall(r"[a-z0-9]+", device_name.lower()))


def table_path_for(device_name: str | None) -> Path:
    """Where the table for this GPU model lives (``DEFAULT_TABLE_PATH`` for the packaged table's GPU or none)."""
    if not device_name or device_name == DEFAULT_TABLE_DEVICE:
        return DEFAULT_TABLE_PATH
    return DEFAULT_TABLE_PATH.with_name(f"tile_configs.{gpu_slug(device_name)}.json")


def table_for(device_name: str | None) -> TileTable:
    """This GPU's own table if it has one, else the packaged one: the tiles a lookup on that GPU uses."""
    own = table_path_for(device_name)
    return TileTable.load(own if own.exists() else DEFAULT_TABLE_PATH)


def current_device_name() -> str | None:
    """The CUDA device's name, or None without CUDA (the interpreter and CPU tests use the packaged table)."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


_DEFAULT_TABLE: TileTable | None = None


def default_table() -> TileTable:
    """The table for this process's GPU, loaded once per process."""
    global _DEFAULT_TABLE
    if _DEFAULT_TABLE is None:
        _DEFAULT_TABLE = table_for(current_device_name())
    return _DEFAULT_TABLE
