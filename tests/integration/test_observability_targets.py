"""A real Prometheus with the shipped config follows the targets file as endpoints come and go.

No vLLM and no Ray: the harness's client-metrics endpoint (cluster.observability.client_metrics) is registered
through cluster.observability.prom_targets exactly as the run driver does, and Prometheus must discover it,
scrape its series with the run's labels, and drop it when it is removed. Waits poll with deadlines.
"""

from __future__ import annotations

import shutil
import time

import pytest

from cluster.observability.client_metrics import ClientMetrics
from cluster.observability.prom_targets import TargetsFile
from dashboards.prom_server import Prometheus, render_config
from workloads.records import RequestRecord

pytestmark = [pytest.mark.integration]


def _wait_for(cond, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := cond():
            return result
        time.sleep(0.25)  # polling interval of a condition with a deadline
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture
def prometheus(tmp_path):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (Debian package 'prometheus'; scripts/setup.sh installs it)")
    targets = tmp_path / "targets"
    targets.mkdir()
    prom = Prometheus(tmp_path, "")
    prom.config.write_text(render_config(targets, tmp_path / "ray", "1s", f"127.0.0.1:{prom.port}"))
    prom.start()
    yield prom, targets
    prom.stop()


def test_client_endpoint_is_discovered_scraped_and_dropped(prometheus):
    prom, targets = prometheus
    metrics = ClientMetrics("run-x", "exp")
    url = metrics.serve("127.0.0.1")
    tf = TargetsFile(targets / "client-run-x.json", "run-x")
    try:
        metrics.run_active(True)
        rec = RequestRecord(
            index=0, arm="base", client=1, intended_send_s=0.0, actual_send_s=0.0, first_token_s=0.2,
            token_times_s=[0.2, 0.25], end_s=0.25, prompt_tokens_requested=8, output_tokens_requested=2,
            prompt_tokens=8, output_tokens=2,
        )  # fmt: skip
        metrics.observe(rec, node="10.0.0.9")
        tf.add_endpoint("driver", url, {})
        q = 'moeperf_client_requests_total{run="run-x", arm="base", client="1", node="10.0.0.9", status="ok"}'
        sample = _wait_for(lambda: prom.query(q), "the client endpoint to be scraped")
        assert sample[0]["metric"]["job"] == "moeperf-client"
        assert metrics.wait_scraped(timeout_s=30) is True  # the driver's end-of-run wait returns on a real scrape
        tf.remove("driver")
        _wait_for(
            lambda: not any(t["labels"].get("job") == "moeperf-client" for t in prom.targets()),
            "Prometheus to drop the removed target",
        )
    finally:
        tf.close()
        metrics.close()


def test_engine_target_labels_reach_every_series(prometheus, tmp_path):
    """A stand-in engine (any /metrics endpoint) gets run, arm and node from the targets file."""
    prom, targets = prometheus
    stand_in = ClientMetrics("ignored", "exp")
    url = stand_in.serve("127.0.0.1")
    tf = TargetsFile(targets / "engines-run-y.json", "run-y")
    try:
        stand_in.run_active(True)
        tf.add("arm-a", url.removesuffix("/metrics"), {"node": "10.0.0.7"})
        up = _wait_for(lambda: prom.query('up{job="moeperf-engines", run="run-y"} == 1'), "the engine target up")
        assert up[0]["metric"]["arm"] == "arm-a" and up[0]["metric"]["node"] == "10.0.0.7"
    finally:
        tf.close()
        stand_in.close()
