"""A real vLLM CPU engine, started as moeperf starts every engine (an API key, no development mode).

- The bundled Mooncake sample: equal hash ids must become identical token blocks, or the engine's cache hit
  counter would not move; the same schedule with the blocks made unique is the control, and must not hit.
- Rounds are isolated without resetting the prefix cache: a round's prompts (its own seed) never hit the
  cache the previous round left, while replaying a round's own prompts again does.
- Nothing privileged answers: vLLM's development routes are 404, and /v1 needs the key.
"""

import asyncio
import re
import time
import urllib.error
import urllib.request

import pytest

from tests.integration.conftest import KEYED_ENGINE_API_KEY
from workloads.client import ClientSettings, replay
from workloads.schedule import PlannedRequest
from workloads.sweep import level_prompt_seed
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.workload import WorkloadSpec, build_schedule

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HITS = re.compile(r"^vllm:prefix_cache_hits_total\{[^}]*\}\s+([0-9.e+]+)$", re.M)


def prefix_cache_hits(base: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        return sum(float(v) for v in HITS.findall(r.read().decode()))


@pytest.fixture
def engine(keyed_engine):
    """The session's shared engine; only vLLM's own prefix cache counts (no plugin)."""
    return keyed_engine[:2]


def _replay(base, name, requests, seed=0):
    settings = ClientSettings(
        base_url=base,
        model=name,
        arm="prefix",
        vocab_lo=3,
        vocab_hi=98,
        max_in_flight=8,
        seed=seed,
        api_key=KEYED_ENGINE_API_KEY,
    )

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


def test_a_rounds_prompts_never_hit_the_cache_the_previous_round_left(engine):
    base, name = engine
    # 256 tokens: two whole KV blocks on the CPU build (128 tokens each), so equal prompts can hit at all
    unique = [PlannedRequest(index=i, send_offset_s=0.05 * i, prompt_tokens=256, max_tokens=2) for i in range(6)]
    seeds = [level_prompt_seed(11, rnd, None) for rnd in range(2)]
    hits = [prefix_cache_hits(base)]
    for seed in (*seeds, seeds[1]):  # round 0, round 1, then round 1's prompts once more: the control
        recs = _replay(base, name, unique, seed=seed)
        assert all(r.ok for r in recs), [r.error for r in recs if not r.ok][:3]
        hits.append(prefix_cache_hits(base))
    assert hits[1] - hits[0] == 0 and hits[2] - hits[1] == 0, "a new round's prompts hit an old round's cache"
    assert hits[3] - hits[2] > 0, "the same prompts again must hit: the counter would not show isolation otherwise"


def _status(base, path, method="GET", key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    req = urllib.request.Request(f"{base}{path}", data=b"{}" if method == "POST" else None, method=method,
                                 headers={"Content-Type": "application/json", **headers})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_no_development_route_answers_and_v1_needs_the_key(engine):
    base, _ = engine
    for path in ("/reset_prefix_cache", "/collective_rpc", "/sleep", "/wake_up"):
        assert _status(base, path, "POST", key=KEYED_ENGINE_API_KEY) == 404, path
    assert _status(base, "/v1/models") == 401
    assert _status(base, "/v1/models", key="wrong") == 401
    assert _status(base, "/v1/models", key=KEYED_ENGINE_API_KEY) == 200
    assert _status(base, "/health") == 200 and _status(base, "/metrics") == 200  # what moeperf polls, keyless
