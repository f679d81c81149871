"""Dashboard 1, run overview: per arm, what the clients saw next to what the engines report.

Client-side series come from the run driver's endpoint (``cluster.observability.client_metrics``), engine-side
ones from each engine's ``/metrics`` (``vllm:*``; the targets file adds run/arm/node to them).
Arms are series of the same panel, so they are compared side by side on one axis.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd

from dashboards.panels import dashboard, single, tab, ts
from dashboards.promql import RATE, Query, mean, quantile, rate, sel

UID = "moeperf-run-overview"
S = sel()
CLIENT = "Client side (moeperf harness, per arm): measured from the request being sent."
ENGINE = "Engine side (vLLM's own metrics, per arm): excludes network and client time."

LATENCIES = (
    # title, client histogram, vLLM histogram
    ("TTFT", "moeperf_client_ttft_seconds", "vllm:time_to_first_token_seconds"),
    ("TPOT", "moeperf_client_tpot_seconds", "vllm:request_time_per_output_token_seconds"),
    ("ITL", "moeperf_client_itl_seconds", "vllm:inter_token_latency_seconds"),
    ("E2E latency", "moeperf_client_e2e_seconds", "vllm:e2e_request_latency_seconds"),
)


def _quantiles(histogram: str) -> list[Query]:
    return [Query(quantile(q, histogram, S, "arm"), f"{{{{arm}}}} p{int(q * 100)}") for q in (0.5, 0.9, 0.99)]


def latency_row() -> list[object]:
    panels: list[object] = []
    for title, client, engine in LATENCIES:
        panels.append(ts(f"{title}: client", "s", _quantiles(client), CLIENT))
        panels.append(ts(f"{title}: engine", "s", _quantiles(engine), ENGINE))
    return panels


def throughput_row() -> list[object]:
    ok = sel(extra='status="ok"')
    failed = sel(extra='status="failed"')
    return [
        ts(
            "Requests/s",
            "reqps",
            [
                Query(rate("moeperf_client_requests_total", ok, "arm"), "{{arm}} client ok"),
                Query(rate("vllm:request_success_total", S, "arm"), "{{arm}} engine finished"),
            ],
            "Finished requests per second: successful ones as the clients saw them, and every request the "
            "engine finished (any finish reason).",
            span=8,
        ),
        ts(
            "Tokens/s",
            "short",
            [
                Query(rate("moeperf_client_output_tokens_total", S, "arm"), "{{arm}} client output"),
                Query(rate("vllm:generation_tokens_total", S, "arm"), "{{arm}} engine output"),
                Query(rate("vllm:prompt_tokens_total", S, "arm"), "{{arm}} engine prompt"),
            ],
            "Output tokens per second (client: from the server's usage of successful requests) and the engine's "
            "prompt and generation token rates.",
            span=8,
        ),
        ts(
            "Goodput (requests/s within SLOs)",
            "reqps",
            [
                Query(rate("moeperf_client_slo_met_requests_total", S, "arm"), "{{arm}} goodput"),
                Query(rate("moeperf_client_requests_total", S, "arm"), "{{arm}} all finished"),
            ],
            "Successful requests that met every SLO of the experiment (see 'SLO limits'), per second, next to "
            "every finished request.",
            span=8,
        ),
        single(
            "Goodput share over the range",
            "percentunit",
            [
                Query(
                    f"sum by (arm) (increase(moeperf_client_slo_met_requests_total{S}[$__range])) / "
                    f"sum by (arm) (increase(moeperf_client_requests_total{S}[$__range]))",
                    "{{arm}}",
                )
            ],
            "Share of finished requests that met every SLO, over the dashboard's time range.",
            span=8,
        ),
        single(
            "SLO limits",
            "s",
            [Query('max by (objective) (moeperf_client_slo_seconds{run=~"$run"})', "{{objective}}")],
            "The limits goodput is counted against (the experiment's slo: section).",
            span=8,
        ),
        single(
            "Failed requests over the range",
            "short",
            [
                Query(
                    f"sum by (arm) (increase(moeperf_client_requests_total{failed}[$__range])) "
                    f"or sum by (arm) (increase(moeperf_client_requests_total{S}[$__range])) * 0",
                    "{{arm}}",
                )
            ],
            "Requests that failed (any error kind) per arm; 0 is shown, not 'no data', for an arm without errors.",
            span=8,
        ),
    ]


def sweep_row() -> list[object]:
    """A load sweep's levels: which level each arm replays now, and the client's numbers per level."""
    return [
        ts(
            "Sweep: current level",
            "short",
            [Query(f"max by (arm, level) (moeperf_sweep_level_active{sel(node=False)}) > 0", "{{arm}} {{level}}")],
            "The sweep level each arm is replaying now (one series per arm and level while it runs). Empty for "
            "a run without a sweep.",
            span=8,
        ),
        ts(
            "Sweep: output tokens/s per level",
            "short",
            [Query(rate("moeperf_client_output_tokens_total", S, "arm, level"), "{{arm}} {{level}}")],
            f"{CLIENT} Output tokens per second of successful requests, per arm and sweep level.",
            span=8,
        ),
        ts(
            "Sweep: TTFT p90 per level",
            "s",
            [Query(quantile(0.9, "moeperf_client_ttft_seconds", S, "arm, level"), "{{arm}} {{level}}")],
            f"{CLIENT} Time to first token, p90, per arm and sweep level.",
            span=8,
        ),
    ]


def errors_row() -> list[object]:
    return [
        ts(
            "Errors by kind",
            "reqps",
            [
                Query(
                    f"sum by (arm, kind) (rate(moeperf_client_errors_total{S}[{RATE}])) "
                    f"or label_replace(sum by (arm) (rate(moeperf_client_requests_total{S}[{RATE}])) * 0, "
                    f'"kind", "none", "", "")',
                    "{{arm}} {{kind}}",
                )
            ],
            f"{CLIENT} Failed requests per second by error kind (timeout, reset, http, bad_sse, connect, "
            "not_sent, other); a flat 0 'none' line per arm when nothing failed.",
        ),
        ts(
            "Engine finish reasons",
            "reqps",
            [Query(rate("vllm:request_success_total", S, "arm, finished_reason"), "{{arm}} {{finished_reason}}")],
            f"{ENGINE} Finished requests per second by reason (stop, length, abort, ...).",
        ),
    ]


def engine_row() -> list[object]:
    return [
        ts(
            "Queue length",
            "short",
            [
                Query(f"sum by (arm) (vllm:num_requests_waiting{S})", "{{arm}} waiting"),
                Query(f"sum by (arm) (vllm:num_requests_running{S})", "{{arm}} running"),
            ],
            f"{ENGINE} Requests waiting for and in the engine's batch.",
            span=8,
        ),
        ts(
            "KV-cache use",
            "percentunit",
            [Query(f"max by (arm) (vllm:kv_cache_usage_perc{S})", "{{arm}}")],
            f"{ENGINE} Share of KV-cache blocks in use (1 = full).",
            span=8,
        ),
        ts(
            "Prefix-cache hit rate",
            "percentunit",
            [
                Query(
                    f"{rate('vllm:prefix_cache_hits_total', S, 'arm')} / "
                    f"{rate('vllm:prefix_cache_queries_total', S, 'arm')}",
                    "{{arm}}",
                )
            ],
            f"{ENGINE} Prompt tokens served from the prefix cache over prompt tokens looked up.",
            span=8,
        ),
        ts(
            "Client send lag p99 and mean",
            "s",
            [
                Query(quantile(0.99, "moeperf_client_send_lag_seconds", S, "arm, client"), "{{arm}} c{{client}} p99"),
                Query(mean("moeperf_client_send_lag_seconds", S, "arm, client"), "{{arm}} c{{client}} mean"),
            ],
            "How late each client actor sent requests against the schedule (without waits for the in-flight "
            "cap): a lagging load generator makes every other number here wrong.",
        ),
        ts(
            "Requests/s per client actor",
            "reqps",
            [Query(rate("moeperf_client_requests_total", S, "arm, client, node"), "{{arm}} c{{client}} @{{node}}")],
            "Finished requests per client actor (shard) and its node.",
        ),
    ]


def ray_row() -> list[object]:
    return [
        ts(
            "Ray nodes: CPU",
            "percent",
            [Query('ray_node_cpu_utilization{ip=~"$node"}', "{{ip}}")],
            "Ray's own node metrics (scraped through Ray's service-discovery file; label ip = node): CPU use per node, "
            "not filtered by run (Ray's metrics do not know moeperf runs).",
        ),
        ts(
            "Ray nodes: memory used",
            "bytes",
            [Query('ray_node_mem_used{ip=~"$node"}', "{{ip}}")],
            "Ray's own node metrics: memory used per node.",
        ),
        tab(
            "Scrape targets of this run",
            [Query('up{run=~"$run"}', table=True)],
            "Every target the run driver registered (engines, the harness endpoint): 1 = scraped.",
        ),
    ]


def build() -> object:
    d = dashboard(
        UID,
        "moeperf: run overview",
        "Per arm, client- and engine-side latency, throughput, goodput, errors and engine state of a moeperf run.",
        rank=False,
    )
    rows = (
        ("Latency: client vs engine (p50/p90/p99)", latency_row()),
        ("Throughput and goodput", throughput_row()),
        ("Load sweep (per level)", sweep_row()),
        ("Errors", errors_row()),
        ("Engine state and load generator", engine_row()),
        ("Ray cluster", ray_row()),
    )
    for title, panels in rows:
        d = d.with_row(gd.Row(title))
        for p in panels:
            d = d.with_panel(p)  # type: ignore[arg-type]
    return d.build()
