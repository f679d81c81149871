"""Tokens routed to each expert of each MoE layer, counted on the layer's device inside vLLM's MoE forward.

Why on the device: a routing histogram of live traffic needs every step, and a host read per step would stall
the GPU pipeline (async scheduling) and could not run inside a CUDA graph. So each MoE layer adds the expert ids
its router selected into one row of a persistent ``[num_moe_layers, num_experts + 1]`` int64 tensor with a
single ``index_add_``; on a GPU that op is recorded into vLLM's CUDA graphs at capture and keeps counting on
every replay. The tensor is read back rarely, off the hot path (``expert_harvest.py``).

Where, read in vLLM 0.26.0 and 0.32.0 (same code at this point in both):

- ``FusedMoE(...)`` (``fused_moe/layer.py``) is a factory returning a ``MoERunner`` module with ``layer_name``
  (the prefix, e.g. ``model.layers.3.block_sparse_moe.experts``) and ``router`` (one ``FusedMoERouter`` per
  layer, from ``create_fused_moe_router``; ``top_k``, ``global_num_experts``).
- ``MoERunner._apply_quant_method`` calls ``self.router.select_experts(...)`` for every modular kernel
  (Triton, CUTLASS, vLLM's CPU experts). ``FusedMoERouter.select_experts`` (``router/fused_moe_router.py``) is
  the one concrete method every router class inherits: it returns ``(topk_weights, topk_ids)`` after top-k and
  EPLB mapping (so ids are logical expert ids without EPLB, physical ones with it). Wrapped there, on the class.
- On CUDA the runner enters through ``torch.ops.vllm.moe_forward`` (an opaque custom op): Dynamo never traces
  into it, and CUDA-graph capture records the eager kernels inside it, ours included. On CPU both versions call
  ``_moe_forward`` directly, so with torch.compile (not ``--enforce-eager``) Dynamo would trace the router; the
  count steps aside while compiling (``torch.compiler.is_compiling``), so a compiled CPU graph counts nothing.

Not counted: monolithic kernels (``quant_method.is_monolithic``: routing inside the kernel, e.g. FlashInfer
TRT-LLM), which never call ``select_experts``; the CPU build's zentorch/int4 experts (they route themselves).

Padding: with CUDA graphs vLLM pads a batch to a captured size; the padded rows are routed too. The count is
weighted by a per-step mask (1 for the step's real tokens, 0 for padding), written on the device once per step
when the token count changes (one small kernel, ordered on the step's stream), so padding is not counted. The
mask assumes the MoE sees the step's tokens in order (TP; not with DP dispatch, sequence-parallel MoE or
dual-batch overlap, whose rows are then counted unweighted or misweighted).

Overlap (``MOEPERF_EXPERT_LOAD=overlap``, opt-in): measured on an H200 (2026-12-02,
``moe_opt/bench/expert_load_cost.py``), the inline count costs 2.3-7 us per layer and step in graph replay, about
one serial graph node: 13 % of a Qwen3-30B-A3B MoE forward at batch 1 and some 3 % of its 48-layer decode step,
above the 1 % it may cost. With overlap the count is queued on a side stream forked right after routing and
joined when the layer's ``MoERunner._apply_quant_method`` returns, so in a captured graph it is a parallel branch
beside the expert GEMMs instead of a node on the critical path; the join stays inside the layer, so vLLM's
piecewise graphs (one capture per piece) never end with the branch unjoined. A routing outside that method (no
join to come) is counted inline.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from moe_opt.plugin.patches import ImportModule, PatchTargetMissing, _import
from moe_opt.plugin.router_bias import LayerBiases

ROUTER_MODULE = "vllm.model_executor.layers.fused_moe.router.fused_moe_router"
ROUTER_CLASS = "FusedMoERouter"
ROUTER_METHOD = "select_experts"
RUNNER_MODULE = "vllm.model_executor.layers.fused_moe.runner.moe_runner"
RUNNER_CLASS = "MoERunner"
RUNNER_METHOD = "_apply_quant_method"
FLAG = "instruments"
MARK = "__moeperf_expert_load__"
GUARDED_ROUTERS = ("ZeroExpertRouter",)
"""Routers whose ids may fall outside [0, num_experts) (zero experts; -1 padding rows): counted in the spare column."""

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def layer_number(prefix: str) -> int | None:
    """The decoder-layer index in a module prefix (``model.layers.12.mlp.experts`` -> 12), None without one."""
    m = _LAYER.search(prefix)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class MoeLayer:
    """One MoE layer as counted: its row in the buffer is its position in ``DeviceCounts.layers``."""

    number: int  # decoder-layer index from the prefix (model order when the prefix has none)
    name: str
    num_experts: int
    top_k: int
    guarded: bool


def find_moe_layers(model: Any) -> list[tuple[MoeLayer, Any]]:
    """(layer, its router) for every MoE layer of ``model``, in decoder-layer order.

    A MoE layer is a module with a ``layer_name`` and a ``router`` that has ``select_experts``. Layers are numbered
    from their prefix; if a prefix has no number, or two layers share one, all are numbered in model order.
    """
    found: list[tuple[str, Any, Any]] = []
    seen: set[int] = set()
    for module in model.modules():
        router = getattr(module, "router", None)
        name = getattr(module, "layer_name", None)
        if router is None or not isinstance(name, str) or not callable(getattr(router, ROUTER_METHOD, None)):
            continue
        if id(router) in seen:
            continue
        seen.add(id(router))
        found.append((name, module, router))
    numbers = [layer_number(name) for name, _, _ in found]
    if None in numbers or len(set(numbers)) != len(numbers):
        numbers = list(range(len(found)))
    layers = []
    for n, (name, module, router) in zip(numbers, found, strict=True):
        experts = getattr(router, "global_num_experts", None)
        if experts is None:
            experts = getattr(getattr(module, "moe_config", None), "num_experts", None)
        top_k = int(getattr(router, "top_k", 0) or 0)
        if experts is None:
            continue
        guarded = type(router).__name__ in GUARDED_ROUTERS or bool(getattr(router, "skip_padding", False))
        assert n is not None
        layers.append((MoeLayer(n, name, int(experts), top_k, guarded), router))
    return sorted(layers, key=lambda lr: lr[0].number)


class Slot:
    """What one router's call adds into: its row, and how to weight its rows."""

    __slots__ = ("counts", "row", "spare", "guarded", "masked")

    def __init__(self, counts: DeviceCounts, row: int, layer: MoeLayer) -> None:
        self.counts = counts
        self.row = counts.counts[row]  # a view: index_add_ into it writes the buffer
        self.spare = counts.counts.shape[1] - 1
        self.guarded = layer.guarded
        self.masked = layer.top_k == counts.top_k

    def add(self, topk_ids: torch.Tensor) -> None:
        ids = topk_ids.reshape(-1)
        if ids.dtype not in (torch.int32, torch.int64):  # index_add_ takes no other index type (e.g. a uint32 ask)
            ids = ids.to(torch.int64)
        n = ids.numel()
        if self.guarded:
            ids = torch.where((ids >= 0) & (ids < self.spare), ids, self.spare)
        c = self.counts
        if n <= c.capacity:
            src = (c.weights if self.masked else c.ones)[:n]  # a view: no allocation inside a captured graph
        else:  # more rows than max_num_batched_tokens (e.g. a DP dispatch): counted unweighted
            src = torch.ones(n, dtype=torch.int64, device=ids.device)
        self.row.index_add_(0, ids, src)


