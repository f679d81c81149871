"""Per-rank MoE layer shapes at tensor parallelism 8 (intermediate size split 8 ways)."""

from __future__ import annotations

from dataclasses import dataclass

TP = 8


@dataclass(frozen=True)
class MoeShape:
    name: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int  # per rank, already divided by TP

    @property
    def weight_params(self) -> int:
        """Parameters of all experts' w13 [E, 2I, H] and w2 [E, H, I]."""
        return 3 * self.num_experts * self.hidden_size * self.intermediate_size


SHAPES: dict[str, MoeShape] = {
    s.name: s
    for s in (
        MoeShape("mixtral-8x7b", 8, 2, 4096, 14336 // TP),
        MoeShape("qwen3-30b-a3b", 128, 8, 2048, 768 // TP),
        MoeShape("qwen3-235b-a22b", 128, 8, 4096, 1536 // TP),
        MoeShape("deepseek-v3", 256, 8, 7168, 2048 // TP),
    )
}

BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
