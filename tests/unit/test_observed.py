"""Observed flags: an engine's /metrics text read back per rank, and every way it can differ from the request.

The text is what the plugin itself exports: its label builder (``hooks.info_labels``), its flag decoding
(``load_settings``) and its metric objects, rendered by prometheus_client, so the parser is tested against the
plugin's real output and a label renamed on one side fails here.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cluster.engine.counters import parse_samples, window_delta
from cluster.engine.observed import (
    config_sources_in_window,
    flag_mismatch,
    flags_applied,
    launches_in_window,
    observe_engine,
)
from moe_opt.flags import SWITCHES, FlagStatus, OptimizationFlags
from moe_opt.plugin import hooks
from moe_opt.plugin.metrics import (
    FUSED_MOE_LAUNCHES,
    MOE_BACKEND_LAYERS,
    MOE_CONFIG_LOOKUPS,
    PLUGIN_INFO,
    Metrics,
)
from moe_opt.plugin.patches import apply_flags
from moe_opt.plugin.settings import load_settings
from result_format.run_result import ArmResult, MoeConfigSource, ObservedEngine, SwapAbLaunches

SWAP = OptimizationFlags(swap_ab=True, no_respecialize=True)
TRITON = OptimizationFlags(swap_ab=True, moe_backend="triton")
VLLM_ONLY = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"


@pytest.fixture(autouse=True)
def _triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "triton_version", lambda: "3.6.0")  # keeps vLLM out of these tests' imports


def _status(flags: OptimizationFlags, platform: str) -> dict[str, FlagStatus]:
    if platform == "cuda":  # what apply_flags returns on a GPU, without patching this process's vLLM
        return {s: "applied" if flags.asks_for(s) else "vllm_default" for s in SWITCHES}
    return apply_flags(flags, on_gpu=False, vllm_version="0.32.0")


def rank_labels(rank: int, platform: str) -> dict[str, str]:
    gpu = str(rank) if platform == "cuda" else "none"
    return {"engine": "run-1/arm", "arm": "arm", "node": "n", "rank": str(rank), "gpu": gpu, "gpu_uuid": gpu}


def engine_text(
    flags: OptimizationFlags,
    platform: str = "cpu",
    ranks: tuple[int, ...] = (0,),
    world: int | None = None,
    status: dict[str, FlagStatus] | None = None,
    layers: tuple[str, str] | None = None,
    launches: dict[tuple[bool, int], int] | None = None,
) -> str:
    """What the engine's /metrics serves when each rank's plugin decoded ``flags`` (plus one vLLM metric)."""
    reg = CollectorRegistry()
    metrics = Metrics(reg)
    settings = load_settings(flags.engine_env() | {"MOEPERF_RUN_ID": "run-1", "MOEPERF_ARM": "arm"})
    assert settings is not None
    for r in ranks:
        lab = rank_labels(r, platform)
        info = hooks.info_labels(
            lab,
            settings,
            status if status is not None else _status(flags, platform),
            vllm_version="0.32.0",
            platform=platform,
            world_size=world or len(ranks),
            engine_moe_backend=flags.moe_backend,
        )
        metrics.get(PLUGIN_INFO).labels(**info).set(1)
        if layers is not None:
            metrics.get(MOE_BACKEND_LAYERS).labels(*lab.values(), *layers).set(2)
        for (swap, bucket), n in (launches or {}).items():
            metrics.get(FUSED_MOE_LAUNCHES).labels(*lab.values(), str(swap).lower(), str(bucket)).inc(n)
        if launches:
            metrics.get(MOE_CONFIG_LOOKUPS).labels(*lab.values(), "E=8,N=64.json", "default").inc(3)
    return VLLM_ONLY + generate_latest(reg).decode()


def test_no_plugin_report_means_the_flags_cannot_be_verified() -> None:
    observed = observe_engine(VLLM_ONLY, ["CPUUnquantizedExperts"])
    assert observed.ranks == [] and observed.nothing_applied is None
    reason = flag_mismatch(SWAP, observed, "cpu")
    assert reason == (
        "the moeperf plugin did not report from the engine's workers; requested "
        "moe_backend=auto swap_ab=true no_respecialize=true cannot be verified"
    )
    assert flag_mismatch(SWAP, None, "cuda") == reason
    down = observe_engine("", [], "GET /metrics failed: connection refused")
    assert "(GET /metrics failed: connection refused)" in (flag_mismatch(SWAP, down, "cuda") or "")
    assert not flags_applied(SWAP, observed, "cuda")


def test_a_cpu_engine_with_the_plugin_on_every_rank_matches() -> None:
    observed = observe_engine(engine_text(SWAP, ranks=(0, 1)), ["CPUUnquantizedExperts"])
    assert [r.rank for r in observed.ranks] == [0, 1]
    for r in observed.ranks:
        assert r.flags == SWAP and r.world_size == 2 and r.platform == "cpu" and not r.flags_applied
        assert r.flag_status == {
            "swap_ab": "not_applicable_cpu",
            "moe_backend": "vllm_default",
            "no_respecialize": "not_applicable_cpu",
        }
        assert r.not_applied_reason is not None and "CPU build" in r.not_applied_reason
    assert observed.nothing_applied is not None and observed.nothing_applied.startswith("nothing applied: vLLM's CPU")
    assert observed.moe_backends_logged == ["CPUUnquantizedExperts"]
    assert flag_mismatch(SWAP, observed, "cpu") is None
    assert not flags_applied(SWAP, observed, "cpu")  # matched, but nothing can apply on CPU


def test_a_rank_that_decoded_other_flags_is_named_with_both_values() -> None:
    observed = observe_engine(engine_text(OptimizationFlags(swap_ab=False, no_respecialize=True)))
    reason = flag_mismatch(SWAP, observed, "cpu")
    assert reason is not None
    assert "rank 0 ran swap_ab=false, the arm requested swap_ab=true" in reason
    assert "no_respecialize" not in reason.split(";")[0]


def test_extra_kernels_of_no_respecialize_are_compared_too() -> None:
    asked = OptimizationFlags(no_respecialize=True, no_respecialize_kernels={"m:k": ["EM"]})
    observed = observe_engine(engine_text(OptimizationFlags(no_respecialize=True)))
    reason = flag_mismatch(asked, observed, "cpu")
    assert (
        reason is not None and 'no_respecialize_kernels={}, the arm requested no_respecialize_kernels={"m:k"' in reason
    )
    assert flag_mismatch(asked, observe_engine(engine_text(asked)), "cpu") is None


def test_on_cuda_a_requested_flag_that_is_not_applied_is_named() -> None:
    status: dict[str, FlagStatus] = {
        "swap_ab": "vllm_default",
        "moe_backend": "applied",
        "no_respecialize": "vllm_default",
    }
    observed = observe_engine(engine_text(TRITON, "cuda", status=status))
    assert flag_mismatch(TRITON, observed, "cuda") == (
        "rank 0: swap_ab=true was requested but is vllm_default there, not applied"
    )
    good = observe_engine(engine_text(TRITON, "cuda", ranks=(0, 1), layers=("TRITON", "TritonExperts")))
    assert flag_mismatch(TRITON, good, "cuda") is None and flags_applied(TRITON, good, "cuda")
    assert good.nothing_applied is None and all(r.not_applied_reason is None for r in good.ranks)
    assert good.ranks[1].gpu == "1" and good.ranks[0].triton_version == "3.6.0"
    assert good.ranks[0].engine_moe_backend == "triton"


def test_on_cuda_a_forced_backend_no_layer_runs_is_named() -> None:
    observed = observe_engine(engine_text(TRITON, "cuda", layers=("FLASHINFER_CUTLASS", "FlashInferExperts")))
    assert flag_mismatch(TRITON, observed, "cuda") == (
        "moe_backend=triton was requested but vLLM chose ['FLASHINFER_CUTLASS']"
    )
    from_log = observe_engine(engine_text(TRITON, "cuda"), ["Fp8: FLASHINFER_CUTLASS"])
    assert "vLLM chose ['Fp8: FLASHINFER_CUTLASS']" in (flag_mismatch(TRITON, from_log, "cuda") or "")
    assert flag_mismatch(TRITON, observe_engine(engine_text(TRITON, "cuda"), ["Fp8: TRITON"]), "cuda") is None


def test_a_cpu_worker_on_a_cuda_arm_is_named() -> None:
    observed = observe_engine(engine_text(OptimizationFlags()))
    assert flag_mismatch(OptimizationFlags(), observed, "cuda") == "rank 0 ran on cpu, not cuda"


def test_on_cpu_an_applied_status_is_a_mismatch() -> None:
    status: dict[str, FlagStatus] = {
        "swap_ab": "applied",
        "moe_backend": "vllm_default",
        "no_respecialize": "vllm_default",
    }
    observed = observe_engine(engine_text(OptimizationFlags(swap_ab=True), status=status))
    assert flag_mismatch(OptimizationFlags(swap_ab=True), observed, "cpu") == (
        "rank 0: swap_ab is applied, expected not_applicable_cpu on cpu"
    )


def test_a_rank_that_did_not_report_is_named() -> None:
    observed = observe_engine(engine_text(SWAP, ranks=(0,), world=2))
    assert flag_mismatch(SWAP, observed, "cpu") == "rank(s) [1] of 2 did not report (the plugin did not run there)"


def test_launch_counts_and_config_sources_per_rank_and_in_the_window() -> None:
    launches = {(True, 16): 5, (False, 256): 2}
    text = engine_text(TRITON, "cuda", ranks=(0, 1), launches=launches)
    observed = observe_engine(text)
    assert observed.ranks[1].fused_moe_launches == [
        SwapAbLaunches(swap_ab=False, bucket=256, launches=2),
        SwapAbLaunches(swap_ab=True, bucket=16, launches=5),
    ]
    assert observed.ranks[0].config_sources == [
        MoeConfigSource(config_file="E=8,N=64.json", source="default", lookups=3)
    ]
    # The window metrics of a result hold the same series (counters.parse_samples keeps moeperf_ counters).
    window = window_delta({}, parse_samples(text))
    assert launches_in_window(window) == [
        SwapAbLaunches(swap_ab=False, bucket=256, launches=4),
        SwapAbLaunches(swap_ab=True, bucket=16, launches=10),
    ]
    assert config_sources_in_window(window) == [
        MoeConfigSource(config_file="E=8,N=64.json", source="default", lookups=6)
    ]


def test_an_observation_round_trips_through_the_result_file() -> None:
    observed = observe_engine(engine_text(SWAP, ranks=(0, 1)), ["CPUUnquantizedExperts"])
    again = ObservedEngine.model_validate_json(observed.model_dump_json())
    assert again == observed
    fields = ArmResult.model_fields
    assert "observed" in fields and fields["observed"].default is None  # results written before still load