class DeviceCounts:
    """The per-process counting buffer on the layers' device, the per-step padding mask, and the router slots."""

    def __init__(self, layers: list[MoeLayer], device: Any, max_tokens: int, overlap: bool = False) -> None:
        if not layers:
            raise ValueError("no MoE layer to count")
        self.layers = layers
        self.device = torch.device(device)
        self.top_k = max(1, max(layer.top_k for layer in layers))
        width = max(layer.num_experts for layer in layers) + 1  # last column: ids out of range (guarded routers)
        self.counts = torch.zeros((len(layers), width), dtype=torch.int64, device=self.device)
        self.capacity = max(1, max_tokens) * self.top_k
        self.ones = torch.ones(self.capacity, dtype=torch.int64, device=self.device)
        self.weights = torch.ones(self.capacity, dtype=torch.int64, device=self.device)
        self._positions = torch.arange(self.capacity, dtype=torch.int64, device=self.device)
        self._real_tokens: int | None = None
        self.slots: dict[int, Slot] = {}
        # overlap: the side stream counts run on (CUDA only; on CPU there is nothing to overlap with)
        self.side: Any = torch.cuda.Stream(device=self.device) if overlap and self.device.type == "cuda" else None
        self._forked = False

    def bind(self, routers: Iterable[Any]) -> None:
        """Route every listed router's calls into its row (same order as ``layers``)."""
        for i, router in enumerate(routers):
            self.slots[id(router)] = Slot(self, i, self.layers[i])

    def set_real_tokens(self, n: int) -> None:
        """Weight 1 for the next steps' first ``n`` tokens, 0 for padding; one kernel, only when ``n`` changes."""
        if n == self._real_tokens:
            return
        self._real_tokens = n
        torch.lt(self._positions, n * self.top_k, out=self.weights)

    def reset(self) -> None:
        """Forget what start-up (profiling, warm-up, graph capture) routed: counts start with serving."""
        self.counts.zero_()

    def count(self, slot: Slot, topk_ids: torch.Tensor, joined_later: bool) -> None:
        """``slot.add`` on the side stream when overlapping and a ``join`` will follow in this layer, else inline.

        The side stream first waits for the current one (the ids and this step's padding mask are written there);
        the ids stay alive until the join, because the layer that routed them holds them until it returns.
        """
        if self.side is None or not joined_later:
            slot.add(topk_ids)
            return
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            slot.add(topk_ids)
        self._forked = True

    def join(self) -> None:
        """Make the current stream wait for the counts forked since the last join (none: nothing queued)."""
        if self._forked:
            torch.cuda.current_stream(self.device).wait_stream(self.side)
            self._forked = False


