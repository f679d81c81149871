"""``moeperf dashboards ...``: build the committed JSON, check it is current, list the queries."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards.generate import JSON_DIR, render_all, stale, write_all
from dashboards.queries import extract


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="moeperf dashboards", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="Regenerate the dashboard JSON from the code.")
    b.add_argument("--out", type=Path, default=JSON_DIR, help=f"output folder (default {JSON_DIR})")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files are not current")
    q = sub.add_parser("queries", help="Print every PromQL expression of the dashboards (tab-separated).")
    q.add_argument("--dir", type=Path, default=JSON_DIR)
    ns = p.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
