"""``moeperf report RUN_DIR``: render the report of a saved run. Never starts Ray or an engine.

Exit codes: 0 written, 2 bad input (no such run, unreadable result, bad option).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from analysis.report import FORMATS, load_result, write_report
from analysis.verdicts import AnalysisSettings
from experiment.slo import SloSpec

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moeperf report", description="Render the A/B report of a saved run.")
    p.add_argument("run", help="Run folder (runs/<id>) or its result.json.")
    p.add_argument("--out", help="Output folder; default: the run folder.")
    p.add_argument("--format", default="html,md", help="Comma-separated: html, md (default both).")
    p.add_argument("--baseline", help="Arm every other arm is divided by; default the first baseline-flag arm.")
    p.add_argument("--alpha", type=float, default=0.05, help="Family-wise false-positive level per comparison.")
    p.add_argument("--min-effect", type=float, default=0.01, help="Smallest relative change given a verdict.")
    p.add_argument("--bootstrap", type=int, default=1000, help="Bootstrap resamples.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ttft-ms", type=float, help="Goodput SLO on TTFT (ms); default: run config or 2000.")
    p.add_argument("--slo-tpot-ms", type=float, help="Goodput SLO on TPOT (ms); default: run config or 200.")
    p.add_argument("--slo-e2e-ms", type=float, help="Goodput SLO on E2E latency (ms); default: none.")
    p.add_argument(
        "--steady-state",
        choices=("mser5", "none"),
        default=None,
        help="Drop warm-up by the MSER-5 rule on TTFT, or keep every request ('none': when the cold start, e.g. "
        "JIT compiles, is what is being measured); default: the run's config steady_state (mser5 unless set).",
    )
    p.add_argument("--quiet", action="store_true", help="Do not print the Markdown summary.")
    return p


def main(argv: list[str]) -> int:
    try:
        ns = build_parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_BAD_INPUT
    run = Path(ns.run)
    try:
        result = load_result(run)
    except FileNotFoundError:
        print(f"moeperf report: {run}: no result.json (is it a run folder?)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ValidationError, ValueError) as e:
        print(f"moeperf report: {run}: not a valid result file: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        base = result.config.slo
        slo = SloSpec(
            ttft_s=ns.slo_ttft_ms / 1000 if ns.slo_ttft_ms is not None else base.ttft_s,
            tpot_s=ns.slo_tpot_ms / 1000 if ns.slo_tpot_ms is not None else base.tpot_s,
            e2e_s=ns.slo_e2e_ms / 1000 if ns.slo_e2e_ms is not None else base.e2e_s,
        )
        settings = AnalysisSettings(
            alpha=ns.alpha,
            min_effect=ns.min_effect,
            bootstrap_resamples=ns.bootstrap,
            seed=ns.seed,
            baseline_arm=ns.baseline,
            slo=slo,
            steady_state=ns.steady_state,
        )
        formats = [f.strip() for f in ns.format.split(",") if f.strip()]
        out = Path(ns.out) if ns.out else (run if run.is_dir() else run.parent)
        _, written = write_report(result, out, formats or list(FORMATS), settings)
    except (ValidationError, ValueError, KeyError, OSError) as e:  # OSError: a records file gone or unreadable
        print(f"moeperf report: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    md = out / "report.md"
    if not ns.quiet and md in written:
        print(md.read_text(), end="")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
