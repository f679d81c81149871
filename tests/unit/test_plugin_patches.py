"""Patch logic: targets present are patched, targets absent raise a typed error naming vLLM and the flag."""

from __future__ import annotations

import types

import pytest
import triton
import triton.language as tl

from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.patches import (
    FUSED_MOE_BATCH_ARGS,
    FUSED_MOE_KERNEL,
    MISSING_SUFFIX,
    PatchTargetMissing,
    apply_flags,
    patch_no_respecialize,
    patch_swap_ab,
    verify_moe_backend,
)


@triton.jit
def _toy_kernel(x_ptr, EM, num_valid_tokens, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, EM + num_valid_tokens)


def _modules(**mods: types.ModuleType):
    def import_module(name: str) -> types.ModuleType:
        if name not in mods:
            raise ImportError(f"No module named {name!r}")
        return mods[name]

    return import_module


def _fake_vllm() -> types.ModuleType:
    m = types.ModuleType("fake.fused_moe")
    m.enable_swap_ab = lambda block_m, block_n: block_m < 64 <= block_n  # type: ignore[attr-defined]
    m.fused_moe_kernel = _toy_kernel  # type: ignore[attr-defined]
    return m


def test_swap_ab_forced_at_the_call_site() -> None:
    m = _fake_vllm()
    imp = _modules(**{"fake.fused_moe": m})
    done = patch_swap_ab(False, "9.9.9", call_sites=("fake.fused_moe",), import_module=imp)
    assert done == ["fake.fused_moe:enable_swap_ab"]
    assert m.enable_swap_ab(16, 128) is False
    patch_swap_ab(True, "9.9.9", call_sites=("fake.fused_moe",), import_module=_modules(**{"fake.fused_moe": m}))
    assert m.enable_swap_ab(128, 16) is True


def test_swap_ab_missing_name_names_version_and_flag() -> None:
    m = types.ModuleType("fake.fused_moe")
    with pytest.raises(PatchTargetMissing) as e:
        patch_swap_ab(True, "0.26.1", call_sites=("fake.fused_moe",), import_module=_modules(**{"fake.fused_moe": m}))
    assert "0.26.1" in str(e.value) and "'swap_ab'" in str(e.value) and "enable_swap_ab" in str(e.value)
    assert e.value.flag == "swap_ab" and e.value.vllm_version == "0.26.1"


def test_swap_ab_missing_module_is_the_same_typed_error() -> None:
    with pytest.raises(PatchTargetMissing, match="0.26.1"):
        patch_swap_ab(True, "0.26.1", call_sites=("gone.module",), import_module=_modules())


def test_no_respecialize_marks_the_batch_arguments() -> None:
    fresh = triton.jit(_toy_kernel.fn)
    m = types.ModuleType("fake.k")
    m.k = fresh  # type: ignore[attr-defined]
    patch_no_respecialize("fake.k:k", ["EM", "num_valid_tokens"], "9.9.9", import_module=_modules(**{"fake.k": m}))
    by_name = {p.name: p for p in fresh.params}
    assert by_name["EM"].do_not_specialize and by_name["num_valid_tokens"].do_not_specialize
    assert by_name["EM"].do_not_specialize_on_alignment
    assert not by_name["x_ptr"].do_not_specialize
    assert set(fresh.do_not_specialize) >= {"EM", "num_valid_tokens"}


def test_no_respecialize_missing_argument_or_kernel() -> None:
    m = types.ModuleType("fake.k")
    m.k = triton.jit(_toy_kernel.fn)  # type: ignore[attr-defined]
    imp = _modules(**{"fake.k": m})
    with pytest.raises(PatchTargetMissing, match=r"no argument\(s\) \['M'\]"):
        patch_no_respecialize("fake.k:k", ["M"], "0.26.0", import_module=imp)
    with pytest.raises(PatchTargetMissing, match="no Triton kernel 'nope'.*0.26.0|0.26.0.*no Triton kernel 'nope'"):
        patch_no_respecialize("fake.k:nope", ["EM"], "0.26.0", import_module=imp)
    with pytest.raises(PatchTargetMissing, match="constexpr"):
        patch_no_respecialize("fake.k:k", ["BLOCK"], "0.26.0", import_module=imp)


def test_moe_backend_must_match_the_engine_config() -> None:
    verify_moe_backend("triton", "triton", "0.26.0")
    with pytest.raises(PatchTargetMissing, match="flashinfer_cutlass"):
        verify_moe_backend("triton", "flashinfer_cutlass", "0.26.0")
    with pytest.raises(PatchTargetMissing, match="no moe_backend"):
        verify_moe_backend("triton", None, "0.26.0")


def test_cpu_reports_not_applicable_and_touches_nothing() -> None:
    def no_import(name: str) -> types.ModuleType:
        raise AssertionError(f"imported {name} on CPU")

    flags = OptimizationFlags(swap_ab=True, moe_backend="triton", no_respecialize=True)
    status = apply_flags(flags, on_gpu=False, vllm_version="0.32.0", import_module=no_import)
    assert status == {s: "not_applicable_cpu" for s in ("swap_ab", "moe_backend", "no_respecialize")}
    baseline = apply_flags(OptimizationFlags(), on_gpu=False, vllm_version="0.32.0", import_module=no_import)
    assert set(baseline.values()) == {"vllm_default"}


def test_targets_exist_in_the_installed_vllm() -> None:
    """vLLM installed here still has what the patches act on (the check every GPU engine start repeats)."""
    pytest.importorskip("vllm")
    import inspect

    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    original = fm.enable_swap_ab
    try:
        assert patch_swap_ab(False, "0.32.0") == ["vllm.model_executor.layers.fused_moe.fused_moe:enable_swap_ab"]
        assert fm.enable_swap_ab(16, 128) is False
    finally:
        fm.enable_swap_ab = original
    kernel = fm.fused_moe_kernel
    fn = getattr(kernel, "fn", kernel)
    assert {"EM", "num_valid_tokens"} <= set(inspect.signature(fn).parameters)
    if not hasattr(kernel, "params"):  # vLLM's CPU build replaces triton.jit by a no-op decorator
        with pytest.raises(PatchTargetMissing, match="not a Triton JIT kernel"):
            patch_no_respecialize(FUSED_MOE_KERNEL, list(FUSED_MOE_BATCH_ARGS), "0.32.0")


@pytest.mark.parametrize("flag", ["swap_ab", "no_respecialize", "moe_backend"])
def test_test_only_missing_target_stops_with_the_flag_named(flag: str) -> None:
    m = _fake_vllm()
    flags = OptimizationFlags(swap_ab=True, moe_backend="triton", no_respecialize=True)
    imp = _modules(**{"vllm.model_executor.layers.fused_moe.fused_moe": m})
    with pytest.raises(PatchTargetMissing) as e:
        apply_flags(flags, on_gpu=True, vllm_version="0.26.0", engine_moe_backend="triton", missing_target=flag,
                    import_module=imp)  # fmt: skip
    assert e.value.flag == flag and "vLLM 0.26.0" in str(e.value)
    assert flag == "moe_backend" or MISSING_SUFFIX in e.value.target
