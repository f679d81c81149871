"""The committed dashboards are what the code generates, and every query in them parses.

Parsing uses Prometheus's own parser through ``promtool check rules`` (each expression, with the
template variables filled in, as a recording rule); ``promtool check config`` checks the shipped
Prometheus configuration. Grafana itself is not installable here: the dashboards are checked as
JSON, and their queries against Prometheus (tests/integration/test_observability_prometheus.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.observability.client_metrics import METRICS, RUN_METRICS
from dashboards.cli import main as cli_main
from dashboards.generate import JSON_DIR, render_all, stale
from dashboards.prom_server import CONFIG, render_config
from dashboards.queries import extract, metric_names, substitute, variables_in
from moe_opt.plugin.metrics import SPECS

REPO = Path(__file__).resolve().parents[2]
FILL = {"run": "r", "arm": "(a|b)", "node": ".*", "rank": ".*", "datasource": "ds",
        "__rate_interval": "1m", "__range": "1h", "__interval": "15s"}  # fmt: skip
DASHBOARDS = sorted(JSON_DIR.glob("*.json"))
ALL = [q for f in DASHBOARDS for q in extract(json.loads(f.read_text()))]
VLLM_USED = {
    "vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_success_total",
    "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_requests_waiting",
    "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
}  # fmt: skip
OTHER = {"up", "ray_node_cpu_utilization", "ray_node_mem_used"}


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus'; scripts/setup.sh installs it)")
    return tool


def test_committed_json_is_what_the_code_generates():
    assert stale() == [], "regenerate with: moeperf dashboards build"
    assert sorted(p.name for p in DASHBOARDS) == sorted(render_all())
    assert cli_main(["build", "--check"]) == 0


def test_build_writes_the_same_files(tmp_path):
    assert cli_main(["build", "--out", str(tmp_path)]) == 0
    for f in DASHBOARDS:
        assert (tmp_path / f.name).read_text() == f.read_text()
    (tmp_path / DASHBOARDS[0].name).write_text("{}")
    assert cli_main(["build", "--check", "--out", str(tmp_path)]) == 1


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_json_is_complete(path):
    d = json.loads(path.read_text())
    assert d["uid"] == path.stem and d["title"] and "moeperf" in d["tags"]
    names = [v["name"] for v in d["templating"]["list"]]
    assert names[:4] == ["datasource", "run", "arm", "node"]
    assert {a["name"] for a in d["annotations"]["list"]} >= {"Run", "Arm replay"}
    ids = []
    for p in d["panels"]:
        ids.append(p["id"])
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p.get("description"), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
    assert len(ids) == len(set(ids))


def test_every_query_filters_by_run_and_uses_known_variables():
    assert len(ALL) > 50
    for q in ALL:
        assert variables_in(q.expr) <= set(FILL), q.label
        if "ray_node" not in q.expr and not q.where.startswith("variable: run"):
            assert '$run"' in q.expr, f"{q.label}: not filtered by run"


def test_every_metric_name_exists_somewhere():
    """No typo reaches Grafana: each name is the plugin's, the harness's, vLLM's or Prometheus's/Ray's."""
    plugin = {s.name for s in SPECS}
    client = set(METRICS) | set(RUN_METRICS)
    known = plugin | client | VLLM_USED | OTHER
    for q in ALL:
        for name in metric_names(q.expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in known or base in known, f"{q.label}: unknown metric {name}"


def test_vllm_metric_names_exist_in_the_installed_vllm():
    vllm = pytest.importorskip("vllm")
    src = (Path(vllm.__file__).parent / "v1" / "metrics" / "loggers.py").read_text()
    for name in VLLM_USED:
        assert f'"{name.removesuffix("_total")}"' in src, name


def test_every_query_parses_with_promtool(tmp_path):
    tool = _promtool()
    rules = [{"record": f"moeperf:check_{i}", "expr": substitute(q.expr, FILL)} for i, q in enumerate(ALL)]
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = subprocess.run([tool, "check", "rules", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_broken_query_fails_the_parse_check(tmp_path):
    tool = _promtool()
    f = tmp_path / "rules.yml"
    bad = substitute('sum by (arm (rate(x{run=~"$run"}[$__rate_interval]))', FILL)
    f.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "a:b", "expr": bad}]}]}))
    assert subprocess.run([tool, "check", "rules", str(f)], capture_output=True).returncode != 0


def test_shipped_prometheus_config_passes_promtool(tmp_path):
    tool = _promtool()
    for text in (CONFIG.read_text(), render_config(tmp_path / "t", tmp_path / "ray", scrape_interval="1s")):
        f = tmp_path / "prometheus.yml"
        f.write_text(text)
        r = subprocess.run([tool, "check", "config", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_config_has_the_jobs_and_the_vllm_relabel_rule():
    cfg = yaml.safe_load(CONFIG.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert {"moeperf-engines", "moeperf-plugin", "moeperf-client", "ray"} <= set(jobs)
    assert jobs["ray"]["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]
    rule = jobs["moeperf-engines"]["metric_relabel_configs"][0]
    assert (rule["source_labels"], rule["regex"], rule["target_label"], rule["replacement"]) == (
        ["__name__"], "vllm_(.+)", "__name__", "vllm:$1",
    )  # fmt: skip
    pattern = re.compile(rule["regex"])
    assert pattern.fullmatch("vllm_num_requests_running") and not pattern.fullmatch("moeperf_rank_step_seconds")


def test_grafana_provisioning_files():
    prov = REPO / "dashboards" / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "moeperf.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == "moeperf-prometheus"
    dp = yaml.safe_load((prov / "dashboards" / "moeperf.yml").read_text())
    (provider,) = dp["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
