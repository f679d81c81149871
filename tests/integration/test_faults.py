"""Faults on real engines: one dies mid-run, the user presses Ctrl-C, the cluster lacks resources."""

import json
import signal
import subprocess
import sys

import pytest

from tests.integration.conftest import REPO, clean_env, load_result, moeperf_run, run_dir_of, small_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_engine_killed_mid_run_fails_its_arm_and_keeps_records(tmp_path):
    exp = small_experiment(
        tmp_path,
        placement="parallel",
        chaos={"kill_engine_after_records": {"all-optimizations": 2}},
        workload={
            "trace": {"kind": "synthetic", "num_requests": 12, "input_tokens": 16, "output_tokens": 8, "rate_rps": 4}
        },
    )
    r = moeperf_run(str(exp))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = run_dir_of(tmp_path)
    res = load_result(run_dir)
    base, killed = res["arms"]
    assert base["status"] == "ok" and base["requests_succeeded"] == 12
    assert killed["status"] == "failed"
    assert "engine died during the replay" in killed["failure_reason"]
    assert killed["engine_log_tail"]  # the user sees what the engine printed last
    assert killed["requests_succeeded"] >= 2
    assert killed["requests_succeeded"] < 12
    assert killed["requests_not_sent"] + killed["requests_failed"] == 12 - killed["requests_succeeded"]
    on_disk = [json.loads(line) for line in (run_dir / killed["records_file"]).read_text().splitlines()]
    assert sum(1 for rec in on_disk if rec["error"] is None) == killed["requests_succeeded"]
    assert "all-optimizations FAILED" in r.stdout


def test_ctrl_c_stops_engines_and_writes_what_finished(tmp_path):
    exp = small_experiment(
        tmp_path,
        arms=[{"name": "only"}],
        workload={
            "trace": {"kind": "synthetic", "num_requests": 400, "input_tokens": 16, "output_tokens": 8, "rate_rps": 4}
        },
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "run", str(exp)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
        cwd=REPO,
        # A shell's background job starts with SIGINT ignored and Python keeps it so: give the driver what an
        # interactive Ctrl-C reaches, whatever launched this test.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:  # block on the driver's own words, not on a clock
        seen.append(line)
        if "engine healthy" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, "".join(seen) + out
    res = load_result(run_dir_of(tmp_path))
    assert res["status"] == "interrupted"
    assert res["arms"][0]["status"] == "failed"
    assert res["arms"][0]["requests_sent"] < 400


def test_arm_that_cannot_be_placed_fails_fast_with_what_is_missing(tmp_path):
    exp = small_experiment(tmp_path, engine={"cpus_per_engine": 64, "placement_timeout_s": 5}, arms=[{"name": "huge"}])
    r = moeperf_run(str(exp), timeout=180)
    assert r.returncode == 1
    arm = load_result(run_dir_of(tmp_path))["arms"][0]
    assert arm["status"] == "failed"
    assert "could not reserve" in arm["failure_reason"] and "'CPU': 64" in arm["failure_reason"]
    assert "cluster total" in arm["failure_reason"]


def test_engine_that_cannot_start_fails_its_arm_with_the_engines_own_error(tmp_path):
    """The EngineActor's start error crosses Ray intact: the reason says why, the log tail is kept."""
    exp = small_experiment(tmp_path, engine={"extra_args": ["--no-such-vllm-flag"]}, arms=[{"name": "broken"}])
    r = moeperf_run(str(exp), timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    arm = load_result(run_dir_of(tmp_path))["arms"][0]
    assert arm["status"] == "failed"
    assert arm["failure_reason"].startswith("vLLM server exited with code"), arm["failure_reason"]
    assert "--no-such-vllm-flag" in (arm["engine_log_tail"] or "")
