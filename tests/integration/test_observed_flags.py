"""Observed flags on real vLLM CPU engines: what the workers report is what the arm asked for, or it is named.

Each engine is the EngineActor's own (its command line, labels, metrics dir and JIT cache dirs), run in this
process without Ray through ``start_server``, and read back through ``EngineActor.observe()``. One engine per
module and case, shared by its tests. No sleeps as synchronisation: the plugin's info series is written when
each worker starts, before the engine is healthy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from cluster.engine.actor import EngineActor
from cluster.engine.command import JIT_CACHE_VARS
from cluster.engine.observed import flag_mismatch, flags_applied
from experiment.config import EngineSpec, ModelSpec
from moe_opt.flags import OptimizationFlags
from tests.engine_http import complete, scrape, series
from tests.integration.conftest import clean_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SWAP = OptimizationFlags(swap_ab=True, no_respecialize=True)


@pytest.fixture(scope="module")
def with_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineActor]:
    """TP=2 with the plugin, in the run's shared JIT cache (cache_state shared_warm)."""
    tmp = tmp_path_factory.mktemp("obs-plugin")
    engine = EngineSpec(tensor_parallel_size=2, enforce_eager=True, cache_state="shared_warm")
    model = ModelSpec(served_name=f"obs-plugin-{tmp.name}-{os.getpid()}")
    actor = EngineActor("run-obs", "fast", SWAP, model, engine, "cpu", [], jit_cache_dir=str(tmp / "jit-cache"))
    try:
        actor.start_server(clean_env())
        yield actor
    finally:
        actor.stop()


@pytest.fixture(scope="module")
def without_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineActor]:
    """The arm's flags are in the environment, but vLLM loads no plugin named moeperf."""
    tmp = tmp_path_factory.mktemp("obs-none")
    engine = EngineSpec(enforce_eager=True, cache_state="as_found", env={"VLLM_PLUGINS": "none"})
    model = ModelSpec(served_name=f"obs-none-{tmp.name}-{os.getpid()}")
    actor = EngineActor("run-obs", "fast", SWAP, model, engine, "cpu", [])
    try:
        actor.start_server(clean_env())
        yield actor
    finally:
        actor.stop()


def test_every_rank_reports_the_flags_it_decoded_and_why_nothing_applied(with_plugin: EngineActor) -> None:
    observed = with_plugin.observe()
    assert observed.metrics_error is None
    assert [r.rank for r in observed.ranks] == [0, 1]
    for r in observed.ranks:
        assert r.flags == SWAP and r.world_size == 2 and r.platform == "cpu" and r.gpu == "none"
        assert r.flag_status == {
            "swap_ab": "not_applicable_cpu",
            "moe_backend": "vllm_default",
            "no_respecialize": "not_applicable_cpu",
        }
        assert not r.flags_applied and r.triton_version == "none"  # the CPU build disables Triton
        assert r.engine_moe_backend == "auto" and r.vllm_version == "0.32.0"
    assert observed.nothing_applied is not None and "nothing applied: vLLM's CPU build" in observed.nothing_applied
    assert flag_mismatch(SWAP, observed, "cpu") is None
    assert not flags_applied(SWAP, observed, "cpu")


def test_each_ranks_info_series_names_the_run_and_the_flags_and_vllm_metrics_are_still_served(
    with_plugin: EngineActor,
) -> None:
    """The labels the dashboards and observe() read, as the engine's own /metrics serves them."""
    assert with_plugin.server is not None
    samples = scrape(with_plugin.server)
    infos = series(samples, "moeperf_plugin_info", "gauge")
    assert sorted(i["rank"] for i in infos) == ["0", "1"]
    for info in infos:
        assert info["run_id"] == "run-obs" and info["platform"] == "cpu" and info["world_size"] == "2"
        assert OptimizationFlags.model_validate_json(info["flags"]) == SWAP and info["flags_applied"] == "false"
        assert info["swap_ab"] == "true" and info["swap_ab_status"] == "not_applicable_cpu"
        assert info["not_applied_reason"].startswith("vLLM's CPU build")
    assert any(n.startswith("vllm:") for n, _ in samples)


def test_the_workers_see_the_moe_backend_the_log_names(with_plugin: EngineActor) -> None:
    observed = with_plugin.observe()
    assert all(r.moe_layer_backends for r in observed.ranks)  # every rank read its own model
    experts = {b.experts for r in observed.ranks for b in r.moe_layer_backends}
    assert experts and experts <= set(observed.moe_backends_logged), (experts, observed.moe_backends_logged)
    assert all(b.backend == "CPU" and b.layers >= 1 for r in observed.ranks for b in r.moe_layer_backends)


def test_after_serving_it_still_matches_and_other_requests_are_named(with_plugin: EngineActor) -> None:
    assert with_plugin.server is not None
    complete(with_plugin.server, with_plugin.model.served_name, 16, 4)
    observed = with_plugin.observe()
    assert flag_mismatch(SWAP, observed, "cpu") is None
    assert all(r.fused_moe_launches == [] and r.config_sources == [] for r in observed.ranks)  # no Triton MoE on CPU
    other = flag_mismatch(OptimizationFlags(swap_ab=False, no_respecialize=True), observed, "cpu")
    assert other is not None and "rank 1 ran swap_ab=true, the arm requested swap_ab=false" in other
    on_gpu = flag_mismatch(SWAP, observed, "cuda")
    assert on_gpu is not None and "swap_ab=true was requested but is not_applicable_cpu there, not applied" in on_gpu


def test_the_engine_ran_in_the_runs_shared_jit_cache(with_plugin: EngineActor) -> None:
    assert with_plugin.server is not None and with_plugin.server.command is not None and with_plugin.jit_cache_dir
    env = with_plugin.server.command.env
    assert {v: env[v] for v in JIT_CACHE_VARS} == {
        v: str(with_plugin.jit_cache_dir / s) for v, s in JIT_CACHE_VARS.items()
    }


def test_an_engine_without_the_plugin_cannot_verify_the_requested_flags(without_plugin: EngineActor) -> None:
    assert without_plugin.server is not None
    complete(without_plugin.server, without_plugin.model.served_name, 16, 4)
    observed = without_plugin.observe()
    assert observed.metrics_error is None and observed.ranks == [] and observed.moe_backends_logged
    assert flag_mismatch(SWAP, observed, "cpu") == (
        "the moeperf plugin did not report from the engine's workers; requested "
        "moe_backend=auto swap_ab=true no_respecialize=true cannot be verified"
    )
