"""vLLM's own Triton fused-MoE path and tuned-config lookups, imported from the installed vLLM, never copied.

Timing vLLM's kernel through its own ``fused_experts`` (with ``override_config``, as vLLM's
``benchmarks/kernels/benchmark_moe.py`` does) measures exactly what an engine launches: the same
``moe_align_block_size`` or naive block assignment, activation quantisation, both GEMMs with one config, and the
Swap-AB decision ``invoke_fused_moe_triton_kernel`` makes per launch. The config vLLM would use without a tuned
folder comes from its own ``try_get_optimal_moe_config`` (shipped ``configs/`` file, else ``get_default_config``)
with ``VLLM_TUNED_CONFIG_FOLDER`` unset, so the speedup is against what the engine really runs otherwise.

Names used, in vLLM 0.26 ``model_executor/layers/fused_moe/fused_moe.py`` (and the same in 0.32):
``get_config_file_name``, ``get_moe_configs`` (lru-cached, reads ``envs.VLLM_TUNED_CONFIG_FOLDER`` first),
``try_get_optimal_moe_config``, ``fused_experts``, ``enable_swap_ab``; ``fused_moe.override_config`` and
``fused_moe.config.fp8_w8a8_moe_quant_config``. The lookups run on vLLM's CPU build too (its file names then say
``device_name=cpu``); only ``VllmMoe`` and the calls ``fused_experts_call`` makes need CUDA.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from moe_opt.flags import TUNED_CONFIG_ENV_VAR
from moe_opt.tune.shape import MoeShape

FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe"
MOE_PACKAGE = "vllm.model_executor.layers.fused_moe"


def fused_moe_module() -> Any:
    return importlib.import_module(FUSED_MOE)


def vllm_version() -> str:
    return str(getattr(importlib.import_module("vllm"), "__version__", "unknown"))


def config_file_name(shape: MoeShape) -> str:
    """vLLM's file name for the shape on this machine's device (``get_config_file_name``)."""
    fm = fused_moe_module()
    return str(fm.get_config_file_name(shape.experts, shape.intermediate_per_rank, shape.vllm_dtype, shape.block_list))


def weight_shapes(shape: MoeShape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(w13, w2) of one rank as vLLM holds them: (E, 2 * I/tp, H) and (E, H, I/tp)."""
    n = shape.intermediate_per_rank
    return (shape.experts, 2 * n, shape.hidden), (shape.experts, shape.hidden, n)


@contextlib.contextmanager
def tuned_folder(folder: str | None) -> Iterator[None]:
    """vLLM's lookups with ``VLLM_TUNED_CONFIG_FOLDER`` = ``folder`` (None: unset), restored afterwards.

    ``get_moe_configs`` is lru-cached and ``vllm.envs`` may cache variables once an engine enabled it, so both are
    cleared on the way in and out: a lookup never answers from another folder's file.
    """
    fm = fused_moe_module()
    envs = importlib.import_module("vllm.envs")
    old = os.environ.get(TUNED_CONFIG_ENV_VAR)

    def reset() -> None:
        if hasattr(envs, "disable_envs_cache"):
            envs.disable_envs_cache()
        fm.get_moe_configs.cache_clear()

    if folder is None:
        os.environ.pop(TUNED_CONFIG_ENV_VAR, None)
    else:
        os.environ[TUNED_CONFIG_ENV_VAR] = folder
    reset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(TUNED_CONFIG_ENV_VAR, None)
        else:
            os.environ[TUNED_CONFIG_ENV_VAR] = old
        reset()


def tuned_table(shape: MoeShape, folder: str | None) -> dict[int, Any] | None:
    """What vLLM's ``get_moe_configs`` returns for the shape with ``folder`` as its tuned folder."""
    fm = fused_moe_module()
    block_n, block_k = shape.block_shape or (0, 0)
    with tuned_folder(folder):
        table = fm.get_moe_configs(
            shape.experts, shape.intermediate_per_rank, shape.vllm_dtype, block_n or None, block_k or None
        )
    return None if table is None else dict(table)


def vllm_config(shape: MoeShape, batch: int, folder: str | None = None) -> dict[str, int]:
    """The config vLLM launches for ``batch`` tokens with ``folder`` as its tuned folder (None: none):
    ``try_get_optimal_moe_config``, its nearest tuned bucket or its default heuristic."""
    fm = fused_moe_module()
    w13, w2 = weight_shapes(shape)
    with tuned_folder(folder):
        config = fm.try_get_optimal_moe_config(w13, w2, shape.top_k, shape.vllm_dtype, batch, shape.block_list)
    return dict(config)


