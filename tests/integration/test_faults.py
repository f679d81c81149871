"""Faults on real engines: one dies mid-run, Ctrl-C or SIGTERM, the driver SIGKILLed, the cluster lacks resources."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import (
    REPO,
    clean_env,
    load_result,
    moeperf,
    moeperf_run,
    records_on_disk,
    run_dir_of,
    served_name_for,
    small_experiment,
    vllm_servers,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_killed_engine_and_a_raising_dispatcher_each_fail_their_own_arm_and_keep_records(tmp_path, monkeypatch):
    """Two faults in one run, one per arm, both engines up at once: the engine of all-optimizations is
    SIGKILLed after 2 records; baseline's client dispatcher raises after 2 (a bug in the client's send
    loop). Each arm fails with its own reason, keeps exactly what finished, and nothing hangs.

    The trace spans 20 s, so the kill (fired from the records' consumer) lands long before it ends even on
    a loaded 2-core box; the dispatcher fault sends exactly 2 requests and waits for both to finish.
    """
    n = 80
    exp = small_experiment(
        tmp_path,
        placement="parallel",
        chaos={"kill_engine_after_records": {"all-optimizations": 2}},
        workload={
            "trace": {"kind": "synthetic", "num_requests": n, "input_tokens": 16, "output_tokens": 8, "rate_rps": 4}
        },
    )
    monkeypatch.setenv("MOEPERF_TEST_FAULTS", json.dumps({"fail_dispatch_after_records": {"baseline": 2}}))
    r = moeperf_run(str(exp))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = run_dir_of(tmp_path)
    res = load_result(run_dir)
    assert res["error"] is None
    raised, killed = res["arms"]
    for arm in (raised, killed):
        on_disk = records_on_disk(run_dir / arm["records_file"])
        assert sum(1 for rec in on_disk if rec["error"] is None) == arm["requests_succeeded"], arm["name"]
        assert {rec["arm"] for rec in on_disk} == {arm["name"]}
        assert arm["status"] == "failed"

    assert "replay failed in the dispatcher: InjectedDispatchFault" in raised["failure_reason"], raised
    assert "engine died" not in raised["failure_reason"]
    assert raised["requests_succeeded"] == 2 and raised["requests_not_sent"] == n - 2
    assert "baseline FAILED: round 0: client(s) [0] did not finish: replay failed in the dispatcher" in r.stdout

    assert "engine died during the replay" in killed["failure_reason"]
    assert killed["engine_log_tail"]  # the user sees what the engine printed last
    assert 2 <= killed["requests_succeeded"] < n
    assert killed["requests_not_sent"] + killed["requests_failed"] == n - killed["requests_succeeded"]
    assert "all-optimizations FAILED" in r.stdout


def test_a_hung_engine_and_a_full_disk_each_fail_their_own_arm_the_run_ends_and_the_engine_is_cleaned_up(tmp_path):
    """Two more faults in one run, both engines up at once: the engine of "hung" is SIGSTOPped after 2 records
    (alive, holding its port, answering nothing); the records file of "full" fails every write after 2 records
    (ENOSPC). The hung arm's requests time out and it fails as hung; the full arm fails naming its file and
    keeps the 2 records on disk; the run ends and no engine (the stopped one included) is left behind."""
    n = 40
    exp = small_experiment(
        tmp_path,
        placement="parallel",
        arms=[{"name": "hung"}, {"name": "full"}],
        client={"warmup_requests": 1, "request_timeout_s": 8.0},
        chaos={"stop_engine_after_records": {"hung": 2}, "records_unwritable_after_records": {"full": 2}},
        workload={
            "trace": {"kind": "synthetic", "num_requests": n, "input_tokens": 16, "output_tokens": 8, "rate_rps": 4}
        },
    )
    r = moeperf_run(str(exp))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = run_dir_of(tmp_path)
    res = load_result(run_dir)
    hung, full = res["arms"]

    assert hung["status"] == "failed" and hung["failure_reason"].startswith("engine hung during round 0"), hung
    failed = [rec for rec in hung["records"] if rec["error"] is not None]
    assert failed and all(rec["error_kind"] == "timeout" for rec in failed)  # sent to a frozen engine: timed out
    assert len(hung["records"]) == n  # every request ended as a record: done, or timed out
    assert len(records_on_disk(run_dir / hung["records_file"])) == n

    assert full["status"] == "failed"
    kept = records_on_disk(run_dir / full["records_file"])
    assert len(kept) >= 2 and [rec["index"] for rec in full["records"]] == [rec["index"] for rec in kept]
    reason = full["failure_reason"]
    assert f"records file records/full.arrows stopped taking writes after {len(kept)} record(s)" in reason, reason
    assert "No space left on device" in reason


def _driver_running_one_long_arm(tmp_path):
    """``moeperf run`` of one arm replaying 400 requests over 100 s, stopped at the first line that says its
    engine is healthy: the driver is then mid-run, with the engine up and requests about to flow."""
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
    return proc, seen


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_stop_engines_and_write_what_finished(tmp_path, sig):
    """SIGTERM is what `ray job stop`, `timeout` and CI runners send: the same clean stop as Ctrl-C, exit 130."""
    proc, seen = _driver_running_one_long_arm(tmp_path)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, "".join(seen) + out
    run_dir = run_dir_of(tmp_path)
    res = load_result(run_dir)
    assert res["status"] == "interrupted"
    (arm,) = res["arms"]
    assert arm["status"] == "failed" and arm["requests_sent"] < 400
    on_disk = records_on_disk(run_dir / arm["records_file"])
    assert len(on_disk) == len(arm["records"])  # every record on disk is in the result, and no more


def test_a_sigkilled_driver_leaves_its_records_and_moeperf_recover_makes_them_a_result(tmp_path):
    proc, seen = _driver_running_one_long_arm(tmp_path)
    run_dir = run_dir_of(tmp_path)
    records = run_dir / "records" / "only.arrows"  # the journal: sealed into Parquet only when the arm ends
    assert _until(lambda: len(records_on_disk(records)) >= 3, 120), "".join(seen)
    proc.kill()  # SIGKILL: no handler runs, nothing is written after this
    proc.communicate(timeout=60)
    assert not (run_dir / "result.json").exists()
    # Ray takes the driver's actors down, the orphan guard its vLLM server with them.
    assert _until(lambda: not vllm_servers(served_name_for(tmp_path)), 120), "the killed run's engine is still up"
    on_disk = records_on_disk(records)  # every whole batch; a batch cut by the kill is not a record

    r = moeperf("recover", str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    res = load_result(run_dir)
    assert res["status"] == "interrupted" and "moeperf recover" in res["error"]
    (arm,) = res["arms"]
    assert sorted(rec["index"] for rec in arm["records"]) == sorted(rec["index"] for rec in on_disk)
    assert arm["requests_succeeded"] == sum(1 for rec in on_disk if rec["error"] is None) >= 3
    rep = moeperf("report", str(run_dir))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert (run_dir / "report.html").exists()


def _until(condition, deadline_s: float) -> bool:
    """Poll a condition about other processes (a file another process appends, a process that must exit);
    there is nothing to block on across processes. True once it holds, False at the deadline."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def test_arm_that_cannot_be_placed_fails_fast_with_what_is_missing(tmp_path):
    exp = small_experiment(tmp_path, engine={"cpus_per_engine": 64, "placement_timeout_s": 5}, arms=[{"name": "huge"}])
    r = moeperf_run(str(exp), timeout=180)
    assert r.returncode == 1
    arm = load_result(run_dir_of(tmp_path))["arms"][0]
    assert arm["status"] == "failed"
    assert "could not reserve" in arm["failure_reason"] and "'CPU': 64" in arm["failure_reason"]
    assert "cluster total" in arm["failure_reason"]


def test_engine_that_cannot_start_fails_its_arm_with_the_engines_own_error(tmp_path):
    """The EngineActor's start error crosses Ray intact: the reason says why, the log tail is kept.

    With shared_warm the first engine to start is the setting's warm-up engine: its failure fails the
    arms of that setting without starting them, with the engine's own error and log tail.
    """
    exp = small_experiment(
        tmp_path,
        engine={"extra_args": ["--no-such-vllm-flag"], "cache_state": "shared_warm"},
        arms=[{"name": "broken"}, {"name": "broken-aa", "control_of": "broken"}],
    )
    r = moeperf_run(str(exp), timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    res = load_result(run_dir_of(tmp_path))
    (warm,) = res["warmup_pass"]
    assert warm["setting"] == "broken" and warm["arms"] == ["broken", "broken-aa"] and warm["status"] == "failed"
    assert warm["failure_reason"].startswith("vLLM server exited with code"), warm["failure_reason"]
    for arm in res["arms"]:
        assert arm["status"] == "failed" and arm["engine"] is None  # never started
        assert arm["failure_reason"].startswith("warm-up pass of setting broken failed: vLLM server exited with code")
        assert "--no-such-vllm-flag" in (arm["engine_log_tail"] or "")
    assert r.stdout.count("starting engine") == 1  # the warm-up engine only


def test_a_driver_error_after_the_warm_up_and_first_arm_still_writes_the_result(tmp_path, monkeypatch):
    """shared_warm with an A/A pair: one warm-up engine (the pair's one setting) runs before either arm, into
    the run's shared JIT cache, replaying half the round (warmup_pass_fraction); then the driver raises after
    its second turn (the first arm). The result is written anyway: failed, with the error, the warm-up, the
    first arm's records (the whole round), and the second arm failed."""
    exp = small_experiment(
        tmp_path,
        engine={"cache_state": "shared_warm", "enforce_eager": True, "warmup_pass_fraction": 0.5},
        arms=[{"name": "a"}, {"name": "a-aa", "control_of": "a"}],
    )
    monkeypatch.setenv("MOEPERF_TEST_FAULTS", json.dumps({"driver_error_after_turns": 2}))  # the CLI inherits it
    r = moeperf_run(str(exp), timeout=500)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-6000:]
    run_dir = run_dir_of(tmp_path)
    res = load_result(run_dir)
    assert res["status"] == "failed"
    assert res["error"] == "InjectedDriverFault: injected driver fault after 2 turn(s)"
    assert "run FAILED: InjectedDriverFault" in r.stdout
    (warm,) = res["warmup_pass"]
    assert warm["setting"] == "a" and warm["arms"] == ["a", "a-aa"] and warm["status"] == "ok", warm
    assert warm["requests"] == warm["requests_succeeded"] == 3 and warm["startup_s"] > 0  # the first half
    warm_records = records_on_disk(run_dir / warm["records_file"])
    assert warm["records_file"] == "records/warmup-a.parquet" and len(warm_records) == 3
    assert {rec["arm"] for rec in warm_records} == {"warmup-a"}  # never mixed into an arm
    assert out.index("warm-up pass: setting a") < out.index("arm a: round 0: starting engine")
    # the turns that ran, both ended before the driver raised; a-aa's never started
    assert [(t["kind"], t["arms"], t["ended_at"] is not None) for t in res["turns"]] == [
        ("warmup", ["a"], True), ("measured", ["a"], True),
    ]  # fmt: skip
    first, second = res["arms"]
    assert first["status"] == "ok" and first["requests_succeeded"] == 6 and len(first["records"]) == 6
    assert len(records_on_disk(run_dir / first["records_file"])) == 6
    assert {rec["arm"] for rec in first["records"]} == {"a"}  # the warm-up's records are not the arm's
    cache = run_dir / "jit-cache"
    assert first["engine"]["env"]["VLLM_CACHE_ROOT"].startswith(str(cache)) and cache.is_dir()
    assert second["status"] == "failed" and second["engine"] is None
    assert second["failure_reason"] == (
        "run stopped after 0 of 1 round(s): InjectedDriverFault: injected driver fault after 2 turn(s)"
    )
