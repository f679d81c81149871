"""The arm's flags applied inside a vLLM worker, each checked against the installed vLLM.

Swap-AB and re-specialisation have no vLLM switch, so they are patches; a patch whose target is
gone (renamed, moved, different signature in another vLLM release) must stop the engine, because a
silently skipped patch turns an A/B test into an A/A test. On vLLM's CPU build the targets are never
run at all, so there the flags are reported as not applicable instead.

Statuses reported per flag (the ``*_status`` labels of ``moeperf_plugin_info``):
``applied`` (patched / verified in the engine config), ``vllm_default`` (the flag asks for nothing),
``not_applicable_cpu`` (CPU build: the kernel the flag acts on never runs).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from moe_opt.flags import SWITCHES, FlagStatus, OptimizationFlags

logger = logging.getLogger(__name__)

CPU_NOT_APPLIED = (
    "vLLM's CPU build runs MoE in its own CPU kernels: no Triton fused_moe_kernel (vLLM disables Triton), "
    "no FP8 MoE backends, no Triton JIT"
)
DEFAULTS_ONLY = "the arm asks for vLLM's defaults only"

SWAP_AB_NAME = "enable_swap_ab"
SWAP_AB_CALL_SITES = ("vllm.model_executor.layers.fused_moe.fused_moe",)
"""Modules that call ``enable_swap_ab`` by name (imported with ``from ... import``): patched there."""

FUSED_MOE_KERNEL = "vllm.model_executor.layers.fused_moe.fused_moe:fused_moe_kernel"
FUSED_MOE_BATCH_ARGS = ("EM", "num_valid_tokens")
"""The arguments of vLLM's fused_moe_kernel that change with the batch and are integer-specialised."""

MISSING_SUFFIX = "__moeperf_test_missing"


class PatchTargetMissing(RuntimeError):
    """The installed vLLM lacks what a flag's patch acts on: the engine must not start."""

    def __init__(self, flag: str, target: str, vllm_version: str, detail: str) -> None:
        self.flag, self.target, self.vllm_version = flag, target, vllm_version
        super().__init__(
            f"moeperf: flag {flag!r} cannot be applied on vLLM {vllm_version}: {detail} (target {target}). "
            "Refusing to start the engine rather than run this arm without its optimization."
        )


def installed_vllm_version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - the version is only used in messages
        return "unknown"


ImportModule = Callable[[str], Any]


def _import(flag: str, module: str, version: str, import_module: ImportModule) -> Any:
    try:
        return import_module(module)
    except ImportError as e:
        raise PatchTargetMissing(flag, module, version, f"module {module} cannot be imported ({e})") from e


def patch_swap_ab(
    forced: bool,
    vllm_version: str,
    call_sites: tuple[str, ...] = SWAP_AB_CALL_SITES,
    name: str = SWAP_AB_NAME,
    import_module: ImportModule = importlib.import_module,
) -> list[str]:
    """Replace ``enable_swap_ab`` where vLLM calls it by a function returning ``forced``.

    The decision inputs (BLOCK_M, BLOCK_N) are ignored on purpose: the flag forces the kernel variant.
    Returns the patched ``module:name`` targets.
    """
    patched = []
    for mod_name in call_sites:
        module = _import("swap_ab", mod_name, vllm_version, import_module)
        original = getattr(module, name, None)
        if not callable(original):
            raise PatchTargetMissing(
                "swap_ab", f"{mod_name}:{name}", vllm_version, f"{mod_name} has no callable {name!r}"
            )
        base = getattr(original, "__moeperf_original__", original)

        def forced_swap_ab(*args: Any, **kwargs: Any) -> bool:
            return forced

        forced_swap_ab.__moeperf_original__ = base  # type: ignore[attr-defined]
        setattr(module, name, forced_swap_ab)
        patched.append(f"{mod_name}:{name}")
    return patched


def _jit_function(obj: Any) -> Any:
    """The Triton JITFunction under autotune/heuristics wrappers (they keep it in ``.fn``)."""
    seen = 0
    while obj is not None and not hasattr(obj, "params") and seen < 8:
        obj = getattr(obj, "fn", None)
        seen += 1
    return obj if obj is not None and hasattr(obj, "params") else None


