"""One real vLLM engine on a GPU with the moeperf plugin: Triton compile events and per-rank metrics appear.

The CPU suite proves the plugin's wiring; only a GPU engine runs vLLM's Triton ``fused_moe_kernel``, so
only here can a compile event be seen. The engine gets an empty Triton cache, FP8 MoE on the Triton
backend and prompts of different lengths, so the kernel is compiled while serving, as it is in the
cold-start runs this product measures. With two GPUs visible the same checks run at TP=2, where the
sync-stall histogram must have a series for each rank.

Needs vLLM (CUDA build) and a GPU; on the H200 test machine vLLM comes from the bundle of
``results/h200/bundle/build-vllm-bundle.sh`` (results/h200/README.md). The plugin is found through its
``vllm.general_plugins`` entry point; where moeperf is not pip-installed (the bundle), the test writes
that entry point into a dist-info on the engine's PYTHONPATH.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

import pytest

from cluster.engine.command import PluginLabels
from cluster.engine.server import ServerProcess
from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model
from moe_opt.flags import OptimizationFlags
from moe_opt.plugin.metrics import GPU_SPECS
from tests.engine_http import Samples, complete, engine_server, poll, scrape, series, total

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.integration]

torch = pytest.importorskip("torch")
# Mixtral's MoE widths at one layer pair: big enough for the tuned FP8 Triton path, quick to start.
SPEC = TinyMoeSpec(num_hidden_layers=2, hidden_size=4096, intermediate_size=14336, num_local_experts=8,
                   num_experts_per_tok=2, num_attention_heads=32, num_key_value_heads=8)  # fmt: skip
PROMPT_TOKENS = (7, 100, 333, 1000)  # different prefill sizes: each can need its own specialisation
COMPILES = "moeperf_triton_compiles_total"
FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe.fused_moe_kernel"  # the plugin's kernel label


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _plugin_dist_info(tmp_path: Path) -> list[str]:
    """PYTHONPATH entries that make vLLM find the plugin: none when moeperf is pip-installed."""
    if any(ep.name == "moeperf" for ep in importlib.metadata.entry_points(group="vllm.general_plugins")):
        return []
    dist = tmp_path / "ep" / "moeperf-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: moeperf\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("[vllm.general_plugins]\nmoeperf = moe_opt.plugin:register\n")
    return [str(tmp_path / "ep"), str(Path(__file__).resolve().parents[2])]


def gpu_engine(tmp_path: Path, name: str, tp: int, flags: OptimizationFlags) -> ServerProcess:
    """FP8 MoE on the arm's backend (``--moe-backend`` comes from the flags, as in a measured arm)."""
    path = _plugin_dist_info(tmp_path) + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {
        "PYTHONPATH": os.pathsep.join(path),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),  # empty: every Triton kernel is compiled, none loaded
    }
    return engine_server(
        tmp_path,
        ModelSpec(served_name=name, max_model_len=2048, quantization="fp8"),
        ensure_tiny_model(SPEC, tmp_path),
        EngineSpec(tensor_parallel_size=tp, gpu_memory_utilization=0.4, enforce_eager=True, env=env),
        flags=flags,
        labels=PluginLabels(arm="arm-gpu", run_id="run-gpu", engine=name, node="node-gpu"),
        device="cuda",
    )


def _serve_and_scrape(server: ServerProcess, name: str) -> Samples:
    server.wait_healthy(900)
    for n in PROMPT_TOKENS:
        complete(server, name, n, 16)
    ttft = "moeperf_rank_ttft_seconds_count"
    return poll(lambda: scrape(server), lambda s: total(s, ttft) >= len(PROMPT_TOKENS), 60)


def _assert_compiles_and_rank_series(samples: Samples, ranks: list[str]) -> None:
    serving = total(samples, COMPILES, kernel=FUSED_MOE, during="serving")
    startup = total(samples, COMPILES, kernel=FUSED_MOE, during="startup")
    assert serving + startup >= len(ranks), "no fused_moe_kernel compile seen with an empty Triton cache"
    assert total(samples, "moeperf_triton_compile_seconds_count", kernel=FUSED_MOE) >= serving + startup
    assert total(samples, "moeperf_triton_compile_seconds_sum", kernel=FUSED_MOE) > 0
    for rank in ranks:
        assert total(samples, COMPILES, kernel=FUSED_MOE, rank=rank) >= 1, f"rank {rank} compiled nothing"
        assert total(samples, "moeperf_rank_ttft_seconds_count", rank=rank) >= len(PROMPT_TOKENS)
        assert total(samples, "moeperf_rank_step_seconds_count", rank=rank, phase="decode") >= 1
    uuids = set()
    for spec in GPU_SPECS:
        found = series(samples, spec.name, spec.kind)
        assert sorted({s["rank"] for s in found}) == ranks, spec.name
        uuids |= {s["gpu_uuid"] for s in found}
        assert all(s["gpu"] != "none" and s["gpu_uuid"].startswith("GPU-") for s in found), spec.name
    assert len(uuids) == len(ranks), "each rank must report its own GPU"
    assert all(total(samples, "moeperf_gpu_memory_total_bytes", rank=r) > 10e9 for r in ranks)
    infos = series(samples, "moeperf_plugin_info", "gauge")
    assert sorted(i["rank"] for i in infos) == ranks
    assert all(i["platform"] == "cuda" and i["moe_backend_status"] == "applied" for i in infos), infos


@pytest.mark.parametrize("tp", [1, 2], ids=["tp1", "tp2"])
def test_real_gpu_engine_reports_fused_moe_compiles_and_per_rank_metrics(tmp_path: Path, tp: int) -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    if _gpus() < tp:
        pytest.skip(f"needs {tp} GPU(s), {_gpus()} visible")
    name = f"gpu-tp{tp}-{tmp_path.name}"
    with gpu_engine(tmp_path, name, tp, OptimizationFlags(moe_backend="triton")) as server:
        samples = _serve_and_scrape(server, name)
    ranks = [str(r) for r in range(tp)]
    _assert_compiles_and_rank_series(samples, ranks)
    if tp > 1:
        stall = "moeperf_rank_sync_stall_seconds_count"
        assert all(total(samples, stall, rank=r) >= 1 for r in ranks), "a rank has no sync-stall observations"
        assert total(samples, "moeperf_step_skew_seconds_count") >= 1
