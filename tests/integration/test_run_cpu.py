"""`moeperf run` end to end on real parts: local Ray, two real vLLM CPU engines, real HTTP."""

import json
import secrets
import tempfile
import time
from pathlib import Path

import pytest

from modelgen.tiny_moe import default_cache_dir
from tests.integration.conftest import load_result, moeperf_run, records_on_disk, run_dir_of, small_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _files_holding(secret: str, roots: list[Path], since: float) -> list[str]:
    """Every file under ``roots`` written since ``since`` that holds ``secret`` (as bytes, anywhere)."""
    found = []
    for root in roots:
        for f in [root] if root.is_file() else root.rglob("*"):
            try:
                if f.is_file() and f.stat().st_mtime >= since and secret.encode() in f.read_bytes():
                    found.append(str(f))
            except OSError:  # a socket, or a file removed while walking
                continue
    return found


def test_two_arms_every_request_measured_the_api_key_written_nowhere_and_the_time_budget_kept(tmp_path):
    """Also the API key test: the engines require a key (here the user's, through engine.api_key_env) and every
    request, warm-up and probe carries it; then every file the run wrote is searched for it. And the time budget's:
    2 rounds planned in a budget round 0 alone overruns, so round 1 never starts and the result is a whole run of
    round 0 (the same engines serve all three checks)."""
    arms = [
        {"name": "baseline"},
        {
            "name": "all-optimizations",
            "flags": {"swap_ab": True, "moe_backend": "triton", "no_respecialize": True},
            "engine_env": {"MOEPERF_IT_ARM_VARIABLE": "1"},  # this arm's engine only
        },
    ]
    exp = small_experiment(
        tmp_path, engine={"env": {"MOEPERF_ROUTER_BIAS": "zipf:1.0"}}, arms=arms, rounds=2, time_budget_s=0.001
    )
    key = "moeperf-it-" + secrets.token_urlsafe(24)
    started = time.time() - 1.0
    r = moeperf_run(str(exp), "--set", "engine.api_key_env=MOEPERF_IT_KEY", extra_env={"MOEPERF_IT_KEY": key})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = run_dir_of(tmp_path)
    assert key not in r.stdout + r.stderr
    tmp = Path(tempfile.gettempdir())
    # Only folders this run could have written: this machine may hold the folders of many earlier runs.
    fresh = [d for d in (*tmp.glob("moeperf-engine-*"), *tmp.glob("ray/session_*")) if d.stat().st_mtime >= started]
    roots = [tmp_path, Path("/tmp/moeperf/prometheus"), *fresh]
    assert _files_holding(key, roots, started) == []
    res = load_result(run_dir)
    assert res["schema_version"] == 3 and res["status"] == "ok"
    # Cold caches per engine, but vLLM's facts about the model class are kept on the node (not compiled code):
    # the child process that imports the class to learn them ran for one engine at most (10 s of a 2-core start).
    facts = default_cache_dir() / "vllm-modelinfos"
    assert res["config"]["engine"]["cache_state"] == "cold_per_arm"
    assert [p.name for p in facts.glob("*MixtralForCausalLM.json")], sorted(facts.iterdir())
    assert res["config"]["rounds"] == 1 and res["config"]["first_round"] == 0
    assert res["notes"][0].startswith("time budget: rounds 1-1 not started (")
    assert res["notes"][0].endswith("the result holds rounds 0-0: continue with --first_round 1")
    assert [a["name"] for a in res["arms"]] == ["baseline", "all-optimizations"]
    assert [a["rounds"] for a in res["arms"]] == [1, 1]
    # the turns as they ran: round 0 only, each with its start and end (the analysis reads places from them)
    assert [(t["kind"], t["round"], t["arms"]) for t in res["turns"]] == [
        ("measured", 0, ["baseline"]), ("measured", 0, ["all-optimizations"]),
    ]  # fmt: skip
    assert all(t["started_at"] <= t["ended_at"] for t in res["turns"])
    for arm in res["arms"]:
        assert arm["status"] == "ok"
        assert arm["requests_planned"] == arm["requests_sent"] == arm["requests_succeeded"] == 6
        assert [rec["index"] for rec in arm["records"]] == list(range(6))
        for rec in arm["records"]:
            assert rec["error"] is None
            assert rec["first_token_s"] - rec["actual_send_s"] > 0
            assert rec["prompt_tokens"] == rec["prompt_tokens_requested"]
            assert rec["output_tokens"] == rec["output_tokens_requested"] == len(rec["token_times_s"])
        assert arm["records_file"].endswith(".parquet") and arm["records_count"] == 6
        assert sorted(rec["index"] for rec in records_on_disk(run_dir / arm["records_file"])) == list(range(6))
        assert arm["engine"]["device"] == "cpu" and arm["engine"]["vllm_version"].startswith("0.32")
        # where the start went, from the server's own log: every point reached, in order, before healthy
        at = arm["engine"]["startup_timeline_s"]
        points = ["api_server_first_line_s", "config_resolved_s", "engine_core_started_s", "model_loading_started_s"]
        assert list(at) == [*points, "engine_initialized_s", "api_server_listening_s"], at
        assert list(at.values()) == sorted(at.values())
        assert at["api_server_listening_s"] <= arm["engine"]["startup_s"] + 1
        # vLLM chose the kernel itself ("auto" on CPU): the result says which one served.
        assert arm["engine"]["moe_backends"][0] == "Unquantized: CPU"
        # Where the start went, from vLLM's own log: the engine's init inside the time to healthy.
        phases = arm["engine"]["startup_phases_s"]
        assert 0 < phases["init_engine_s"] < arm["engine"]["startup_s"], phases
        # engine.env reaches every engine, an arm's engine_env only its own.
        assert arm["engine"]["env"]["MOEPERF_ROUTER_BIAS"] == "zipf:1.0"
        assert ("MOEPERF_IT_ARM_VARIABLE" in arm["engine"]["env"]) == (arm["name"] == "all-optimizations")
        assert arm["summary"]["ttft_s"]["p50"] > 0
        # Routing seen while serving: one row per MoE layer, every expert, from the measured window's growth.
        tiny = res["config"]["model"]["tiny"]
        loads = arm["expert_load"]
        assert [row["layer"] for row in loads] == list(range(tiny["num_hidden_layers"])), loads
        assert all(len(row["tokens"]) == tiny["num_local_experts"] for row in loads), loads
        routed = {sum(row["tokens"]) for row in loads}
        # Every token the engine computed in the window passes every MoE layer once per selected expert: each
        # request's prompt (less prefix-cache hits) and every output token but the last, which is never fed back.
        # Exact: the runner reads the window once every rank has published its counts (no lag, no warm-up).
        hits = sum(v for k, v in arm["window_metrics"].items() if k.startswith("vllm:prefix_cache_hits_total{"))
        computed = sum(rec["prompt_tokens"] + rec["output_tokens"] - 1 for rec in arm["records"]) - hits
        assert routed == {computed * tiny["num_experts_per_tok"]}, (loads, computed)
        # Routed as engine.env's MOEPERF_ROUTER_BIAS=zipf:1.0 asks, inside the served (compiled) model: sampled,
        # so more experts than top-k see tokens (a constant bias sent every token to the same k), and skewed,
        # expert 0 the most popular in every layer.
        for row in loads:
            assert sum(t > 0 for t in row["tokens"]) > tiny["num_experts_per_tok"], row
            assert row["tokens"][0] == max(row["tokens"]) > 2 * sorted(row["tokens"])[len(row["tokens"]) // 2], row
        assert not [k for k in arm["window_metrics"] if k.startswith("moeperf_expert_tokens_total{")]  # expert_load
        # Each measured round's step times kept on their own too (analysis/step_time_rounds.py; JSON keys: strings).
        measured = [t["round"] for t in res["turns"] if t["kind"] == "measured" and arm["name"] in t["arms"]]
        by_round = arm["window_metrics_by_round"]
        assert sorted(int(r) for r in by_round) == sorted(measured) and all(
            any(k.startswith("moeperf_rank_step_seconds_count{") for k in by_round[str(r)]) for r in measured
        ), by_round
    flagged = res["arms"][1]
    assert flagged["flags"] == {
        "swap_ab": True,
        "moe_backend": "triton",
        "no_respecialize": True,
        "tuned_config_dir": None,
        "no_respecialize_kernels": {},
    }
    assert flagged["flags_applied"] is False and "change nothing in the kernels" in flagged["notes"][0]
    assert "change nothing in the kernels" in r.stdout
    assert "TTFT p99 (ms)" in r.stdout
    # Not a terminal (a pipe, like `ray job logs` or CI): progress is plain lines, not tqdm redraws.
    assert "\r" not in r.stdout + r.stderr
    assert "arm baseline: round 0: 6/6 requests done, 0 errors" in r.stdout
    assert (run_dir / "config.yaml").exists()
    env = json.loads((run_dir / "environment.json").read_text())
    assert env["driver"]["versions"]["ray"] == "2.60.0"
