"""Thin wrappers over grafana-foundation-sdk builders: every moeperf panel is made the same way.

They set what every panel needs (the ``$datasource`` variable, refIds, units, a description that
says where the data comes from) so the dashboard modules only say what to show.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm
from grafana_foundation_sdk.models.common import VisibilityMode

from dashboards.promql import Query

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
GPU_ONLY = "GPU only: NVML telemetry from the moeperf plugin; absent on vLLM's CPU build (no GPU)."
TRITON_ONLY = (
    "GPU only: Triton JIT events counted by the moeperf plugin; vLLM's CPU build runs no Triton kernels, "
    "so these series do not exist on CPU."
)


def _targets(queries: Sequence[Query]) -> list[prometheus.Dataquery]:
    out = []
    for i, q in enumerate(queries):
        t = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        if q.legend:
            t = t.legend_format(q.legend)
        if q.heatmap:
            t = t.format(pm.PromQueryFormat.HEATMAP)
        if q.table:
            t = t.format(pm.PromQueryFormat.TABLE).instant()
        elif q.instant:
            t = t.instant()
        out.append(t)
    return out


def ts(
    title: str, unit: str, queries: Sequence[Query], description: str, *, span: int = 12, height: int = 8
) -> timeseries.Panel:
    p = timeseries.Panel().title(title).description(description).unit(unit).span(span).height(height)
    p = p.datasource(DATASOURCE).line_width(1).fill_opacity(10).show_points(VisibilityMode.NEVER)
    for t in _targets(queries):
        p = p.with_target(t)
    return p


def heat(title: str, unit: str, queries: Sequence[Query], description: str, *, span: int = 12) -> heatmap.Panel:
    """A heatmap of pre-bucketed series: Prometheus ``le`` buckets or one row per series (legend)."""
    p = heatmap.Panel().title(title).description(description).span(span).height(8).datasource(DATASOURCE)
    p = p.calculate(False).show_tooltip().unit(unit)
    for t in _targets(queries):
        p = p.with_target(t)
    return p


def single(title: str, unit: str, queries: Sequence[Query], description: str, *, span: int = 6) -> stat.Panel:
    p = stat.Panel().title(title).description(description).unit(unit).span(span).height(4).datasource(DATASOURCE)
    for t in _targets(queries):
        p = p.with_target(t)
    return p


def tab(title: str, queries: Sequence[Query], description: str, *, span: int = 24) -> table.Panel:
    p = table.Panel().title(title).description(description).span(span).height(6).datasource(DATASOURCE)
    for t in _targets(queries):
        p = p.with_target(t)
    return p


def query_variable(name: str, label: str, query: str, *, multi: bool) -> gd.QueryVariable:
    v = (
        gd.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_DESC if name == "run" else dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    return v.all_value(".*") if multi else v


def datasource_variable() -> gd.DatasourceVariable:
    return gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


# Prometheus annotation fields the SDK's generic AnnotationQuery model has no place for; merged
# into the JSON by dashboards.generate (by annotation name).
ANNOTATION_FIELDS: dict[str, dict[str, object]] = {}


def annotation(name: str, expr: str, title: str, tags: str, color: str) -> gd.AnnotationQuery:
    """A Prometheus annotation: every non-zero sample marks the time (consecutive ones merge into a region)."""
    ANNOTATION_FIELDS[name] = {"titleFormat": title, "tagKeys": tags, "step": "10s", "useValueForTime": False}
    return gd.AnnotationQuery().name(name).datasource(DATASOURCE).enable(True).icon_color(color).expr(expr)


def common_annotations() -> list[gd.AnnotationQuery]:
    """Run start/stop and arm changes, on every dashboard (from the run driver's own endpoint)."""
    return [
        annotation("Run", 'moeperf_run_active{run=~"$run"} > 0', "run {{run}}", "run,experiment", "blue"),
        annotation(
            "Arm replay",
            'moeperf_arm_replay_active{run=~"$run", arm=~"$arm"} > 0',
            "{{arm}} round {{round}}",
            "arm,round",
            "orange",
        ),
        annotation(
            "Engine up",
            'up{job="moeperf-engines", run=~"$run", arm=~"$arm"} > 0',
            "engine {{arm}} on {{node}}",
            "arm,node",
            "green",
        ),
    ]


def common_variables(*, rank: bool) -> list[gd.DatasourceVariable | gd.QueryVariable]:
    """run (one), arm, node and, for per-rank dashboards, rank (several, All = ``.*``)."""
    out: list[gd.DatasourceVariable | gd.QueryVariable] = [
        datasource_variable(),
        query_variable("run", "Run", "label_values(moeperf_run_active, run)", multi=False),
        query_variable("arm", "Arm", 'label_values(moeperf_arm_replay_active{run=~"$run"}, arm)', multi=True),
        query_variable("node", "Node", 'label_values(up{job="moeperf-engines", run=~"$run"}, node)', multi=True),
    ]
    if rank:
        out.append(
            query_variable(
                "rank", "Rank", 'label_values(moeperf_plugin_info{run=~"$run", arm=~"$arm"}, rank)', multi=True
            )
        )
    return out


def dashboard(uid: str, title: str, description: str, *, rank: bool) -> gd.Dashboard:
    d = (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["moeperf"])
        .refresh("10s")
        .time("now-30m", "now")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .readonly()
    )
    for v in common_variables(rank=rank):
        d = d.with_variable(v)
    for a in common_annotations():
        d = d.annotation(a)
    return d