def swap_ab(shape: MoeShape, config: Mapping[str, int]) -> bool:
    """Whether vLLM launches this config with SWAP_AB on this device: only FP8 w8a8 consults ``enable_swap_ab``
    (vLLM 0.26 ``invoke_fused_moe_triton_kernel``); SM90 and BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64."""
    if shape.dtype != "fp8_w8a8":
        return False
    decide = getattr(fused_moe_module(), "enable_swap_ab", None)
    return bool(decide(config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"])) if decide is not None else False


def fp8_quant_config(
    w13_scale: Any, w2_scale: Any, a1_scale: Any = None, a2_scale: Any = None, block_shape: list[int] | None = None
) -> Any:
    """vLLM's FP8 w8a8 quant config for ``fused_experts``. Activation scales None: vLLM quantises activations
    dynamically, as for a dynamic-scale checkpoint; given: statically, as for a static-scale one (and as moe_opt's
    own per-tensor FP8 path always does), so a comparison with moe_opt can give both sides the same work."""
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

    return fp8_w8a8_moe_quant_config(
        w1_scale=w13_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale, block_shape=block_shape
    )


def fused_experts_call(
    x: Any,
    w13: Any,
    w2: Any,
    topk_weights: Any,
    topk_ids: Any,
    config: Mapping[str, int],
    quant_config: Any = None,
) -> Callable[[], object]:
    """A no-argument call of vLLM's own ``fused_experts`` that launches ``config`` (``override_config``, as vLLM's
    ``benchmark_moe.py`` does): the tuner and the side-by-side benchmark (``moe_opt.bench.vs_vllm``) time and capture
    exactly what an engine launches for that config, on weights they choose."""
    override = importlib.import_module(MOE_PACKAGE).override_config
    fused_experts = fused_moe_module().fused_experts
    chosen = dict(config)

    def call() -> object:
        with override(chosen):
            return fused_experts(x, w13, w2, topk_weights, topk_ids, quant_config=quant_config)

    return call


class VllmMoe:
    """One rank's MoE weights on the GPU and a call of vLLM's ``fused_experts`` with a chosen config.

    Weights are random (timing does not depend on values); FP8 weights get unit-range scales, per tensor or per
    block as the shape says, and activations are quantised dynamically by vLLM as in serving.
    """

    def __init__(self, shape: MoeShape, device: str = "cuda") -> None:
        import torch

        self.shape, self.device = shape, device
        fused_moe_module()  # no vLLM: fail here, before any weight is allocated
        w13_shape, w2_shape = weight_shapes(shape)
        gen = torch.Generator(device=device).manual_seed(0)
        w13 = torch.randn(w13_shape, device=device, dtype=torch.bfloat16, generator=gen) / 16
        w2 = torch.randn(w2_shape, device=device, dtype=torch.bfloat16, generator=gen) / 16
        self.quant_config: Any = None
        if shape.dtype == "fp8_w8a8":
            from vllm.platforms import current_platform

            fp8 = current_platform.fp8_dtype()
            w13, w2 = w13.to(fp8), w2.to(fp8)
            self.quant_config = fp8_quant_config(
                self._scales(w13_shape), self._scales(w2_shape), block_shape=shape.block_list
            )
        self.w13, self.w2 = w13, w2

    def _scales(self, weight_shape: tuple[int, int, int]) -> Any:
        import torch

        experts, n, k = weight_shape
        if self.shape.block_shape is None:
            return torch.full((experts,), 0.01, device=self.device, dtype=torch.float32)
        bn, bk = self.shape.block_shape
        return torch.full((experts, math.ceil(n / bn), math.ceil(k / bk)), 0.01, device=self.device)

    def runner(self, batch: int, routing: str, seed: int) -> Callable[[Mapping[str, int]], Callable[[], object]]:
        """For ``batch`` tokens routed by ``routing``: config -> a no-argument call of vLLM's fused_experts."""
        import torch

        from moe_opt.bench.routing_dist import sample_routing

        topk_weights, topk_ids = sample_routing(
            routing, batch, self.shape.experts, self.shape.top_k, seed=seed, device=self.device
        )
        x = torch.randn(batch, self.shape.hidden, device=self.device, dtype=torch.bfloat16) / 4

        def with_config(config: Mapping[str, int]) -> Callable[[], object]:
            return fused_experts_call(x, self.w13, self.w2, topk_weights, topk_ids, config, self.quant_config)

        return with_config
