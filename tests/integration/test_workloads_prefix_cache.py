"""A real vLLM CPU engine replays the bundled Mooncake sample: its prefix cache sees the trace's sharing.

Equal hash ids must become identical token blocks, or the engine's cache hit counter would not
move; the same schedule with the blocks made unique is the control, and must not hit.
"""

import asyncio
import re
import time
import urllib.request

import pytest

from experiment.config import EngineSpec, ModelSpec
from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model
from tests.engine_http import engine_server
from tests.integration.conftest import served_name_for
from workloads.client import ClientSettings, replay
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.workload import WorkloadSpec, build_schedule

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HITS = re.compile(r"^vllm:prefix_cache_hits_total\{[^}]*\}\s+([0-9.e+]+)$", re.M)


def prefix_cache_hits(base: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        return sum(float(v) for v in HITS.findall(r.read().decode()))


@pytest.fixture
def engine(tmp_path):
    """A CPU engine of the tiny model without the plugin (no arm flags): only vLLM's own prefix cache counts."""
    name = served_name_for(tmp_path)
    model = ModelSpec(served_name=name)
    with engine_server(
        tmp_path, model, ensure_tiny_model(TinyMoeSpec()), EngineSpec(enforce_eager=True), flags=None
    ) as server:
        server.wait_healthy(600)
        yield server.url, name


def _replay(base, name, requests):
    settings = ClientSettings(base_url=base, model=name, arm="prefix", vocab_lo=3, vocab_hi=98, max_in_flight=8)

    async def go():
        return [r async for r in replay(requests, settings, time.time() + 0.5)]

    return asyncio.run(go())


def test_mooncake_sharing_reaches_the_prefix_cache(engine):
    base, name = engine
    schedule = build_schedule(
        WorkloadSpec(
            trace=MooncakeTraceSpec(),
            input_scale=1 / 4,  # 512-token hash blocks become 128 tokens: whole KV blocks on CPU
            max_input_tokens=768,
            max_output_tokens=2,
            speedup=8,
            max_model_len=1024,
        )
    )
    assert any(r.shared_blocks for r in schedule.requests)
    control = [r.model_copy(update={"shared_blocks": ()}) for r in schedule.requests]

    before = prefix_cache_hits(base)
    recs = _replay(base, name, control)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok][:3]
    after_control = prefix_cache_hits(base)

    recs = _replay(base, name, schedule.requests)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok][:3]
    after = prefix_cache_hits(base)

    assert after_control - before == 0, "unique prompts must not hit the prefix cache"
    assert after - after_control > 0, "shared hash ids must hit the prefix cache"
