"""The kernel's optimization switches and tile shapes, as frozen values.

One frozen dataclass per concept so that an arm of an experiment is a value that can be hashed, logged
and compared; invalid combinations raise `UnsupportedKernelConfig` at construction or at planning time
instead of quietly running something other than what was asked for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch

KernelDtype = Literal["bf16", "fp8"]
SUPPORTED_DTYPES: tuple[str, ...] = ("bf16", "fp8")

# wgmma's M slot is 64 rows per warpgroup: Swap-AB exists to fill it with weight rows when the token
# tile is smaller than that.
WGMMA_M = 64


class UnsupportedKernelConfig(ValueError):
    """Raised when a switch/tile/dtype combination cannot run as asked (never silently replaced)."""


@dataclass(frozen=True)
class KernelSwitches:
    """The three optimizations an arm toggles.

    swap_ab: compute the transposed product (weights x tokens^T) when the token tile is below 64 rows,
        so that the weight tile fills wgmma's 64-row slot. With a table-chosen tile of 64 rows or more
        it is *not applicable*: the plan (`plan_fused_moe`) records `swap_ab_applied=False` for that
        GEMM. An explicitly passed tile that cannot use it raises `UnsupportedKernelConfig`.
    respecialize: True keeps Triton's default integer specialisation (==1, %16) on the arguments that
        vary with the batch; False marks them `do_not_specialize` so a new batch size never compiles.
    dtype: "bf16" or "fp8" (e4m3 weights and activations, per-tensor static scales).
    """

    swap_ab: bool = False
    respecialize: bool = True
    dtype: KernelDtype = "bf16"

    def __post_init__(self) -> None:
        if self.dtype not in SUPPORTED_DTYPES:
            raise UnsupportedKernelConfig(f"dtype {self.dtype!r} not in {SUPPORTED_DTYPES}")
        if not isinstance(self.swap_ab, bool) or not isinstance(self.respecialize, bool):
            raise UnsupportedKernelConfig("swap_ab and respecialize must be bool")

    def label(self) -> str:
        """Short stable name used in result files and plots."""
        return f"{self.dtype}-swap{'on' if self.swap_ab else 'off'}-respec{'on' if self.respecialize else 'off'}"


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class TileConfig:
    """Tile shape and pipelining of one grouped GEMM launch (Triton constexprs + launch options)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "group_m"):
            value = getattr(self, name)
            if not _is_pow2(value):
                raise UnsupportedKernelConfig(f"{name}={value} must be a power of two")
        if self.block_m < 16 or self.block_n < 16 or self.block_k < 16:
            raise UnsupportedKernelConfig("tl.dot needs every tile dimension >= 16")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise UnsupportedKernelConfig(f"bad num_warps={self.num_warps} / num_stages={self.num_stages}")

    def swap_ab_applicable(self) -> bool:
        """Swap-AB pays only when the token tile under-fills wgmma and the weight tile can fill it."""
        return self.block_m < WGMMA_M and self.block_n >= WGMMA_M

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, int]) -> TileConfig:
        return TileConfig(**{k: int(v) for k, v in d.items()})


@dataclass(frozen=True)
class Fp8Scales:
    """Static per-tensor scales of FP8 w8a8: one per expert for weights, one scalar per activation.

    Shapes: w13_scale [E], w2_scale [E], a1_scale [1], a2_scale [1], float32, on the weights' device.
    Dequantised value = fp8 value * scale.
    """

    w13_scale: torch.Tensor
    w2_scale: torch.Tensor
    a1_scale: torch.Tensor
    a2_scale: torch.Tensor
