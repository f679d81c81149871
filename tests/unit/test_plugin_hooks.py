"""Helpers of the vLLM attachment that do not need a running engine."""

from __future__ import annotations

import pytest

from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.gpu import NO_GPU, identify, physical_index
from moe_opt.plugin.hooks import _flags_labels, _resolve
from moe_opt.plugin.patches import PatchTargetMissing


def test_a_moved_vllm_class_is_a_typed_error() -> None:
    with pytest.raises(PatchTargetMissing) as e:
        _resolve("vllm_does_not_have.this_module:WorkerWrapperBase")
    assert e.value.flag == "instruments" and "vLLM" in str(e.value)


def test_the_classes_the_plugin_wraps_exist_in_the_installed_vllm() -> None:
    pytest.importorskip("vllm")
    from moe_opt.plugin.hooks import GROUP, WRAPPER

    wrapper = _resolve(WRAPPER)
    for method in ("init_device", "execute_model", "initialize_from_config"):
        assert callable(wrapper.__dict__[method]), method
    assert callable(_resolve(GROUP).__dict__["all_reduce"])


def test_physical_gpu_index_follows_cuda_visible_devices() -> None:
    assert physical_index(1, "4,5,6") == "5"
    assert physical_index(0, None) == "0"
    assert physical_index(3, "2") == "3"


def test_cpu_device_has_no_gpu_identity() -> None:
    import torch

    gpu = identify(torch.device("cpu"))
    assert gpu.index == gpu.uuid == NO_GPU


def test_info_labels_of_flags() -> None:
    assert _flags_labels(OptimizationFlags()) == {
        "swap_ab": "vllm_default",
        "moe_backend": "auto",
        "no_respecialize": "false",
    }
    assert _flags_labels(OptimizationFlags(swap_ab=False, moe_backend="triton", no_respecialize=True)) == {
        "swap_ab": "false",
        "moe_backend": "triton",
        "no_respecialize": "true",
    }


def test_triton_version_is_none_where_vllm_runs_without_triton() -> None:
    """vLLM's CPU build disables an installed Triton: the engine's kernels ran without it, whatever pip says."""
    pytest.importorskip("vllm")
    from vllm.triton_utils import HAS_TRITON

    from moe_opt.plugin.hooks import triton_version

    if HAS_TRITON:
        import triton

        assert triton_version() == triton.__version__
    else:
        assert triton_version() == "none"