_ACTIVE: list[DeviceCounts | None] = [None]
"""The counts the wrapped ``select_experts`` adds into (one worker rank per process); None: not counting."""


_BIASES: list[LayerBiases | None] = [None]
"""Per-router logit biases the wrapped ``select_experts`` adds before top-k (``router_bias.py``); None: none."""


_IN_LAYER: list[int] = [0]
"""Depth of wrapped ``MoERunner._apply_quant_method`` calls in progress: above 0, a join follows the count."""


def activate(counts: DeviceCounts | None) -> None:
    _ACTIVE[0] = counts


def activate_biases(biases: LayerBiases | None) -> None:
    _BIASES[0] = biases


def _owner(module_name: str, class_name: str, method: str, vllm_version: str, import_module: ImportModule) -> Any:
    """The vLLM class that defines ``method`` itself; PatchTargetMissing (naming the version) when it is gone."""
    module = _import(FLAG, module_name, vllm_version, import_module)
    cls = getattr(module, class_name, None)
    if cls is None or not callable(cls.__dict__.get(method)):
        target = f"{module_name}:{class_name}.{method}"
        raise PatchTargetMissing(FLAG, target, vllm_version, f"{class_name} defines no {method}")
    return cls


def _replace(cls: Any, method: str, wrapper: Any) -> None:
    """Put ``wrapper`` in place of ``cls.method``, marked (so a second install is a no-op) and looking like it."""
    original = cls.__dict__[method]
    setattr(wrapper, MARK, True)
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    setattr(cls, method, wrapper)


def install_router_hook(vllm_version: str, import_module: ImportModule = importlib.import_module) -> str:
    """Wrap ``FusedMoERouter.select_experts`` so the active counts see every routing (and the router bias, if
    any, is added to its logits first); idempotent.

    Raises PatchTargetMissing (naming the vLLM version) when the class or method is gone.
    """
    cls = _owner(ROUTER_MODULE, ROUTER_CLASS, ROUTER_METHOD, vllm_version, import_module)
    target = f"{ROUTER_MODULE}:{ROUTER_CLASS}.{ROUTER_METHOD}"
    select = cls.__dict__[ROUTER_METHOD]
    if getattr(select, MARK, False):
        return target
    compiling = torch.compiler.is_compiling

    def select_experts(self: Any, *args: Any, **kwargs: Any) -> Any:
        biases = _BIASES[0]
        if biases is not None:  # (hidden_states, router_logits, ...) in both versions, by position or name
            if "router_logits" in kwargs:
                kwargs["router_logits"] = biases.apply(self, kwargs["router_logits"])
            elif len(args) >= 2:
                args = (args[0], biases.apply(self, args[1]), *args[2:])
        out = select(self, *args, **kwargs)
        counts = _ACTIVE[0]
        if counts is not None and not compiling():
            slot = counts.slots.get(id(self))
            if slot is not None:
                counts.count(slot, out[1], joined_later=_IN_LAYER[0] > 0)
        return out

    _replace(cls, ROUTER_METHOD, select_experts)
    return target


def install_runner_join(vllm_version: str, import_module: ImportModule = importlib.import_module) -> str:
    """Wrap ``MoERunner._apply_quant_method`` so that counts forked on the side stream inside a MoE layer are
    joined before the layer returns (overlap mode); idempotent.

    Raises PatchTargetMissing (naming the vLLM version) when the class or method is gone.
    """
    cls = _owner(RUNNER_MODULE, RUNNER_CLASS, RUNNER_METHOD, vllm_version, import_module)
    target = f"{RUNNER_MODULE}:{RUNNER_CLASS}.{RUNNER_METHOD}"
    apply = cls.__dict__[RUNNER_METHOD]
    if getattr(apply, MARK, False):
        return target

    def apply_quant_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        _IN_LAYER[0] += 1
        try:
            return apply(self, *args, **kwargs)
        finally:
            _IN_LAYER[0] -= 1
            counts = _ACTIVE[0]
            if counts is not None:
                counts.join()

    _replace(cls, RUNNER_METHOD, apply_quant_method)
    return target
