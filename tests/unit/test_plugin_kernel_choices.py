"""Kernel-choice observers: Swap-AB per fused_moe_kernel launch, config source per MoE shape, backend per layer.

The launch path is GPU-only (vLLM's CPU build runs no Triton MoE kernel), so it is exercised on fake modules
that call their launcher and decider by module-global name, as vLLM's fused_moe.py does; the targets themselves
and the config lookup (plain Python) are checked on the installed vLLM.
"""

from __future__ import annotations

import enum
import json
import types
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.buffered import Buffer
from moe_opt.plugin.kernel_choices import (
    FUSED_MOE,
    LAUNCHER_CALL_SITES,
    batch_bucket,
    install_config_sources,
    install_launch_counter,
    moe_layer_backends,
)
from moe_opt.plugin.metrics import FUSED_MOE_LAUNCHES, MOE_CONFIG_LOOKUPS, Metrics
from moe_opt.plugin.patches import PatchTargetMissing, apply_flags
from moe_opt.plugin.rank import RankInstruments
from moe_opt.plugin.sync import CollectiveClock

FAKE_FUSED_MOE = """
def enable_swap_ab(BLOCK_SIZE_M, BLOCK_SIZE_N):
    return BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N

launched = []

def invoke_fused_moe_triton_kernel(A, B, C, config, use_fp8_w8a8):
    # as vLLM 0.32: only FP8 w8a8 consults the heuristic
    swap = enable_swap_ab(config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]) if use_fp8_w8a8 else False
    launched.append(swap)

def dispatch_fused_moe_kernel(A, config, use_fp8_w8a8):
    invoke_fused_moe_triton_kernel(A, None, None, config, use_fp8_w8a8)
"""


def _fake_vllm() -> tuple[types.ModuleType, types.ModuleType, dict[str, types.ModuleType]]:
    fm = types.ModuleType(FUSED_MOE)
    exec(FAKE_FUSED_MOE, fm.__dict__)  # functions whose globals are the module, like vLLM's
    tm = types.ModuleType(LAUNCHER_CALL_SITES[1])
    tm.invoke_fused_moe_triton_kernel = fm.invoke_fused_moe_triton_kernel  # type: ignore[attr-defined]  # from-import
    return fm, tm, {FUSED_MOE: fm, LAUNCHER_CALL_SITES[1]: tm}


def _modules(mods: dict[str, types.ModuleType]):
    def import_module(name: str) -> types.ModuleType:
        if name not in mods:
            raise ImportError(f"No module named {name!r}")
        return mods[name]

    return import_module


SMALL_M = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128}
LARGE_M = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128}


def test_buckets_are_powers_of_two_at_or_above_m() -> None:
    assert [batch_bucket(m) for m in (0, 1, 2, 3, 4, 5, 16, 17, 8192)] == [0, 1, 2, 4, 4, 8, 16, 32, 8192]


def test_every_launch_is_counted_with_the_swap_ab_it_ran_with() -> None:
    fm, tm, mods = _fake_vllm()
    seen: list[tuple[bool, int]] = []
    done = install_launch_counter(lambda s, b: seen.append((s, b)), "9.9.9", import_module=_modules(mods))
    assert done == [
        f"{FUSED_MOE}:enable_swap_ab",
        *(f"{m}:invoke_fused_moe_triton_kernel" for m in LAUNCHER_CALL_SITES),
    ]
    fm.dispatch_fused_moe_kernel(torch.empty(3, 8), SMALL_M, True)  # FP8, small BLOCK_M: vLLM swaps
    fm.dispatch_fused_moe_kernel(torch.empty(3, 8), LARGE_M, True)  # FP8, BLOCK_M 64: it does not
    tm.invoke_fused_moe_triton_kernel(torch.empty(17, 8), None, None, SMALL_M, False)  # bf16: never consulted
    fm.dispatch_fused_moe_kernel(torch.empty(17, 8), SMALL_M, True)  # the previous launch's False is not kept
    assert fm.launched == [True, False, False, True]
    assert seen == [(True, 4), (False, 4), (False, 32), (True, 32)]


def test_a_forced_swap_ab_is_what_gets_counted() -> None:
    fm, _, mods = _fake_vllm()
    flags = OptimizationFlags(swap_ab=False)
    apply_flags(flags, on_gpu=True, vllm_version="9.9.9", import_module=_modules(mods))  # hooks.py: flags first
    seen: list[tuple[bool, int]] = []
    install_launch_counter(lambda s, b: seen.append((s, b)), "9.9.9", import_module=_modules(mods))
    fm.dispatch_fused_moe_kernel(torch.empty(1, 8), SMALL_M, True)  # heuristic would swap; the arm says no
    assert fm.launched == [False] and seen == [(False, 1)]


def test_installing_twice_counts_once() -> None:
    fm, tm, mods = _fake_vllm()
    seen: list[tuple[bool, int]] = []
    install_launch_counter(lambda s, b: seen.append((s, b)), "9.9.9", import_module=_modules(mods))
    assert install_launch_counter(lambda s, b: seen.append((s, b)), "9.9.9", import_module=_modules(mods)) == []
    fm.dispatch_fused_moe_kernel(torch.empty(2, 8), SMALL_M, True)
    tm.invoke_fused_moe_triton_kernel(torch.empty(2, 8), None, None, SMALL_M, True)
    assert seen == [(True, 2), (True, 2)]


