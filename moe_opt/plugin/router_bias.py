"""A fixed per-expert logit bias before top-k, so a dummy-weight model routes in a skewed, reproducible way.

Why: a model generated with dummy weights routes almost uniformly, while real traffic on a real model does not;
kernel effects that depend on how tokens spread over experts (tile choice, padding per expert, idle experts) are
then never exercised. ``MOEPERF_ROUTER_BIAS="zipf:S"`` adds ``log(p_e)`` with Zipf popularity ``p_e ~ 1/rank_e^S``
to every MoE layer's router logits (expert 0 the most popular), ``zipf:S:SEED`` ranks the experts of each layer by
a permutation drawn from ``SEED + layer`` instead. Only a moeperf-started engine with the variable set is changed;
it is a test-bench knob and changes the model's outputs.

Applied in the same wrapped ``FusedMoERouter.select_experts`` that counts (``expert_load.py``), to the
``router_logits`` argument, before vLLM's top-k: one elementwise add per layer and step. Unlike the count it is
also applied while Dynamo traces (a pure add of a constant tensor), so a compiled CPU graph routes the same way.
Layers whose kernel routes inside itself (monolithic) are not biased.
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
    kind: str  # "zipf"
    exponent: float
    seed: int | None = None

    def logits(self, num_experts: int, layer: int) -> torch.Tensor:
        """The bias of one layer, float32 [num_experts]: log of the Zipf popularity of each expert's rank."""
        import torch

        ranks = torch.arange(1, num_experts + 1, dtype=torch.float64)
        bias = -self.exponent * torch.log(ranks)
        if self.seed is not None:
            g = torch.Generator().manual_seed(self.seed + layer)
            bias = bias[torch.argsort(torch.randperm(num_experts, generator=g))]
        return bias.to(torch.float32)


def parse_router_bias(raw: str | None) -> RouterBias | None:
    """``zipf:S`` or ``zipf:S:SEED`` (S > 0); empty or unset: None."""
    if not raw:
        return None
    parts = raw.split(":")
    try:
        if parts[0] != "zipf" or len(parts) not in (2, 3):
            raise ValueError("expected zipf:S or zipf:S:SEED")
        exponent = float(parts[1])
        seed = int(parts[2]) if len(parts) == 3 else None
        if not (exponent > 0 and math.isfinite(exponent)):
            raise ValueError("S must be a positive number")
    except ValueError as e:
        raise RouterBiasError(f"{ENV}={raw!r}: {e}") from e
    return RouterBias("zipf", exponent, seed)


class LayerBiases:
    """Each bound router's bias on the device, in the dtype of its logits (cast once per dtype, at warm-up)."""

    def __init__(self) -> None:
        self._by_router: dict[int, dict[Any, torch.Tensor]] = {}

    def bind(self, router: Any, bias: torch.Tensor, device: Any) -> None:
        self._by_router[id(router)] = {bias.dtype: bias.to(device)}

    def apply(self, router: Any, logits: torch.Tensor) -> torch.Tensor:
        per_dtype = self._by_router.get(id(router))
        if per_dtype is None:
            return logits
        bias = per_dtype.get(logits.dtype)
        if bias is None:
            base = next(iter(per_dtype.values()))
            bias = per_dtype[logits.dtype] = base.to(device=logits.device, dtype=logits.dtype)
        return logits + bias
