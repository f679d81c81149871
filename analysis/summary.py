"""One line per comparison for the end of ``moeperf run``: the verdicts a reader acts on, and the noise floor.

A console line cannot hold fourteen metrics with intervals; it holds the ones a serving decision
turns on (TTFT, TPOT, E2E at p50 and p90, output throughput), each with its B/A and verdict, plus
what the verdicts rest on: the A/A noise floor, or why the design gives none.

A sweep run's lines are the sweep's own: per comparison B/A output throughput at matched
interactivity and B/A capacity, per arm its capacity at the SLO, and the A/A noise floor of both
statistics; the per-level verdicts are in the report.
"""

from __future__ import annotations

from analysis import fmt
from analysis.sweep import ArmCapacity, SweepAnalysis, SweepComparison, SweepStatistic, analyse_sweep
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


def _design_tail(c: SweepComparison) -> str:
    if c.design_advice:
        return f"no verdict (design): {c.design_advice}"
    return f"{c.engine_pairs} engine pair(s)" + (f", noise from {', '.join(c.controls)}" if c.controls else "")


def _sweep_ab_line(c: SweepComparison) -> str:
    m, cap = c.throughput_at_matched_interactivity, c.capacity
    return (
        f"{c.b_arm} vs {c.a_arm} (sweep): output tok/s per GPU at matched interactivity {fmt.ratio(m.ratio)} "
        f"{fmt.ratio_interval(m.ci)} {SHORT[m.verdict]}, capacity {fmt.ratio(cap.ratio)} {fmt.ratio_interval(cap.ci)} "
        f"{SHORT[cap.verdict]} [{_design_tail(c)}]"
    )


def _aa_rel(s: SweepStatistic) -> str:
    return fmt.pct(abs(s.ratio - 1) if s.ratio is not None else None)


def _sweep_aa_line(c: SweepComparison) -> str:
    return (
        f"A/A noise floor {c.b_arm} vs {c.a_arm} (sweep): |A'/A - 1| output tok/s per GPU at matched interactivity "
        f"{_aa_rel(c.throughput_at_matched_interactivity)}, capacity {_aa_rel(c.capacity)} "
        f"[{c.engine_pairs} engine pair(s)]"
    )


def _capacity_line(c: ArmCapacity) -> str:
    ci = f" {fmt.interval(c.ci_load)}" if c.ci_load is not None else ""
    return f"{c.arm}: capacity at SLO: {c.text}{ci}"


def sweep_summary_lines(sweep: SweepAnalysis) -> list[str]:
    """A sweep run's lines: per comparison, per arm's capacity, then the A/A noise floor."""
    lines = [_sweep_ab_line(c) for c in sweep.comparisons if c.kind == "ab"]
    if not lines:
        lines.append("no comparison: fewer than two usable arms")
    lines += [_capacity_line(c) for c in sweep.capacities]
    lines += [_sweep_aa_line(c) for c in sweep.comparisons if c.kind == "aa"]
    lines += [f"{arm} not compared: {why}" for arm, why in sweep.skipped_arms.items()]
    return lines


def summary_lines(
    result: RunResult,
    analysis: RunAnalysis | None = None,
    settings: AnalysisSettings | None = None,
    sweep: SweepAnalysis | None = None,
) -> list[str]:
    """One line per comparison (B vs baseline), then one per A/A control (the noise floor); for a sweep run
    the sweep's lines (``sweep_summary_lines``, from ``sweep`` or ``analyse_sweep``)."""
    if result.config.sweep is not None:
        sweep = sweep or analyse_sweep(result, settings)
        if sweep is not None:
            return sweep_summary_lines(sweep)
    analysis = analysis or analyse_run(result, settings)
    lines = [_ab_line(c) for c in analysis.comparisons if c.kind == "ab"]
    lines += [_aa_line(c) for c in analysis.noise_floor]
    if not lines:
        lines.append("no comparison: fewer than two usable arms")
    lines += [f"{arm} not compared: {why}" for arm, why in analysis.skipped_arms.items()]
    return lines
