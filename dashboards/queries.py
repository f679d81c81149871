"""Every PromQL expression a dashboard JSON contains, and the same with template variables filled in.

Used by the tests (each expression must parse, and must return data from a real run) and by
``moeperf dashboards queries``: a dashboard whose queries return nothing is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.S)
VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    where: str  # panel title, "annotation: <name>" or "variable: <name>"
    ref: str
    expr: str
    description: str = ""

    @property
    def label(self) -> str:
        return f"{self.dashboard} / {self.where} / {self.ref}"


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def extract(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    """Panel targets, annotation expressions and the series selectors of ``label_values`` variables."""
    uid = str(dashboard.get("uid", dashboard.get("title", "?")))
    out = []
    for p in _panels(list(dashboard.get("panels", []))):
        for t in p.get("targets", []) or []:
            if t.get("expr"):
                out.append(PanelQuery(uid, str(p.get("title", "")), str(t.get("refId", "")), t["expr"],
                                      str(p.get("description", ""))))  # fmt: skip
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append(PanelQuery(uid, f"annotation: {a.get('name')}", "", a["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        if v.get("type") == "query" and isinstance(q, str) and (m := LABEL_VALUES.match(q)):
            out.append(PanelQuery(uid, f"variable: {v.get('name')}", "", m.group("selector")))
    return out


def variables_in(expr: str) -> set[str]:
    return {m.group("braced") or m.group("plain") for m in VARIABLE.finditer(expr)}


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Fill ``$name`` / ``${name}`` as Grafana would; raises KeyError naming a variable without a value."""

    def one(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        if name not in values:
            raise KeyError(f"no value for template variable ${name} in {expr!r}")
        return values[name]

    return VARIABLE.sub(one, expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (words followed by ``{`` or ``[``, or bare selectors)."""
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr))
    keywords = {"by", "without", "on", "ignoring", "group_left", "group_right", "sum", "max", "min", "avg"}
    return {n for n in names if n not in keywords}
