"""A per-expert popularity for the router, so a dummy-weight model routes in a skewed, reproducible way.

Why: a model generated with dummy weights does not route like a real one. On the H200 (vLLM 0.26, Qwen3-30B-A3B's
shapes, 48 layers, FP8, 2026-12-03) it routed *every* token to experts 0-7 of 128 in every layer and every engine
(the router's logits tie, and top-k takes the lowest ids), so each of 8 experts ran the whole batch and the kernel
regimes that depend on how tokens spread over experts (few tokens per expert, where Swap-AB and small M tiles
matter; padding per expert; idle experts) were never exercised. ``MOEPERF_ROUTER_BIAS="uniform"`` makes each token
draw its k experts uniformly without replacement (the routing vLLM's own kernel tuning times under);
``"zipf:S"`` gives expert ``e`` of every MoE layer the Zipf popularity ``p_e ~ 1/rank_e^S`` (expert 0 the most
popular); ``zipf:S:SEED`` ranks the experts of each layer by a permutation drawn from ``SEED + layer`` instead.
Only a moeperf-started engine with the variable set is changed; it is a test-bench knob and changes the model's
outputs.

Each token *samples* its experts: ``log(p_e)`` plus fresh Gumbel noise is added to the router logits before
vLLM's top-k, and the top k of ``log(p_e) + Gumbel`` are k draws without replacement with probability ``p_e``
(the Gumbel-top-k trick), which is how ``moe_opt/bench/routing_dist.sample_routing`` draws the routing that
``moeperf tune`` times. A dummy router's own logits are close to zero next to that noise. A constant bias
alone (this module before 2026-12-02) does not skew a dummy model, it collapses it: every token took the same
k most popular experts (measured on the H200: 8 of 256 experts got all tokens in every layer).

The noise comes from the default generator (``torch.rand``), which CUDA-graph capture registers, so every
replay draws anew; on CPU it is traced with the rest of the layer.

Applied in the same wrapped ``FusedMoERouter.select_experts`` that counts (``expert_load.py``), to the
``router_logits`` argument, before vLLM's top-k: a few elementwise ops per layer and step, in float32 and cast
back to the logits' dtype. Layers whose kernel routes inside itself (monolithic) are not biased.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a bias is built: settings.py parses the variable in every process
    import torch

ENV = "MOEPERF_ROUTER_BIAS"


class RouterBiasError(ValueError):
    """``MOEPERF_ROUTER_BIAS`` cannot be understood."""


@dataclass(frozen=True)
class RouterBias:
    kind: str  # "zipf" or "uniform"
    exponent: float  # 0 for uniform: every expert equally popular
    seed: int | None = None

    def logits(self, num_experts: int, layer: int) -> torch.Tensor:
        """The bias of one layer, float32 [num_experts]: log of the popularity of each expert's rank (up to a
        constant, which top-k ignores)."""
        import torch

        if self.kind == "uniform":
            return torch.zeros(num_experts, dtype=torch.float32)
        ranks = torch.arange(1, num_experts + 1, dtype=torch.float64)
        bias = -self.exponent * torch.log(ranks)
        if self.seed is not None:
            g = torch.Generator().manual_seed(self.seed + layer)
            bias = bias[torch.argsort(torch.randperm(num_experts, generator=g))]
        return bias.to(torch.float32)


def parse_router_bias(raw: str | None) -> RouterBias | None:
    """``uniform``, ``zipf:S`` or ``zipf:S:SEED`` (S > 0); empty or unset: None."""
    if not raw:
        return None
    if raw == "uniform":
        return RouterBias("uniform", 0.0)
    parts = raw.split(":")
    try:
        if parts[0] != "zipf" or len(parts) not in (2, 3):
            raise ValueError("expected uniform, zipf:S or zipf:S:SEED")
        exponent = float(parts[1])
        seed = int(parts[2]) if len(parts) == 3 else None
        if not (exponent > 0 and math.isfinite(exponent)):
            raise ValueError("S must be a positive number")
    except ValueError as e:
        raise RouterBiasError(f"{ENV}={raw!r}: {e}") from e
    return RouterBias("zipf", exponent, seed)


class LayerBiases:
    """Each bound router's popularity on the device (float32 log-popularity), and the sampling that uses it."""

    def __init__(self) -> None:
        self._by_router: dict[int, torch.Tensor] = {}

    def bind(self, router: Any, bias: torch.Tensor, device: Any) -> None:
        import torch

        self._by_router[id(router)] = bias.to(device=device, dtype=torch.float32)

    def apply(self, router: Any, logits: torch.Tensor) -> torch.Tensor:
        bias = self._by_router.get(id(router))
        if bias is None:
            return logits
        if bias.device != logits.device:
            bias = self._by_router[id(router)] = bias.to(logits.device)
        return (logits.float() + bias + gumbel_like(logits)).to(logits.dtype)


def gumbel_like(logits: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise of the logits' shape, float32: ``-log(-log(U))``, U kept inside (0, 1)."""
    import torch

    u = torch.rand(logits.shape, device=logits.device, dtype=torch.float32).clamp_(1e-20, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))
