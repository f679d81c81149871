"""Routings to tune and benchmark with: uniform, Zipf-skewed, or from a recorded expert histogram.

Uniform routing spreads tokens evenly, so every expert's M tile is equally (under)filled; real traffic
is skewed, with a few hot experts getting far more tokens, which favours larger M tiles for them.
Spec strings: "uniform", "zipf:S" (popularity ~ 1/rank^S), "hist:PATH" (JSON list of counts per expert),
"from:RESULT_JSON[:ARM]" (the tokens per expert a moeperf run observed: its arms' ``expert_load``).
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
        return _shares(json.loads(Path(arg).read_text()), num_experts, f"histogram {arg}")
    if kind == "from":
        path, arm = split_from_spec(arg)
        return _shares(expert_load_counts(path, arm), num_experts, f"{path}: expert_load")
    raise ValueError(f"unknown routing spec {spec!r} (uniform | zipf:S | hist:PATH | from:RESULT_JSON[:ARM])")


def _shares(counts: list[int] | list[float], num_experts: int, source: str) -> torch.Tensor:
    """Counts per expert as probabilities; the source must count exactly the shape's experts."""
    t = torch.tensor(counts, dtype=torch.float64)
    if t.numel() != num_experts:
        raise ValueError(f"{source} has {t.numel()} experts, the shape has {num_experts}")
    return (t / t.sum()).float()


def split_from_spec(arg: str) -> tuple[Path, str | None]:
    """``PATH`` or ``PATH:ARM`` of a ``from:`` spec; a path ending in ``.json`` takes no arm suffix."""
    if arg.endswith(".json") or ":" not in arg:
        return Path(arg), None
    path, _, arm = arg.rpartition(":")
    return Path(path), arm or None


def expert_load_counts(path: Path, arm: str | None = None) -> list[int]:
    """Tokens routed to each expert in a moeperf result file: ``arms[].expert_load`` summed over layers and over
    ``arm`` (or every arm with status ok). Read as plain JSON so any result version that has the field works.

    The tuner's tiles follow how full each expert's M tile is, so the real skew of the traffic is the routing to
    tune on; raises ValueError naming the file when it holds no such counts.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read a result file ({e})") from None
    arms = data.get("arms") if isinstance(data, dict) else None
    if not isinstance(arms, list):
        raise ValueError(f"{path}: not a moeperf result file (no arms list)")
    names = [a.get("name") for a in arms if isinstance(a, dict)]
    if arm is not None:
        chosen = [a for a in arms if isinstance(a, dict) and a.get("name") == arm]
        if not chosen:
            raise ValueError(f"{path}: no arm {arm!r} (arms: {names})")
    else:
        chosen = [a for a in arms if isinstance(a, dict) and a.get("status") == "ok"]
    total: list[int] = []
    for a in chosen:
        for row in a.get("expert_load") or []:
            tokens = [int(t) for t in row.get("tokens", [])]
            if total and len(tokens) != len(total):
                raise ValueError(
                    f"{path}: arm {a.get('name')!r} layer {row.get('layer')} has {len(tokens)} experts, "
                    f"earlier rows {len(total)}"
                )
            total = [x + t for x, t in zip(total, tokens, strict=True)] if total else tokens
    if not total or sum(total) <= 0:
        which = f"arm {arm!r}" if arm is not None else f"the ok arms {[a.get('name') for a in chosen]}"
        raise ValueError(
            f"{path}: {which} hold no expert_load (tokens per expert); the run must be one that recorded routing"
        )
    return total


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
