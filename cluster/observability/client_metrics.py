"""The harness's own metrics, as the client measured them, served for Prometheus by the run driver.

Every finished request record already passes through the driver (client actors stream them there
to be appended to disk), so the driver is where they are observed: one ``/metrics`` endpoint per
run that lives as long as the run, instead of one per client actor that dies (and takes its last
counts with it) when the arm stops. Labels ``run``, ``arm``, ``client`` (the actor's shard index)
and ``node`` (the client actor's node) make the series of different runs, arms and client actors
separable. Times are the client's view: what a user of the service would see, queueing included.

A private ``CollectorRegistry`` keeps these apart from anything else in the driver process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import Collector

from experiment.slo import SloSpec, meets_slo
from workloads.records import RequestRecord

LABELS = ("run", "arm", "client", "node", "level")
NO_LEVEL = "none"
"""The ``level`` label of a run without a sweep."""

TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 40, 80)
TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)
E2E_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600)
LAG_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)

# name -> (kind, extra labels, help); the single source for the endpoint and for docs/tests.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "moeperf_client_requests_total": ("counter", ("status",), "Finished requests by status (ok, failed)."),
    "moeperf_client_errors_total": ("counter", ("kind",), "Failed requests by error kind."),
    "moeperf_client_slo_met_requests_total": ("counter", (), "Successful requests within every SLO (goodput)."),
    "moeperf_client_prompt_tokens_total": ("counter", (), "Prompt tokens of successful requests (server usage)."),
    "moeperf_client_output_tokens_total": ("counter", (), "Output tokens of successful requests (server usage)."),
    "moeperf_client_ttft_seconds": ("histogram", (), "Client-side time to first token."),
    "moeperf_client_tpot_seconds": ("histogram", (), "Client-side mean time per output token after the first."),
    "moeperf_client_itl_seconds": ("histogram", (), "Client-side gaps between consecutive output tokens."),
    "moeperf_client_e2e_seconds": ("histogram", (), "Client-side end-to-end request latency."),
    "moeperf_client_send_lag_seconds": (
        "histogram",
        (),
        "Actual minus intended send time without in-flight-cap waits: the load generator's own lag.",
    ),
}
RUN_METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "moeperf_client_slo_seconds": ("gauge", ("run", "objective"), "The SLO limits goodput is counted against."),
    "moeperf_run_active": ("gauge", ("run", "experiment"), "1 while the run is in progress."),
    "moeperf_arm_replay_active": ("gauge", ("run", "arm", "round"), "1 while the arm replays that round, else 0."),
    "moeperf_sweep_level_active": (
        "gauge",
        ("run", "arm", "level"),
        "1 for the sweep level the arm is replaying now, 0 for its other levels (absent without a sweep).",
    ),
}


class _ScrapeClock(Collector):
    """Exports nothing; notes when Prometheus last scraped, so the end of a run can wait for one."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.last_scrape = 0.0

    def describe(self) -> Iterable[Any]:
        return []  # keeps registration from calling collect()

    def collect(self) -> Iterable[Any]:
        with self.cond:
            self.last_scrape = time.time()
            self.cond.notify_all()
        return []


