"""Print the README tables of every H200 run here from its result.json and analysis.json (moeperf report).

    python3 results/h200/tables.py > /tmp/tables.md

Numbers come from the saved files only, so the README can be re-derived without a GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.engine_window import compile_rows  # noqa: E402
from analysis.report import load_result  # noqa: E402

HERE = Path(__file__).parent
CMP_METRICS = ("ttft_s_p50", "tpot_s_p50", "itl_s_p50", "e2e_s_p50")
# Comparisons against another arm than the run's baseline: `moeperf report <run> --baseline <arm>
# --out <run>/vs-<arm>` wrote them; listed here by experiment as (folder, B arm).
EXTRA = {"h200-mixtral-fp8-warmup": [("vs-baseline-warmup", "no-respecialize-warmup")]}


def _ci(m: dict) -> str:
    lo, hi = m["ci_requests"] or (None, None)
    return f"{m['ratio']:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None else f"{m['ratio']:.2f}"


def main() -> None:
    for run in sorted(p for p in HERE.iterdir() if (p / "result.json").exists()):
        result = load_result(run)
        tp = result.config.engine.tensor_parallel_size
        print(f"### {result.experiment} (`{run.name}`, TP={tp})\n")
        print("| arm | flags | eager | status | compiles in the measured window | compile s | TTFT p50 / p99 "
              "| TPOT p50 | output tok/s | engine ready s |")  # fmt: skip
        print("| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
        arm_cfg = {a.name: a for a in result.config.arms}
        for a in result.arms:
            eager = result.config.arm_enforce_eager(arm_cfg[a.name])
            if a.summary is None:
                print(f"| {a.name} | {a.flags.describe()} | {eager} | failed | | | | | | |")
                continue
            s = a.summary
            comp = compile_rows(a)
            n, sec = sum(k.compiles for k in comp), sum(k.compile_s for k in comp)
            print(f"| {a.name} | {a.flags.describe()} | {eager} | {a.status} | {n} | {sec:.1f} "
                  f"| {s.ttft_s.p50:.3f} s / {s.ttft_s.p99:.2f} s | {1e3 * s.tpot_s.p50:.1f} ms "
                  f"| {s.output_tokens_per_s:.0f} | {a.engine.startup_s:.0f} |")  # fmt: skip
        comparisons = json.loads((run / "analysis.json").read_text())["comparisons"]
        for folder, b_arm in EXTRA.get(result.experiment, []):
            if (run / folder / "analysis.json").exists():
                extra = json.loads((run / folder / "analysis.json").read_text())["comparisons"]
                comparisons += [c for c in extra if c["b_arm"] == b_arm]
        print("\n| comparison | TTFT p50 | TPOT p50 | ITL p50 | E2E p50 | E2E p50 verdict |")
        print("| --- | --- | --- | --- | --- | --- |")
        for c in comparisons:
            ms = {m["metric"]: m for m in c["metrics"]}
            cells = " | ".join(_ci(ms[k]) for k in CMP_METRICS)
            print(f"| {c['b_arm']} / {c['a_arm']} | {cells} | {ms['e2e_s_p50']['verdict']} |")
        print()


if __name__ == "__main__":
    main()
