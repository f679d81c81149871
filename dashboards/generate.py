"""Build every dashboard to JSON text: the committed files under ``dashboards/json`` are this output.

The JSON is rendered deterministically (sorted keys, fixed panel ids in layout order) so the
committed files can be compared byte for byte with what the code generates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import jit, per_gpu, run_overview
from dashboards.panels import ANNOTATION_FIELDS
from dashboards.paths import JSON_DIR

DASHBOARDS: dict[str, Callable[[], object]] = {
    run_overview.UID: run_overview.build,
    per_gpu.UID: per_gpu.build,
    jit.UID: jit.build,
}


def _finish(d: dict[str, Any]) -> dict[str, Any]:
    """What the SDK leaves out: unique panel ids, option objects, the Prometheus annotation fields."""
    next_id = 1
    for p in d.get("panels", []):
        if p.get("type") != "row" and p.get("options") is None:
            p["options"] = {}  # the SDK writes null for panels given no options; Grafana expects an object
        p["id"] = next_id
        next_id += 1
        for inner in p.get("panels", []):
            inner["id"] = next_id
            next_id += 1
    for a in d.get("annotations", {}).get("list", []):
        a.update(ANNOTATION_FIELDS.get(a["name"], {}))
    for v in d.get("templating", {}).get("list", []):
        v.pop("id", None)  # the SDK writes an all-zero UUID for every variable; Grafana does not need one
    return d


def render(uid: str) -> str:
    model = DASHBOARDS[uid]()
    data = _finish(json.loads(json.dumps(model, cls=JSONEncoder)))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def render_all() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    return {f"{uid}.json": render(uid) for uid in DASHBOARDS}


def write_all(out_dir: Path = JSON_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


def stale(out_dir: Path = JSON_DIR) -> list[str]:
    """Names of committed files that differ from (or are missing next to) what the code generates."""
    expected = render_all()
    bad = [n for n, text in expected.items() if not (out_dir / n).is_file() or (out_dir / n).read_text() != text]
    extra = sorted(p.name for p in out_dir.glob("*.json") if p.name not in expected) if out_dir.is_dir() else []
    return sorted(bad) + extra