class ClientMetrics:
    """Observe every finished record with ``observe``; serve with ``serve``; ``close`` at the end of the run."""

    def __init__(
        self, run_id: str, experiment: str, slo: SloSpec | None = None, level_labels: Sequence[str] = ()
    ) -> None:
        self.run_id, self.experiment, self.slo = run_id, experiment, slo or SloSpec()
        self.level_labels = dict(enumerate(level_labels))  # sweep position -> label, the `level` of every series
        self._current_level: dict[str, str] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self._objs: dict[str, Any] = {}
        buckets = {
            "moeperf_client_ttft_seconds": TTFT_BUCKETS_S,
            "moeperf_client_tpot_seconds": TOKEN_BUCKETS_S,
            "moeperf_client_itl_seconds": TOKEN_BUCKETS_S,
            "moeperf_client_e2e_seconds": E2E_BUCKETS_S,
            "moeperf_client_send_lag_seconds": LAG_BUCKETS_S,
        }
        for name, (kind, extra, help_text) in METRICS.items():
            labels = (*LABELS, *extra)
            if kind == "counter":
                self._objs[name] = Counter(name.removesuffix("_total"), help_text, labels, registry=self.registry)
            else:
                self._objs[name] = Histogram(name, help_text, labels, buckets=buckets[name], registry=self.registry)
        for name, (_, labels, help_text) in RUN_METRICS.items():
            self._objs[name] = Gauge(name, help_text, labels, registry=self.registry)
        for objective, limit in (("ttft", self.slo.ttft_s), ("tpot", self.slo.tpot_s), ("e2e", self.slo.e2e_s)):
            if limit is not None:
                self._objs["moeperf_client_slo_seconds"].labels(run_id, objective).set(limit)
        self._clock = _ScrapeClock()
        self.registry.register(self._clock)
        self._last_observed = 0.0
        self._server: Any = None
        self.url: str | None = None

    # --- what the driver calls -------------------------------------------------------------------
    def observe(self, record: RequestRecord, node: str) -> None:
        """One finished request (ok or failed) of ``record.arm``, sent by client actor ``record.client`` on ``node``."""
        level = NO_LEVEL if record.level is None else self.level_labels.get(record.level, str(record.level))
        base = (self.run_id, record.arm, str(record.client), node, level)
        o = self._objs
        if not record.ok:
            o["moeperf_client_requests_total"].labels(*base, "failed").inc()
            o["moeperf_client_errors_total"].labels(*base, record.error_kind or "other").inc()
        else:
            o["moeperf_client_requests_total"].labels(*base, "ok").inc()
            if meets_slo(record, self.slo):
                o["moeperf_client_slo_met_requests_total"].labels(*base).inc()
            o["moeperf_client_prompt_tokens_total"].labels(*base).inc(record.prompt_tokens or 0)
            o["moeperf_client_output_tokens_total"].labels(*base).inc(
                record.output_tokens if record.output_tokens is not None else len(record.token_times_s)
            )
            for name, value in (
                ("moeperf_client_ttft_seconds", record.ttft_s),
                ("moeperf_client_tpot_seconds", record.tpot_s),
                ("moeperf_client_e2e_seconds", record.e2e_s),
            ):
                if value is not None:
                    o[name].labels(*base).observe(value)
            itl = o["moeperf_client_itl_seconds"].labels(*base)
            for gap in record.itl_s:
                itl.observe(gap)
        lag_ms = record.dispatch_lag_ms
        if lag_ms is not None:
            o["moeperf_client_send_lag_seconds"].labels(*base).observe(max(0.0, lag_ms / 1000.0))
        self._last_observed = time.time()

    def run_active(self, active: bool) -> None:
        self._objs["moeperf_run_active"].labels(self.run_id, self.experiment).set(1 if active else 0)
        self._last_observed = time.time()

    def arm_active(self, arm: str, round_index: int, active: bool) -> None:
        """Marks an arm's replay (Grafana draws these as annotations: which arm ran when)."""
        self._objs["moeperf_arm_replay_active"].labels(self.run_id, arm, str(round_index)).set(1 if active else 0)
        self._last_observed = time.time()

    def level_active(self, arm: str, level: str) -> None:
        """The arm now replays ``level``: its gauge 1, the arm's previous level 0 (Grafana: the current level)."""
        gauge = self._objs["moeperf_sweep_level_active"]
        previous = self._current_level.get(arm)
        if previous is not None:
            gauge.labels(self.run_id, arm, previous).set(0)
        gauge.labels(self.run_id, arm, level).set(1)
        self._current_level[arm] = level
        self._last_observed = time.time()

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start the HTTP endpoint (port 0: any free one); returns its URL for the targets file."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        self.url = f"http://{host}:{server.server_port}/metrics"
        return self.url

    def wait_scraped(self, timeout_s: float = 30.0) -> bool:
        """Block until a scrape began after the last observation, so the final counts reach Prometheus.

        Returns at once (False) when nothing has ever scraped the endpoint: no Prometheus, no wait.
        """
        deadline = time.time() + timeout_s
        with self._clock.cond:
            if self._clock.last_scrape == 0.0:
                return False
            while self._clock.last_scrape <= self._last_observed:
                left = deadline - time.time()
                if left <= 0:
                    return False
                self._clock.cond.wait(left)
        return True

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


_NODE_IPS: dict[str, str] = {}


def node_label(node_id: str) -> str:
    """The node's IP address (what Ray's own metrics and people use) for a Ray node id; the id if unknown."""
    if node_id not in _NODE_IPS:
        import ray

        for n in ray.nodes():
            _NODE_IPS[n["NodeID"]] = n.get("NodeManagerAddress") or n["NodeID"]
    return _NODE_IPS.get(node_id, node_id)