@pytest.mark.parametrize("remove", ["enable_swap_ab", "invoke_fused_moe_triton_kernel", "triton_moe"])
def test_a_missing_launch_target_names_vllm_and_the_target(remove: str) -> None:
    _, tm, mods = _fake_vllm()
    if remove == "triton_moe":
        del mods[LAUNCHER_CALL_SITES[1]]
    else:
        delattr(mods[FUSED_MOE] if remove == "enable_swap_ab" else tm, remove)
    with pytest.raises(PatchTargetMissing) as e:
        install_launch_counter(lambda s, b: None, "0.27.0", import_module=_modules(mods))
    assert "vLLM 0.27.0" in str(e.value) and e.value.flag == "instruments"
    assert (remove if remove != "triton_moe" else "experts.triton_moe") in e.value.target


def test_a_launcher_whose_first_argument_moved_is_refused() -> None:
    _, tm, mods = _fake_vllm()
    tm.invoke_fused_moe_triton_kernel = lambda B, A: None  # type: ignore[attr-defined]
    with pytest.raises(PatchTargetMissing, match="activations A first"):
        install_launch_counter(lambda s, b: None, "0.27.0", import_module=_modules(mods))


def test_launch_counts_reach_prometheus_per_rank_through_the_buffer() -> None:
    reg = CollectorRegistry()
    buf = Buffer()
    labels = {"engine": "e", "arm": "a", "node": "n", "rank": "1", "gpu": "3", "gpu_uuid": "GPU-x"}
    inst = RankInstruments(labels, 1, 2, Metrics(reg), CollectiveClock(), None, buffer=buf)
    for s, b in [(True, 16), (True, 16), (False, 256)]:
        inst.on_launch(s, b)
    inst.on_config_lookup("E=8,N=64.json", "default")
    assert set(_samples(reg, FUSED_MOE_LAUNCHES).values()) == {0.0}  # buffered until the flush
    buf.flush()
    assert _samples(reg, FUSED_MOE_LAUNCHES) == {
        frozenset({**labels, "swap_ab": "true", "bucket": "16"}.items()): 2.0,
        frozenset({**labels, "swap_ab": "false", "bucket": "256"}.items()): 1.0,
    }
    assert _samples(reg, MOE_CONFIG_LOOKUPS) == {
        frozenset({**labels, "config_file": "E=8,N=64.json", "source": "default"}.items()): 1.0
    }


def _samples(reg: CollectorRegistry, name: str) -> dict[frozenset, float]:
    return {
        frozenset(s.labels.items()): s.value
        for fam in text_string_to_metric_families(generate_latest(reg).decode())
        for s in fam.samples
        if s.name == name
    }


class _Backend(enum.Enum):
    TRITON = "TRITON"


class TritonExperts:
    pass


class _Method(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fp8_backend, self.experts_cls = _Backend.TRITON, TritonExperts


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant_method = _Method()


def test_moe_layer_backends_are_read_from_each_layers_quant_method() -> None:
    model = torch.nn.Sequential(_Layer(), torch.nn.Linear(2, 2), _Layer())
    assert dict(moe_layer_backends(model)) == {("TRITON", "TritonExperts"): 2}
    assert not moe_layer_backends(torch.nn.Linear(2, 2))


@pytest.fixture
def real_lookup(monkeypatch: pytest.MonkeyPatch):
    """vLLM's own get_moe_configs, observed, and restored (with its lru_cache emptied) afterwards."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    original = fm.get_moe_configs
    original.cache_clear()
    seen: list[tuple[str, str]] = []
    assert install_config_sources(lambda f, s: seen.append((f, s)), "0.32.0") == f"{FUSED_MOE}:get_moe_configs"
    yield fm, seen
    fm.get_moe_configs = original
    original.cache_clear()


def test_config_source_is_the_tuned_file_vllm_loaded_or_default(
    real_lookup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fm, seen = real_lookup
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tmp_path))
    name = fm.get_config_file_name(8, 64, "fp8_w8a8", [128, 128])
    (tmp_path / name).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}, "triton_version": "3.6.0"}))
    assert fm.get_moe_configs(8, 64, "fp8_w8a8", 128, 128) == {1: {"BLOCK_SIZE_M": 16}}  # vLLM's answer unchanged
    fm.get_moe_configs(8, 64, "fp8_w8a8", 128, 128)
    assert fm.get_moe_configs(8, 96, None) is None  # no file anywhere: vLLM's default config
    assert seen == [(name, str(tmp_path / name))] * 2 + [(fm.get_config_file_name(8, 96, None), "default")]
    assert fm.get_moe_configs.cache_info().hits >= 1  # lru_cache still in front of the file reads


def test_a_missing_config_lookup_names_vllm() -> None:
    m = types.ModuleType(FUSED_MOE)
    m.get_config_file_name = lambda E, N, dtype, block_shape=None: "x.json"  # type: ignore[attr-defined]
    with pytest.raises(PatchTargetMissing, match=r"vLLM 0\.27\.0.*get_moe_configs"):
        install_config_sources(lambda f, s: None, "0.27.0", import_module=_modules({FUSED_MOE: m}))
    m.get_moe_configs = lambda E, N: None  # type: ignore[attr-defined]
    with pytest.raises(PatchTargetMissing, match="does not take"):
        install_config_sources(lambda f, s: None, "0.27.0", import_module=_modules({FUSED_MOE: m}))


def test_the_launch_targets_exist_in_the_installed_vllm() -> None:
    """What the GPU path wraps is there on the installed vLLM (the check every engine start repeats)."""
    pytest.importorskip("vllm")
    import importlib

    mods = {name: importlib.import_module(name) for name in LAUNCHER_CALL_SITES}
    saved = {name: dict(vars(m)) for name, m in mods.items()}
    try:
        assert len(install_launch_counter(lambda s, b: None, "0.32.0")) == 1 + len(LAUNCHER_CALL_SITES)
    finally:
        for name, m in mods.items():
            for attr in ("enable_swap_ab", "invoke_fused_moe_triton_kernel"):
                if attr in saved[name]:
                    setattr(m, attr, saved[name][attr])
