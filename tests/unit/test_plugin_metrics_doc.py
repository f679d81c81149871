"""docs/metrics.md lists exactly the metrics the plugin defines, with their types and labels."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from moe_opt.plugin.metrics import SPECS, Metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    section = DOC.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z_]+)` \| (\w+) \| ([^|]*) \| (.+) \|$", line)
        if m:
            rows[m[1]] = (m[2], tuple(x.strip() for x in m[3].split(",")))
    return rows


def test_doc_table_matches_the_code() -> None:
    assert documented() == {s.name: (s.kind, s.labels) for s in SPECS}


def test_every_spec_is_exposed_under_its_documented_name() -> None:
    reg = CollectorRegistry()
    metrics = Metrics(reg)
    for s in SPECS:
        child = metrics.get(s.name).labels(*["x"] * len(s.labels))
        (child.set(1) if s.kind == "gauge" else child.inc() if s.kind == "counter" else child.observe(1))
    text = generate_latest(reg).decode()
    exposed = set(re.findall(r"^([a-z_]+?)(?:_bucket|_count|_sum|_created)?\{", text, re.M))
    assert {s.name for s in SPECS} <= exposed
