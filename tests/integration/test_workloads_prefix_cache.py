"""A real vLLM CPU engine replays the bundled Mooncake sample: its prefix cache sees the trace's sharing.

Equal hash ids must become identical token blocks, or the engine's cache hit counter would not
move; the same schedule with the blocks made unique is the control, and must not hit.
"""

import asyncio
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from modelgen.tiny_moe import TinyMoeSpec, ensure_tiny_model
from tests.integration.conftest import clean_env, served_name_for
from tests.integration.fake_openai import loopback_port
from workloads.client import ClientSettings, replay
from workloads.traces.mooncake import MooncakeTraceSpec
from workloads.workload import WorkloadSpec, build_schedule

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HITS = re.compile(r"^vllm:prefix_cache_hits_total\{[^}]*\}\s+([0-9.e+]+)$", re.M)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def prefix_cache_hits(base: str) -> float:
    return sum(float(v) for v in HITS.findall(_get(f"{base}/metrics")))


@pytest.fixture
def engine(tmp_path):
    model = ensure_tiny_model(TinyMoeSpec())
    port, name = loopback_port(), served_name_for(tmp_path)
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy",
        "--dtype", "bfloat16", "--max-model-len", "1024", "--gpu-memory-utilization", "0.12", "--enforce-eager",
    ]  # fmt: skip
    env = {**clean_env(), "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = (tmp_path / "engine.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:  # polling a process we do not control: the only way to learn it is up
            if proc.poll() is not None:
                pytest.fail(f"engine exited {proc.returncode}:\n{(tmp_path / 'engine.log').read_text()[-3000:]}")
            try:
                if _get(f"{base}/health") is not None:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("engine not healthy after 600 s")
            time.sleep(0.5)
        yield base, name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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
