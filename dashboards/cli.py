"""``moeperf dashboards ...``: build the committed JSON, check it is current, list the queries, run them on a run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards.paths import JSON_DIR
from dashboards.prom_server import DEFAULT_RAY_DIR, DEFAULT_TARGETS_DIR, Prometheus, render_config
from dashboards.queries import extract


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="moeperf dashboards", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="Regenerate the dashboard JSON from the code.")
    b.add_argument("--out", type=Path, default=JSON_DIR, help=f"output folder (default {JSON_DIR})")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files are not current")
    q = sub.add_parser("queries", help="Print every PromQL expression of the dashboards (tab-separated).")
    q.add_argument("--dir", type=Path, default=JSON_DIR)
    pr = sub.add_parser("prometheus", help="Run a local Prometheus with the shipped config until Ctrl-C.")
    pr.add_argument("--port", type=int, default=9090)
    pr.add_argument("--data", type=Path, default=Path("/tmp/moeperf/prometheus-data"), help="TSDB folder")
    pr.add_argument("--targets-dir", default=DEFAULT_TARGETS_DIR, help="the experiments' metrics.targets_dir")
    pr.add_argument("--ray-dir", default=DEFAULT_RAY_DIR, help="Ray's temp dir ($RAY_TMPDIR/ray)")
    pr.add_argument("--scrape-interval", default=None, help="e.g. 1s (default: the shipped 5s)")
    ck = sub.add_parser(
        "check",
        help="Run every dashboard query against the Prometheus that scraped a run; exit 1 if one returned no data "
        "(on a CPU run the NVML and Triton queries may be empty: --cpu).",
    )
    ck.add_argument("run", type=Path, help="the run folder (runs/<id>) or its result.json")
    ck.add_argument("--prometheus", default="http://127.0.0.1:9090", help="that Prometheus's URL")
    ck.add_argument("--cpu", action="store_true", help="allow the queries that have no data on CPU to be empty")
    ck.add_argument("--out", type=Path, help="also write every query's outcome here as JSON")
    ns = p.parse_args(argv)
    if ns.cmd == "check":
        return _check(ns)
    if ns.cmd == "prometheus":
        return _serve_prometheus(ns)
    from dashboards.generate import render_all, stale, write_all  # needs the Grafana SDK: build and queries only

    if ns.cmd == "build":
        if ns.check:
            bad = stale(ns.out)
            for name in bad:
                print(f"{ns.out / name}: not what the code generates; run: moeperf dashboards build", file=sys.stderr)
            return 1 if bad else 0
        for path in write_all(ns.out):
            print(path)
        return 0
    names = sorted(ns.dir.glob("*.json")) if ns.dir != JSON_DIR else None
    texts = [f.read_text() for f in names] if names is not None else list(render_all().values())
    for text in texts:
        for pq in extract(json.loads(text)):
            print(f"{pq.dashboard}\t{pq.where}\t{pq.ref}\t{pq.expr}")
    return 0


def _check(ns: argparse.Namespace) -> int:
    from datetime import datetime

    from dashboards.check import check_queries, outcomes_json
    from dashboards.prom_server import PrometheusAPI, PrometheusError
    from result_format.run_result import load_run

    try:
        run = load_run(ns.run)
    except (OSError, ValueError) as e:
        print(f"moeperf dashboards check: {ns.run}: not a run moeperf can read: {e}", file=sys.stderr)
        return 2
    start = datetime.fromisoformat(run.started_at).timestamp()
    end = datetime.fromisoformat(run.finished_at).timestamp() + 5
    try:
        outcomes = check_queries(PrometheusAPI(ns.prometheus), run.run_id, [a.name for a in run.arms], start, end)
    except (PrometheusError, OSError, ValueError) as e:
        print(f"moeperf dashboards check: {e}", file=sys.stderr)
        return 2
    if ns.out:
        ns.out.write_text(json.dumps(outcomes_json(outcomes), indent=1))
    bad = [o for o in outcomes if not o.has_data and not (ns.cpu and o.empty_on_cpu)]
    for o in outcomes:
        print(f"{'data' if o.has_data else 'EMPTY'}\t{o.query.label}")
    print(f"{len(outcomes) - len(bad)} of {len(outcomes)} dashboard queries returned data for run {run.run_id}"
          + (f"; {len(bad)} did not" if bad else ""))  # fmt: skip
    return 1 if bad else 0


def _serve_prometheus(ns: argparse.Namespace) -> int:
    """Foreground Prometheus next to ``moeperf run``: same paths as the runs, on 127.0.0.1 only."""
    ns.data.mkdir(parents=True, exist_ok=True)
    Path(ns.targets_dir).mkdir(parents=True, exist_ok=True)
    text = render_config(ns.targets_dir, ns.ray_dir, ns.scrape_interval, f"127.0.0.1:{ns.port}")
    prom = Prometheus(ns.data, text, port=ns.port)
    prom.start()
    print(f"Prometheus at {prom.url} (config {prom.config}, log {prom.log}); Ctrl-C stops it", flush=True)
    try:
        assert prom.proc is not None
        return prom.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        prom.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
