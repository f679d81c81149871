"""Does every dashboard query return data for this run? Run against the Prometheus that scraped it.

A dashboard that shows "No data" for a panel is silently wrong; the only proof that a query works is a
real Prometheus holding a real run's series. This runs every expression of the generated dashboards
(panels, annotations, template-variable selectors) over the run's time range, with each template
variable filled in as Grafana would fill it for that run (every value Prometheus holds for it, as a
regex), and says per query whether it returned a finite sample. The integration test uses it on a CPU
run, where the NVML and Triton queries may be empty (no GPU, no Triton JIT); on a GPU run every query
must return data: ``moeperf dashboards check``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboards.paths import JSON_DIR
from dashboards.prom_server import PrometheusAPI
from dashboards.queries import PanelQuery, extract, metric_names, substitute

# metric-name prefix -> why a query on it legitimately returns nothing on a CPU-only machine.
EMPTY_ON_CPU = {
    "moeperf_gpu_": "NVML GPU telemetry: needs a GPU and nvidia-ml-py; vLLM's CPU build has neither",
    "moeperf_triton_": "Triton JIT events: vLLM's CPU build runs no Triton kernels, so nothing compiles",
}
TEMPLATE_LABELS = {"arm": "arm", "node": "node", "rank": "rank"}
"""Template variables filled from the labels of the series their selector matches."""


@dataclass(frozen=True)
class QueryOutcome:
    query: PanelQuery
    expr: str  # with the template variables filled in
    has_data: bool
    empty_on_cpu: str | None  # why it may be empty on a CPU run; None: it must return data everywhere


def dashboard_queries(json_dir: Path = JSON_DIR) -> list[PanelQuery]:
    return [q for f in sorted(json_dir.glob("*.json")) for q in extract(json.loads(f.read_text()))]


def empty_on_cpu(expr: str) -> str | None:
    for name in metric_names(expr):
        for prefix, why in EMPTY_ON_CPU.items():
            if name.startswith(prefix):
                return why
    return None


def has_finite(result: Sequence[Mapping[str, Any]]) -> bool:
    return any(math.isfinite(float(v)) for s in result for _, v in s.get("values", []))


def variable_values(
    prom: PrometheusAPI, queries: Sequence[PanelQuery], run_id: str, arms: Sequence[str], start: float, end: float
) -> dict[str, str]:
    """Each template variable as Grafana would fill it for this run; raises ValueError for one with no value."""
    values = {"run": run_id, "datasource": "moeperf-prometheus"}
    for q in queries:
        name = q.where.removeprefix("variable: ")
        if not q.where.startswith("variable: ") or name not in TEMPLATE_LABELS or name in values:
            continue
        selector = substitute(q.expr, values | {"arm": "|".join(arms)})
        series = prom.api("series", {"match[]": selector, "start": f"{start:.3f}", "end": f"{end:.3f}"})
        found = sorted({s[TEMPLATE_LABELS[name]] for s in series if TEMPLATE_LABELS[name] in s})
        if not found:
            raise ValueError(f"template variable ${name} ({q.expr}) has no values for run {run_id}")
        values[name] = "(" + "|".join(found) + ")"  # plain label values: no regex metacharacters to escape
    for name in TEMPLATE_LABELS:
        values.setdefault(name, ".*")
    return values


def check_queries(
    prom: PrometheusAPI, run_id: str, arms: Sequence[str], start: float, end: float, json_dir: Path = JSON_DIR
) -> list[QueryOutcome]:
    """Every dashboard query over [start, end] for ``run_id``, in the dashboards' order."""
    queries = dashboard_queries(json_dir)
    values = variable_values(prom, queries, run_id, arms, start, end)
    values.update({"__rate_interval": "4s", "__interval": "1s", "__range": f"{int(end - start) + 1}s"})
    out = []
    for q in queries:
        expr = substitute(q.expr, values)
        out.append(QueryOutcome(q, expr, has_finite(prom.query_range(expr, start, end)), empty_on_cpu(q.expr)))
    return out


def outcomes_json(outcomes: Sequence[QueryOutcome]) -> list[dict[str, Any]]:
    return [
        {
            "dashboard": o.query.dashboard,
            "where": o.query.where,
            "label": o.query.label,
            "expr": o.expr,
            "has_data": o.has_data,
            "empty_on_cpu": o.empty_on_cpu,
        }
        for o in outcomes
    ]
