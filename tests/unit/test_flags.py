import pytest
from pydantic import ValidationError

from moe_opt.flags import FLAGS_ENV_VAR, OptimizationFlags, UnsupportedFlagCombination, cpu_effect_note


def test_baseline_adds_no_engine_arguments():
    f = OptimizationFlags()
    assert f.is_baseline()
    assert f.vllm_args() == []
    assert not f.needs_plugin()


def test_triton_backend_becomes_the_cli_flag():
    assert OptimizationFlags(moe_backend="triton").vllm_args() == ["--moe-backend", "triton"]


def test_flags_roundtrip_through_the_engine_environment():
    f = OptimizationFlags(swap_ab=False, moe_backend="triton", no_respecialize=True)
    env = f.engine_env()
    assert set(env) == {FLAGS_ENV_VAR}
    assert OptimizationFlags.from_env(env) == f
    assert OptimizationFlags.from_env({}) is None


def test_flags_are_frozen_and_strict():
    f = OptimizationFlags()
    with pytest.raises(ValidationError):
        f.swap_ab = True  # type: ignore[misc]
    with pytest.raises(ValidationError):
        OptimizationFlags(swapab=True)  # type: ignore[call-arg]


@pytest.mark.parametrize("backend", ["flashinfer_cutlass", "cutlass", "deep_gemm", "marlin"])
def test_triton_kernel_switches_on_a_non_triton_backend_raise_typed_error(backend):
    with pytest.raises(ValidationError) as e:
        OptimizationFlags(no_respecialize=True, moe_backend=backend)
    assert isinstance(e.value.errors()[0]["ctx"]["error"], UnsupportedFlagCombination)


def test_swap_ab_forced_off_is_still_a_plugin_flag():
    assert OptimizationFlags(swap_ab=False).needs_plugin()


def test_cpu_note_only_for_non_baseline():
    assert cpu_effect_note(OptimizationFlags()) is None
    note = cpu_effect_note(OptimizationFlags(moe_backend="triton"))
    assert note is not None and "CPU" in note
