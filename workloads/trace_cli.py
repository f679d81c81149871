"""``moeperf trace ...``: look at a trace before replaying it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from workloads.trace_stats import trace_stats_stream
from workloads.traces import ITERATORS, AnyTraceSpec, TraceFormatError, TraceSpec, iter_trace

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeperf trace", description="Inspect traces before replaying them.")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stats", help="Print count, duration, rate, burstiness and length percentiles as JSON.")
    st.add_argument("file", type=Path)
    st.add_argument("--kind", required=True, choices=sorted(k for k in ITERATORS if k != "synthetic"))
    st.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="Another field of the trace spec, e.g. --option drop_failed=false --option multi_turn=true.",
    )
    return p


def _options(pairs: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def main(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    try:
        spec: AnyTraceSpec = TypeAdapter(TraceSpec).validate_python(
            {"kind": ns.kind, "path": str(ns.file.resolve()), **_options(ns.option)}
        )
        skipped: dict[str, int] = {}
        # Streamed: the trace may be far larger than memory; an empty one raises (naming the file) at its end.
        stats = trace_stats_stream(iter_trace(spec, None, skipped), skipped)
    except (TraceFormatError, ValidationError) as e:
        print(f"moeperf trace: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps({"file": str(ns.file), "kind": ns.kind, **stats}, indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
