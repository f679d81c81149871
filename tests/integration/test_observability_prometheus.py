"""Every PromQL query of the dashboards returns data from a real Prometheus that scraped a real run.

A Prometheus 2.42 (Debian) on 127.0.0.1 with the shipped config (paths moved to this test's folders,
1 s scrapes) scrapes a short real ``moeperf run`` on vLLM CPU engines: the engines through the run's
file_sd targets, the client metrics from the driver, Ray's metrics through Ray's service-discovery
file. Then every expression of the generated dashboards, with the template variables filled in for
that run, is run over the run's time range and must return at least one finite sample. Queries that
cannot return data on a CPU box are allowed to be empty only through dashboards.check.EMPTY_ON_CPU, and the
test reports which ones were skipped and why. No sleeps as synchronisation: every wait polls
Prometheus's API with a deadline.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from dashboards.check import check_queries
from dashboards.cli import main as cli_main
from dashboards.prom_server import Prometheus, render_config
from result_format.run_result import load_run
from tests.integration.conftest import REPO, clean_env, run_dir_of, small_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARMS = ("baseline", "all-optimizations")
LEVELS = {2: 8, 3: 9, 4: 12}
"""Request rate (req/s, evenly spaced) -> requests of the sweep's levels: about 3-4 s each, so that every
engine is up for several of Prometheus's 1 s scrapes even on a loaded box."""
WARMUP_FRACTION = 0.25
REQUESTS = sum(LEVELS.values())


def _wait_for(cond, what: str, timeout_s: float = 60.0, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every_s)  # polling interval of a condition with a deadline, not a synchronisation
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def ray_tmp():
    """A short private Ray temp dir: Ray's socket paths must stay under 107 characters."""
    d = tempfile.mkdtemp(prefix="mpobs-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, ray_tmp):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (Debian package 'prometheus'; scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("prom")
    targets = root / "targets"
    targets.mkdir()
    work = root / "prom"
    work.mkdir()
    prom = Prometheus(work, "")
    prom.config.write_text(
        render_config(targets, ray_tmp / "ray", scrape_interval="1s", self_address=f"127.0.0.1:{prom.port}")
    )
    prom.start()
    yield prom, targets
    prom.stop()


@dataclass(frozen=True)
class SweepRun:
    prom: Prometheus
    run_dir: Path
    t0: float
    t1: float
    stdout: str


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory, prometheus, ray_tmp) -> SweepRun:
    """One real run shared by this module's tests: two arms by three rate levels on vLLM CPU engines."""
    prom, targets = prometheus
    tmp_path = tmp_path_factory.mktemp("obs-sweep")
    exp = small_experiment(
        tmp_path,
        workload={"trace": {"kind": "synthetic", "num_requests": max(LEVELS.values()), "input_tokens": 16,
                            "output_tokens": 8}},
        sweep={
            "levels": [{"kind": "rate", "rate_rps": r, "process": "constant", "requests": n}
                       for r, n in LEVELS.items()],
            "warmup_fraction": WARMUP_FRACTION,
        },
        metrics={"targets_dir": str(targets), "ray_dashboard": True, "final_scrape_timeout_s": 20},
    )  # fmt: skip
    env = clean_env()
    env["RAY_TMPDIR"] = str(ray_tmp)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "run", str(exp)],
        capture_output=True, text=True, timeout=900, env=env, cwd=REPO,
    )  # fmt: skip
    t1 = time.time()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = run_dir_of(tmp_path)
    assert not (targets / f"engines-{run_dir.name}.json").exists(), "the run left its targets file behind"
    return SweepRun(prom, run_dir, t0, t1, proc.stdout + proc.stderr)


