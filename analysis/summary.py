"""One line per comparison for the end of ``moeperf run``: the verdicts a reader acts on, and the noise floor.

A console line cannot hold fourteen metrics with intervals; it holds the ones a serving decision
turns on (TTFT, TPOT, E2E at p50 and p90, output throughput), each with its B/A and verdict, plus
what the verdicts rest on: the A/A noise floor, or why the design gives none.
"""

from __future__ import annotations

from analysis import fmt
from analysis.verdicts import AnalysisSettings, ArmComparison, MetricVerdict, RunAnalysis, analyse_run
from result_format.run_result import RunResult

SUMMARY_METRICS = (
    ("ttft_s_p50", "TTFT p50"),
    ("ttft_s_p90", "TTFT p90"),
    ("tpot_s_p50", "TPOT p50"),
    ("tpot_s_p90", "TPOT p90"),
    ("e2e_s_p50", "E2E p50"),
    ("e2e_s_p90", "E2E p90"),
    ("output_tokens_per_s", "tok/s"),
)
SHORT = {
    "improved": "improved",
    "regressed": "REGRESSED",
    "no detectable difference": "no diff",
    "not measured": "n/m",
    "no verdict (design)": "no verdict",
    "noise floor": "noise",
}


def _cell(label: str, m: MetricVerdict) -> str:
    ratio = "n/a" if m.ratio is None else f"{m.ratio:.3f}"
    return f"{label} {ratio} {SHORT[m.verdict]}"


def _ab_line(c: ArmComparison) -> str:
    cells = ", ".join(_cell(label, c.metric(key)) for key, label in SUMMARY_METRICS)
    tail = []
    if c.design_advice:
        tail.append(f"no verdict (design): {c.design_advice}")
    else:
        tail.append(
            f"{c.engine_pairs} engine pair(s)" + (f", noise from {', '.join(c.controls)}" if c.controls else "")
        )
    if c.confounded_by_compilation:
        tail.append(f"CONFOUNDED BY COMPILATION ({c.compiles_a} vs {c.compiles_b} compiles in window)")
    return f"{c.b_arm} vs {c.a_arm}: {cells} [{'; '.join(tail)}]"


def _aa_line(c: ArmComparison) -> str:
    cells = ", ".join(f"{label} {fmt.pct(c.metric(key).aa_noise_rel)}" for key, label in SUMMARY_METRICS)
    mdes = [m.mde_rel for m in (c.metric(k) for k, _ in SUMMARY_METRICS) if m.mde_rel is not None]
    floor = f"; min detectable effect {fmt.pct(min(mdes))}-{fmt.pct(max(mdes))}" if mdes else ""
    warm = f"; CONFOUNDED BY COMPILATION ({c.compiles_a} vs {c.compiles_b})" if c.confounded_by_compilation else ""
    return f"A/A noise floor {c.b_arm} vs {c.a_arm}: |A'/A - 1| {cells} [{c.engine_pairs} engine pair(s){floor}{warm}]"


def summary_lines(
    result: RunResult, analysis: RunAnalysis | None = None, settings: AnalysisSettings | None = None
) -> list[str]:
    """One line per comparison (B vs baseline), then one per A/A control (the noise floor)."""
    analysis = analysis or analyse_run(result, settings)
    lines = [_ab_line(c) for c in analysis.comparisons if c.kind == "ab"]
    lines += [_aa_line(c) for c in analysis.noise_floor]
    if not lines:
        lines.append("no comparison: fewer than two usable arms")
    lines += [f"{arm} not compared: {why}" for arm, why in analysis.skipped_arms.items()]
    return lines
