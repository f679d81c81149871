"""Routings to tune and benchmark with: uniform, Zipf-skewed, or from a recorded expert histogram.

Uniform routing spreads tokens evenly, so every expert's M tile is equally (under)filled; real traffic
is skewed, with a few hot experts getting far more tokens, which favours larger M tiles for them.
Spec strings: "uniform", "zipf:S" (popularity ~ 1/rank^S), "hist:PATH" (JSON list of counts per expert).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def expert_popularity(spec: str, num_experts: int) -> torch.Tensor:
    """Probability of each expert being picked (before top-k without replacement)."""
    kind, _, arg = spec.partition(":")
    if kind == "uniform":
        return torch.full((num_experts,), 1.0 / num_experts)
    if kind == "zipf":
        s = float(arg or 1.0)
        ranks = torch.arange(1, num_experts + 1, dtype=torch.float64)
        p = ranks.pow(-s)
        return (p / p.sum()).float()
    if kind == "hist":
        counts = torch.tensor(json.loads(Path(arg).read_text()), dtype=torch.float64)
        if counts.numel() != num_experts:
            raise ValueError(f"histogram {arg} has {counts.numel()} experts, shape has {num_experts}")
        return (counts / counts.sum()).float()
    raise ValueError(f"unknown routing spec {spec!r} (uniform | zipf:S | hist:PATH)")


def sample_routing(
    spec: str, num_tokens: int, num_experts: int, top_k: int, seed: int = 0, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights float32, topk_ids int32), distinct experts per token, weights summing to one."""
    g = torch.Generator().manual_seed(seed)
    p = expert_popularity(spec, num_experts)
    if num_tokens == 0:
        ids = torch.empty((0, top_k), dtype=torch.int64)
    else:
        ids = torch.multinomial(p.expand(num_tokens, -1), top_k, replacement=False, generator=g)
    w = torch.rand(num_tokens, top_k, generator=g) + 0.1
    w = w / w.sum(-1, keepdim=True)
    return w.to(device), ids.to(device=device, dtype=torch.int32)