def test_two_arms_by_three_levels_every_record_has_its_level_and_each_level_its_summary(sweep_run):
    result = load_run(sweep_run.run_dir)
    assert result.status == "ok" and [a.name for a in result.arms] == list(ARMS)
    for arm in result.arms:
        assert arm.status == "ok" and arm.requests_succeeded == sum(LEVELS.values())
        assert [lv.label for lv in arm.levels] == [f"{r} req/s" for r in LEVELS]
        for lv, (r, n) in zip(arm.levels, LEVELS.items(), strict=True):
            assert lv.load == r and lv.load_unit == "req/s" and lv.requests_planned == n
            assert lv.warmup_requests == math.ceil(WARMUP_FRACTION * n)
            assert lv.summary is not None and lv.summary.ttft_s.count == n - lv.warmup_requests
            recs = [r for r in arm.columns.to_records() if r.level == lv.index]
            assert sorted(r.index for r in recs) == list(range(n))
            assert {r.index for r in recs if r.warmup} == set(range(lv.warmup_requests))
        # One engine served the levels one after another, in the listed order (round 0).
        starts = {s.level: s.start_epoch_s for s in arm.shards}
        assert starts[0] < starts[1] < starts[2]
        records = arm.columns.to_records()
        firsts = [min(r.actual_send_s for r in records if r.level == i and r.actual_send_s is not None)
                  for i in range(3)]  # fmt: skip
        ends = [max(r.end_s for r in records if r.level == i and r.end_s is not None) for i in range(3)]
        assert all(starts[i] + firsts[i] > starts[i - 1] + ends[i - 1] for i in (1, 2))  # drained in between
        # Every level's requests left on time, the first level's too: its start is chosen after the engine's
        # expert counts are read (ArmRunner.open_round), a read that waits up to the plugin's 5 s publish period
        # and, made after the start was chosen, sent the first wave late (0.6-0.95 s on the H200, 2026-12-03).
        lags_s = [r.actual_send_s - r.intended_send_s for r in records if r.actual_send_s is not None]
        assert len(lags_s) == sum(LEVELS.values()) and max(lags_s) < 0.5, max(lags_s)
    assert "arm baseline: level 4 req/s (12 requests)" in sweep_run.stdout


def test_every_dashboard_query_returns_data_from_a_real_run(sweep_run):
    prom, t0, t1 = sweep_run.prom, sweep_run.t0, sweep_run.t1
    run_id = sweep_run.run_dir.name
    # The driver waited for a scrape after its last record; still, poll until Prometheus has it all.
    total = f'sum(max_over_time(moeperf_client_requests_total{{run="{run_id}"}}[1h]))'
    _wait_for(
        lambda: (r := prom.query(total)) and float(r[0]["value"][1]) >= REQUESTS * len(ARMS),
        f"{REQUESTS * len(ARMS)} client requests of run {run_id} in Prometheus",
    )
    # The relabel rule of DESIGN.md: vLLM's names keep their colon.
    span = {"start": f"{t0:.3f}", "end": f"{t1 + 5:.3f}"}
    assert prom.api("series", {"match[]": f'{{__name__=~"vllm:.+", run="{run_id}"}}', **span}), "no vllm:* series"
    vllm_ = prom.api("series", {"match[]": f'{{__name__=~"vllm_.+", run="{run_id}"}}', **span})
    assert vllm_ == [], "vllm_* names: the relabel rule did not apply"
    # The targets file's run/arm/node win over the plugin's own labels (host name kept as host).
    engine_nodes = {
        s["node"] for s in prom.api("series", {"match[]": f'up{{job="moeperf-engines", run="{run_id}"}}', **span})
    }
    info = prom.api("series", {"match[]": f'moeperf_plugin_info{{run="{run_id}"}}', **span})
    assert info and {s["arm"] for s in info} == set(ARMS), info
    assert all(s["node"] in engine_nodes and s.get("host") and "exported_node" not in s for s in info), info

    start, end = t0, t1 + 5
    outcomes = check_queries(prom, run_id, ARMS, start, end)
    empty_allowed = [f"{o.query.label}: {o.empty_on_cpu}" for o in outcomes if not o.has_data and o.empty_on_cpu]
    failures = [f"{o.query.label}: {o.expr}" for o in outcomes if not o.has_data and not o.empty_on_cpu]
    if empty_allowed:
        report = "\n".join(empty_allowed)
        print(f"\nskipped (no data on CPU, allow-listed) {len(empty_allowed)} of {len(outcomes)} queries:\n{report}")
        warnings.warn(f"{len(empty_allowed)} dashboard queries skipped on CPU (allow-listed): {report}", stacklevel=1)
    assert not failures, f"{len(failures)} of {len(outcomes)} dashboard queries returned no data:\n" + "\n".join(
        failures
    )
    # The same check as a command, as a user runs it after a GPU run (there without --cpu).
    assert cli_main(["check", str(sweep_run.run_dir), "--prometheus", prom.url, "--cpu"]) == 0
