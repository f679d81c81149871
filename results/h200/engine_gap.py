"""Per engine of a hold, from its Prometheus: what each engine's steps took and what it got from the GPU and the
host, to set beside an A/A gap (two engines of one setting that differ). Made for claim 1's hold 3, where the
control's steps were 21-24% longer than its target's over its whole life.

    python3 results/h200/engine_gap.py http://127.0.0.1:9090 > engine-gap.txt

Every value is over each engine's whole life (counters' last values; gauges averaged over the span they were
scraped), so engines of different lengths compare by their means, not their totals.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request

SPAN = "3h"


def query(base: str, expr: str) -> dict[tuple[str, str], float]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as r:
        out = json.load(r)["data"]["result"]
    return {(x["metric"].get("arm", "?"), x["metric"].get("instance", "?")): float(x["value"][1]) for x in out}


def last(metric: str, by: str = "arm, instance", where: str = "") -> str:
    return f"sum by ({by}) (max by ({by}, mode, phase, le) (last_over_time({metric}{{{where}}}[{SPAN}])))"


def main(base: str) -> None:
    rows: dict[str, dict[tuple[str, str], float]] = {}
    for phase in ("decode", "mixed", "prefill"):
        n = query(base, last("moeperf_rank_step_seconds_count", where=f'phase="{phase}"'))
        s = query(base, last("moeperf_rank_step_seconds_sum", where=f'phase="{phase}"'))
        rows[f"{phase} steps"] = n
        rows[f"{phase} step mean ms"] = {k: 1000 * s[k] / v for k, v in n.items() if v}
        gn = query(base, last("moeperf_gpu_step_seconds_count", where=f'phase="{phase}"'))
        gs = query(base, last("moeperf_gpu_step_seconds_sum", where=f'phase="{phase}"'))
        rows[f"{phase} step GPU mean ms"] = {k: 1000 * gs[k] / v for k, v in gn.items() if v}
    for name, metric in (
        ("worker CPU s", "moeperf_rank_process_cpu_seconds_total"),
        ("involuntary switches", "moeperf_rank_involuntary_switches_total"),
        ("node steal s", "moeperf_node_cpu_steal_seconds_total"),
        ("node CPU pressure s", "moeperf_node_cpu_pressure_seconds_total"),
        ("plugin overhead s", "moeperf_plugin_overhead_seconds_total"),
    ):
        rows[name] = query(base, last(metric))
    for name, metric, scale in (
        ("GPU utilisation", "moeperf_gpu_utilization_ratio", 1.0),
        ("SM clock MHz", "moeperf_gpu_sm_clock_hertz", 1e-6),
        ("memory clock MHz", "moeperf_gpu_memory_clock_hertz", 1e-6),
        ("power W", "moeperf_gpu_power_watts", 1.0),
        ("temperature C", "moeperf_gpu_temperature_celsius", 1.0),
    ):
        got = query(base, f"avg by (arm, instance) (avg_over_time({metric}[{SPAN}]))")
        rows[name] = {k: v * scale for k, v in got.items()}
    engines = sorted({k for r in rows.values() for k in r}, key=lambda k: (k[1], k[0]))
    engines = [k for k in engines if k in rows["decode steps"]]
    print("\t".join(["quantity", *(f"{a} {i}" for a, i in engines)]))
    for name, values in rows.items():
        if values:
            print("\t".join([name, *(f"{values[k]:.4g}" if k in values else "-" for k in engines)]))
        else:
            print(f"{name}\t(no data: not exported by this hold's plugin)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9090")
