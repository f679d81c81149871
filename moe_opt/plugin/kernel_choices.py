"""What vLLM's MoE path chose inside a worker, observed where it chooses: per launch, per MoE shape, per layer.

A flag that was patched in proves only that a function was replaced; it does not prove that the kernel ran
with it. vLLM decides Swap-AB per ``fused_moe_kernel`` launch, and its tile config per MoE shape from a tuned
JSON file or, when it finds none, from a built-in heuristic: either decision can make an arm's optimization a
no-op (e.g. a tuned config with BLOCK_SIZE_M >= 64 turns Swap-AB off in vLLM's heuristic). So the plugin counts
the decisions themselves, whether or not the arm forces them:

- launches of ``fused_moe_kernel`` by (SWAP_AB it was launched with, power-of-two bucket of the token count M);
- lookups of the tile config by (file name vLLM looked for, file it loaded or ``default``);
- per MoE layer, the backend and experts class vLLM's oracle picked (read once, after the model is loaded).

Targets, read in vLLM 0.32.0 (``vllm/model_executor/layers/fused_moe/fused_moe.py``):

- ``invoke_fused_moe_triton_kernel(A, B, C, ...)``: the one launcher of ``fused_moe_kernel``; it sets
  ``SWAP_AB = enable_swap_ab(BLOCK_SIZE_M, BLOCK_SIZE_N)`` for FP8 w8a8 and ``SWAP_AB = False`` otherwise. It is
  called by module-global name from ``dispatch_fused_moe_kernel`` in that module and, imported by name, from
  ``experts/triton_moe.py`` (TritonExperts): wrapped in both modules.
- ``enable_swap_ab``: the decision, imported by name from ``fused_moe/utils.py`` into ``fused_moe.py``; wrapped
  there, on top of the arm's forced decision (``patches.patch_swap_ab``) when there is one, so what is counted
  is what the launch got. A launch during which it was not consulted ran with SWAP_AB False (vLLM's else).
- ``get_moe_configs(E, N, dtype, block_n, block_k)``: lru-cached tuned-config lookup, called by module-global
  name from ``try_get_optimal_moe_config`` (every Triton MoE launch path). Which file it loaded is resolved the
  way it resolves it (``VLLM_TUNED_CONFIG_FOLDER`` first, then vLLM's ``configs/`` folder, file name from
  ``get_config_file_name``), once per shape; ``None`` returned means the default config.

Each target is checked when installed: a missing one raises PatchTargetMissing naming the vLLM version, like the
flags' patches. Hot-path cost per launch: one dict lookup and one buffered counter increment (a lock and an add).
Limit: host-side only. With CUDA graphs a captured batch size's launches run Python once, at capture (before
the engine is healthy); replays are not counted. Counts while serving therefore cover the launches that ran
eagerly (prefill and mixed steps, batches beyond the largest captured size, ``--enforce-eager``).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from moe_opt.plugin.patches import SWAP_AB_NAME, ImportModule, PatchTargetMissing, _import

logger = logging.getLogger(__name__)

FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe"
LAUNCHER = "invoke_fused_moe_triton_kernel"
LAUNCHER_CALL_SITES = (FUSED_MOE, "vllm.model_executor.layers.fused_moe.experts.triton_moe")
"""Modules that call the launcher by name; each holds its own reference, so each is wrapped."""
CONFIG_LOOKUP = "get_moe_configs"
CONFIG_FILE_NAME = "get_config_file_name"
CONFIG_LOOKUP_ARGS = ("E", "N", "dtype", "block_n", "block_k")
TUNED_FOLDER_ENV = "VLLM_TUNED_CONFIG_FOLDER"
DEFAULT_SOURCE = "default"
UNKNOWN_SOURCE = "unknown"
FLAG = "instruments"
MARK = "__moeperf_observed__"

OnLaunch = Callable[[bool, int], None]
"""(SWAP_AB of the launch, batch bucket)."""
OnConfigLookup = Callable[[str, str], None]
"""(config file name vLLM looked for, path it loaded or ``default``)."""


def batch_bucket(m: int) -> int:
    """The power of two at or above ``m`` (0 for an empty launch): few label values, batch regimes kept apart."""
    return 0 if m <= 0 else 1 << (m - 1).bit_length()


def _compile_probe() -> Callable[[], bool]:
    try:
        import torch
    except ImportError:
        return lambda: False
    return torch.compiler.is_compiling


def _callable(module: Any, mod_name: str, name: str, version: str) -> Any:
    fn = getattr(module, name, None)
    if not callable(fn):
        raise PatchTargetMissing(FLAG, f"{mod_name}:{name}", version, f"{mod_name} has no callable {name!r}")
    return fn


def _parameters(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def install_launch_counter(
    on_launch: OnLaunch,
    vllm_version: str,
    import_module: ImportModule = importlib.import_module,
    call_sites: tuple[str, ...] = LAUNCHER_CALL_SITES,
    decider_module: str = FUSED_MOE,
) -> list[str]:
    """Count every launch through ``invoke_fused_moe_triton_kernel`` with the SWAP_AB it decided; idempotent.

    Install after the flags' patches: the decision wrapped is whatever ``enable_swap_ab`` is then (vLLM's own
    or the arm's forced one). Returns the ``module:name`` targets wrapped.
    """
    compiling = _compile_probe()
    decided = [False]
    module = _import(FLAG, decider_module, vllm_version, import_module)
    decide = _callable(module, decider_module, SWAP_AB_NAME, vllm_version)
    wrapped: list[str] = []
    if not getattr(decide, MARK, False):

        def observed_decision(*args: Any, **kwargs: Any) -> Any:
            d = decide(*args, **kwargs)
            if not compiling():  # a traced call records nothing; the launch it belongs to is not counted either
                decided[0] = bool(d)
            return d

        setattr(observed_decision, MARK, True)
        observed_decision.__wrapped__ = decide  # type: ignore[attr-defined]
        setattr(module, SWAP_AB_NAME, observed_decision)
        wrapped.append(f"{decider_module}:{SWAP_AB_NAME}")
    for mod_name in call_sites:
        site = _import(FLAG, mod_name, vllm_version, import_module)
        launch = _callable(site, mod_name, LAUNCHER, vllm_version)
        if getattr(launch, MARK, False):
            continue
        params = _parameters(launch)
        if not params or params[0] != "A":
            raise PatchTargetMissing(
                FLAG, f"{mod_name}:{LAUNCHER}", vllm_version, f"{LAUNCHER} does not take the activations A first"
            )

        setattr(site, LAUNCHER, _counted(launch, decided, on_launch, compiling))
        wrapped.append(f"{mod_name}:{LAUNCHER}")
    return wrapped


def _counted(launch: Any, decided: list[bool], on_launch: OnLaunch, compiling: Callable[[], bool]) -> Any:
    def counted_launch(*args: Any, **kwargs: Any) -> Any:
        if compiling():
            return launch(*args, **kwargs)
        decided[0] = False  # stays False when vLLM does not consult enable_swap_ab (not FP8 w8a8)
        out = launch(*args, **kwargs)
        a = args[0] if args else kwargs["A"]
        on_launch(decided[0], batch_bucket(int(a.shape[0])))
        return out

    setattr(counted_launch, MARK, True)
    counted_launch.__wrapped__ = launch  # type: ignore[attr-defined]
    return counted_launch


def _tuned_folder(module: Any) -> str | None:
    envs = getattr(module, "envs", None)
    folder = getattr(envs, TUNED_FOLDER_ENV, None) if envs is not None else os.environ.get(TUNED_FOLDER_ENV)
    return str(folder) if folder else None


def config_source(module: Any, file_name: Callable[..., str], args: dict[str, Any], configs: Any) -> tuple[str, str]:
    """(file name vLLM looked for, file it loaded / ``default`` / ``unknown``), resolved as get_moe_configs does."""
    block_n, block_k = args.get("block_n"), args.get("block_k")
    block_shape = [block_n, block_k] if block_n and block_k else None
    name = str(file_name(args["E"], args["N"], args["dtype"], block_shape))
    if configs is None:
        return name, DEFAULT_SOURCE
    folders = [f for f in (_tuned_folder(module),) if f]
    folders.append(os.path.join(os.path.dirname(os.path.realpath(module.__file__)), "configs"))
    for folder in folders:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return name, path
    return name, UNKNOWN_SOURCE  # vLLM loaded a file from somewhere moeperf does not know: says so, not a guess


def install_config_sources(
    on_lookup: OnConfigLookup,
    vllm_version: str,
    import_module: ImportModule = importlib.import_module,
    module_name: str = FUSED_MOE,
) -> str:
    """Report every tile-config lookup with the file that served it; the file is resolved once per shape."""
    module = _import(FLAG, module_name, vllm_version, import_module)
    lookup = _callable(module, module_name, CONFIG_LOOKUP, vllm_version)
    file_name = _callable(module, module_name, CONFIG_FILE_NAME, vllm_version)
    target = f"{module_name}:{CONFIG_LOOKUP}"
    if getattr(lookup, MARK, False):
        return target
    if tuple(_parameters(lookup)[: len(CONFIG_LOOKUP_ARGS)]) != CONFIG_LOOKUP_ARGS:
        detail = f"{CONFIG_LOOKUP} does not take {CONFIG_LOOKUP_ARGS} (has {_parameters(lookup)})"
        raise PatchTargetMissing(FLAG, target, vllm_version, detail)
    if not hasattr(module, "__file__"):
        raise PatchTargetMissing(FLAG, target, vllm_version, f"{module_name} has no __file__ to find its configs/")
    signature = inspect.signature(lookup)
    compiling = _compile_probe()
    sources: dict[Any, tuple[str, str]] = {}

    def observed_lookup(*args: Any, **kwargs: Any) -> Any:
        configs = lookup(*args, **kwargs)
        if compiling():
            return configs
        key = (args, tuple(kwargs.items()))
        hit = sources.get(key)
        if hit is None:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            hit = sources[key] = config_source(module, file_name, dict(bound.arguments), configs)
            logger.info("moeperf: MoE config %s from %s", *hit)
        on_lookup(*hit)
        return configs

    setattr(observed_lookup, MARK, True)
    observed_lookup.__wrapped__ = lookup  # type: ignore[attr-defined]
    for attr in ("cache_clear", "cache_info"):  # lru_cache's API, for whoever calls it on vLLM's function
        if hasattr(lookup, attr):
            setattr(observed_lookup, attr, getattr(lookup, attr))
    setattr(module, CONFIG_LOOKUP, observed_lookup)
    return target


def _backend_name(quant_method: Any) -> str:
    """The oracle's choice on a MoE quant method: its ``*_backend`` enum (unquantized_backend, fp8_backend...)."""
    for attr, value in vars(quant_method).items():
        if attr.endswith("_backend") and hasattr(value, "value"):
            return str(value.value)
    return UNKNOWN_SOURCE


def moe_layer_backends(model: Any) -> Counter[tuple[str, str]]:
    """(backend, experts class) -> number of MoE layers: what vLLM's oracle picked for each layer of ``model``.

    vLLM 0.32 keeps the choice on each MoE layer's quant method (``select_*_moe_backend`` returns the backend enum
    and the experts class, stored as ``<scheme>_backend`` and ``experts_cls``). Read-only: nothing is patched.
    """
    found: Counter[tuple[str, str]] = Counter()
    modules = getattr(model, "modules", None)
    if modules is None:
        return found
    for module in modules():
        qm = getattr(module, "quant_method", None)
        experts = getattr(qm, "experts_cls", None) if qm is not None else None
        if experts is None:
            continue
        found[(_backend_name(qm), getattr(experts, "__name__", str(experts)))] += 1
    return found
