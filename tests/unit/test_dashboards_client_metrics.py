"""cluster.observability.client_metrics: what one finished record adds to the harness's Prometheus endpoint."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.observability.client_metrics import METRICS, RUN_METRICS, ClientMetrics
from experiment.slo import SloSpec
from workloads.records import RequestRecord


def record(arm: str = "a", client: int = 0, ttft: float = 0.1, gap: float = 0.05, n: int = 4, **kw) -> RequestRecord:
    times = [0.01 + ttft + i * gap for i in range(n)]
    base = dict(
        index=0, arm=arm, client=client, intended_send_s=0.0, actual_send_s=0.01, first_token_s=times[0],
        token_times_s=times, end_s=times[-1], prompt_tokens_requested=16, output_tokens_requested=n,
        prompt_tokens=16, output_tokens=n,
    )  # fmt: skip
    base.update(kw)
    return RequestRecord(**base)


def samples(m: ClientMetrics) -> dict[tuple[str, frozenset], float]:
    assert m.url is not None
    with urllib.request.urlopen(m.url, timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


@pytest.fixture
def metrics():
    m = ClientMetrics("run-1", "exp", SloSpec(ttft_s=0.5, tpot_s=0.1))
    m.serve("127.0.0.1")
    yield m
    m.close()


def lab(**kw: str) -> frozenset:
    return frozenset({"run": "run-1", "arm": "a", "client": "0", "node": "n1", "level": "none", **kw}.items())


def test_ok_failed_goodput_and_tokens(metrics):
    metrics.observe(record(), node="n1")  # meets the SLOs
    metrics.observe(record(ttft=1.0), node="n1")  # too slow a first token: not goodput
    metrics.observe(
        record(first_token_s=None, token_times_s=[], end_s=None, output_tokens=None, error="boom", error_kind="reset"),
        node="n1",
    )
    s = samples(metrics)
    assert s[("moeperf_client_requests_total", lab(status="ok"))] == 2
    assert s[("moeperf_client_requests_total", lab(status="failed"))] == 1
    assert s[("moeperf_client_errors_total", lab(kind="reset"))] == 1
    assert s[("moeperf_client_slo_met_requests_total", lab())] == 1
    assert s[("moeperf_client_output_tokens_total", lab())] == 8
    assert s[("moeperf_client_prompt_tokens_total", lab())] == 32
    assert s[("moeperf_client_ttft_seconds_count", lab())] == 2
    assert s[("moeperf_client_ttft_seconds_sum", lab())] == pytest.approx(1.1)
    assert s[("moeperf_client_itl_seconds_count", lab())] == 6  # 3 gaps per successful request
    assert s[("moeperf_client_e2e_seconds_count", lab())] == 2
    assert s[("moeperf_client_send_lag_seconds_count", lab())] == 3
    assert s[("moeperf_client_slo_seconds", frozenset({"run": "run-1", "objective": "ttft"}.items()))] == 0.5
    assert ("moeperf_client_slo_seconds", frozenset({"run": "run-1", "objective": "e2e"}.items())) not in s


def test_arm_and_run_markers(metrics):
    metrics.run_active(True)
    metrics.arm_active("a", 0, True)
    s = samples(metrics)
    assert s[("moeperf_run_active", frozenset({"run": "run-1", "experiment": "exp"}.items()))] == 1
    assert s[("moeperf_arm_replay_active", frozenset({"run": "run-1", "arm": "a", "round": "0"}.items()))] == 1
    metrics.arm_active("a", 0, False)
    s = samples(metrics)
    assert s[("moeperf_arm_replay_active", frozenset({"run": "run-1", "arm": "a", "round": "0"}.items()))] == 0


def test_every_declared_metric_is_exposed_with_its_labels(metrics):
    metrics.observe(record(), node="n1")
    metrics.observe(record(error="x", error_kind="timeout", end_s=None), node="n1")
    metrics.run_active(True)
    metrics.arm_active("a", 0, True)
    metrics.level_active("a", "c=1")
    names = {name for name, _ in samples(metrics)}
    for name, (kind, _, _) in {**METRICS, **RUN_METRICS}.items():
        assert (name + "_count" if kind == "histogram" else name) in names, name
        assert name.endswith(("_total", "_seconds", "_active")), f"{name}: unit/suffix"


def test_wait_scraped_does_not_wait_without_a_scraper():
    m = ClientMetrics("r", "e")
    m.serve("127.0.0.1")
    try:
        m.observe(record(), node="n")
        assert m.wait_scraped(timeout_s=30) is False  # returns at once: nobody ever scraped
    finally:
        m.close()


def test_wait_scraped_returns_after_the_next_scrape(metrics):
    samples(metrics)  # a scraper exists
    metrics.observe(record(), node="n1")
    t = threading.Thread(target=samples, args=(metrics,))
    done: list[bool] = []
    waiter = threading.Thread(target=lambda: done.append(metrics.wait_scraped(timeout_s=30)))
    waiter.start()
    t.start()
    t.join()
    waiter.join(timeout=30)
    assert done == [True]
    metrics.observe(record(), node="n1")
    assert metrics.wait_scraped(timeout_s=0.2) is False  # nothing scraped since: times out


def test_readme_table_lists_every_client_metric():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "dashboards" / "README.md").read_text()
    for name, (kind, _, help_text) in {**METRICS, **RUN_METRICS}.items():
        assert f"| `{name}` | {kind} |" in readme, name
        assert help_text in readme, name


def test_sweep_records_carry_their_level_label_and_one_level_is_active_per_arm():
    m = ClientMetrics("run-1", "exp", SloSpec(ttft_s=0.5), level_labels=["c=1", "c=4"])
    m.serve("127.0.0.1")
    try:
        m.observe(record().model_copy(update={"level": 1}), node="n1")
        m.level_active("a", "c=1")
        m.level_active("a", "c=4")
        s = samples(m)
    finally:
        m.close()
    assert s[("moeperf_client_requests_total", lab(status="ok", level="c=4"))] == 1
    active = {dict(k)["level"]: v for (name, k), v in s.items() if name == "moeperf_sweep_level_active"}
    assert active == {"c=1": 0, "c=4": 1}