def patch_no_respecialize(
    target: str,
    args: tuple[str, ...] | list[str],
    vllm_version: str,
    flag: str = "no_respecialize",
    import_module: ImportModule = importlib.import_module,
) -> str:
    """Mark ``args`` of the Triton kernel ``module:attr`` do_not_specialize (value and alignment).

    Triton builds its argument binder lazily per device from ``params``, so setting the flags on the
    params before the first launch is equivalent to ``@triton.jit(do_not_specialize=...)``; binders
    already built are dropped so the change also holds if the kernel ran before.
    """
    mod_name, _, attr = target.partition(":")
    module = _import(flag, mod_name, vllm_version, import_module)
    obj = getattr(module, attr, None)
    if obj is None:
        raise PatchTargetMissing(flag, target, vllm_version, f"{mod_name} has no Triton kernel {attr!r}")
    jit = _jit_function(obj)
    if jit is None:
        raise PatchTargetMissing(
            flag, target, vllm_version, f"{attr} is not a Triton JIT kernel here (is vLLM's Triton disabled?)"
        )
    by_name = {p.name: p for p in jit.params}
    missing = [a for a in args if a not in by_name]
    if missing:
        raise PatchTargetMissing(
            flag, target, vllm_version, f"kernel {attr} has no argument(s) {missing} (has {sorted(by_name)})"
        )
    constexpr = [a for a in args if getattr(by_name[a], "is_constexpr", False)]
    if constexpr:
        raise PatchTargetMissing(
            flag, target, vllm_version, f"argument(s) {constexpr} of {attr} are tl.constexpr: cannot stop specialising"
        )
    for a in args:
        by_name[a].do_not_specialize = True
        by_name[a].do_not_specialize_on_alignment = True
    dns = list(getattr(jit, "do_not_specialize", []) or [])
    jit.do_not_specialize = dns + [a for a in args if a not in dns]
    caches = getattr(jit, "device_caches", None)
    if caches is not None and hasattr(caches, "clear"):
        caches.clear()
    return target


def verify_moe_backend(requested: str, engine_backend: Any, vllm_version: str) -> None:
    """``--moe-backend`` is a CLI flag: check that the engine config really carries it."""
    if engine_backend is None:
        raise PatchTargetMissing(
            "moe_backend", "vllm_config.kernel_config.moe_backend", vllm_version, "the engine config has no moe_backend"
        )
    if str(engine_backend) != requested:
        raise PatchTargetMissing(
            "moe_backend",
            "vllm_config.kernel_config.moe_backend",
            vllm_version,
            f"engine runs moe_backend={engine_backend!r} but the arm asks for {requested!r} "
            "(was --moe-backend passed to the server?)",
        )


def apply_flags(
    flags: OptimizationFlags,
    *,
    on_gpu: bool,
    vllm_version: str,
    engine_moe_backend: Any = None,
    extra_no_respecialize: dict[str, list[str]] | None = None,
    missing_target: str | None = None,
    import_module: ImportModule = importlib.import_module,
) -> dict[str, FlagStatus]:
    """Apply every flag of the arm; returns each flag's status. Raises PatchTargetMissing on GPU.

    ``missing_target`` (test only) names a flag whose target is replaced by one that cannot exist, to
    exercise the refusal path end to end.
    """
    swap_ab, backend, no_respec = flags.swap_ab, flags.moe_backend, flags.no_respecialize
    status: dict[str, FlagStatus] = {s: "applied" if flags.asks_for(s) else "vllm_default" for s in SWITCHES}
    if not on_gpu:
        for k, v in status.items():
            if v == "applied":
                status[k] = "not_applicable_cpu"
        return status

    def suffix(flag: str) -> str:
        return MISSING_SUFFIX if missing_target == flag else ""

    if swap_ab is not None:
        patch_swap_ab(swap_ab, vllm_version, name=SWAP_AB_NAME + suffix("swap_ab"), import_module=import_module)
    if backend != "auto":
        verify_moe_backend(backend, None if suffix("moe_backend") else engine_moe_backend, vllm_version)
    if no_respec:
        targets: dict[str, list[str]] = {FUSED_MOE_KERNEL + suffix("no_respecialize"): list(FUSED_MOE_BATCH_ARGS)}
        targets.update(extra_no_respecialize or {})
        for target, args in targets.items():
            patch_no_respecialize(target, args, vllm_version, import_module=import_module)
    logger.info("moeperf: flags applied on vLLM %s: %s", vllm_version, status)
    return status


def not_applied_reason(status: dict[str, FlagStatus], on_gpu: bool) -> str | None:
    """Why a worker applied no flag at all (None when it applied one): what its observation must say instead."""
    if any(v == "applied" for v in status.values()):
        return None
    return DEFAULTS_ONLY if on_gpu else CPU_NOT_APPLIED
