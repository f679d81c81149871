"""The Markdown summary: what a CI log shows, so a reader sees the verdicts without opening the HTML."""

from __future__ import annotations

from analysis import engine_window, fmt
from analysis.nightly import NightlyVerdict
from analysis.verdicts import ArmComparison, RunAnalysis
from result_format.run_result import RunResult

VERDICT_MARK = {
    "improved": "improved",
    "regressed": "**REGRESSED**",
    "no detectable difference": "no detectable diff",
    "not measured": "not measured",
}


def _comparison(c: ArmComparison) -> list[str]:
    title = f"A/A control: {c.b_arm} vs {c.a_arm}" if c.kind == "aa" else f"{c.b_arm} vs {c.a_arm}"
    noise = f", A/A noise from {c.control_arm}" if c.control_arm else ", no A/A control arm"
    lines = [
        f"### {title}",
        "",
        f"{c.n_b} vs {c.n_a} requests, {c.shared_rounds} shared round(s){noise}; "
        f"intervals at {c.metrics[0].ci_level * 100:.2f}% (Bonferroni over {len(c.metrics)} metrics).",
        "",
        "| metric | A | B | B/A | CI (requests) | CI (rounds) | MWU p | MDE | verdict |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |",
    ]
    for m in c.metrics:
        lines.append(
            f"| {m.label} | {fmt.value(m.a_value, m.unit)} | {fmt.value(m.b_value, m.unit)} | {fmt.ratio(m.ratio)} "
            f"| {fmt.interval(m.ci_requests)} | {fmt.interval(m.ci_rounds)} | {fmt.p_value(m.mann_whitney_p)} "
            f"| {fmt.pct(m.mde_rel)} | {VERDICT_MARK[m.verdict]}{f' ({m.note})' if m.note else ''} |"
        )
    return lines + [""]


def nightly_markdown(v: NightlyVerdict) -> list[str]:
    lines = [f"## Nightly gate: {v.status} (exit {v.exit_code})", "", v.reason, ""]
    if v.history_runs:
        lines += [f"Baseline: median of {len(v.history_runs)} night(s): {', '.join(v.history_runs)}", ""]
    shown = [c for c in v.checks if c.flagged or c.regression]
    if shown:
        lines += [
            "| arm | metric | tonight | baseline | ratio | CI | nights flagged | regression |",
            "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |",
        ]
        for c in shown:
            lines.append(
                f"| {c.arm} | {c.label} | {fmt.value(c.tonight, c.unit)} | {fmt.value(c.baseline, c.unit)} "
                f"| {fmt.ratio(c.ratio)} | {fmt.interval(c.ci)} | {c.consecutive_flagged} "
                f"| {'**yes**' if c.regression else 'no'} |"
            )
        lines.append("")
    lines += [f"- {n}" for n in v.notes]
    return lines


def warmup_sentence(analysis: RunAnalysis) -> str:
    if analysis.settings.steady_state == "none":
        return "Warm-up: every request kept (steady-state check off)."
    if not analysis.warmup_excluded:
        return "Warm-up: none detected (MSER-5 on TTFT kept every request)."
    parts = ", ".join(f"round {r}: first {n}" for r, n in sorted(analysis.warmup_excluded.items()))
    return f"Warm-up excluded by the MSER-5 steady-state rule on TTFT, in every arm: {parts} schedule slots."


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    return [row(headers), "|" + " --- |" * len(headers)] + [row(r) for r in rows]


def _engine_window(result: RunResult) -> list[str]:
    if not engine_window.has_engine_window(result.arms):
        return []
    return [
        "## Engines during the measured window",
        "",
        "Per rank, from the moeperf plugin's counters (growth while the arm's requests were replayed):",
        "",
        *_md_table(engine_window.RANK_HEADERS, engine_window.rank_table(result.arms)),
        "",
        "Triton JIT compiles in the measured window (requests waited for these):",
        "",
        *_md_table(engine_window.COMPILE_HEADERS, engine_window.compile_table(result.arms)),
        "",
    ]


def render_markdown(result: RunResult, analysis: RunAnalysis, nightly: NightlyVerdict | None = None) -> str:
    lines = [
        f"# moeperf report: {result.run_id}",
        "",
        f"Experiment `{result.experiment}`, status **{result.status}**, {result.started_at} to {result.finished_at}.",
        f"Goodput SLOs: {analysis.slo.describe()}. Baseline arm: `{analysis.baseline_arm}`.",
        warmup_sentence(analysis),
        "",
    ]
    if nightly is not None:
        lines += nightly_markdown(nightly)
    lines += [
        "## Arms",
        "",
        "| arm | status | flags | flags applied | MoE backend (vLLM's log) | ok / sent | notes |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for a in result.arms:
        backends = ", ".join(a.engine.moe_backends) if a.engine and a.engine.moe_backends else "-"
        lines.append(
            f"| {a.name} | {a.status} | {a.flags.describe()} | {'yes' if a.flags_applied else 'no'} | {backends} "
            f"| {a.requests_succeeded} / {a.requests_sent} | {'; '.join(a.notes) or '-'} |"
        )
    lines.append("")
    lines += _engine_window(result)
    lines.append("## A/B verdicts")
    lines.append("")
    if not analysis.comparisons:
        lines += ["No comparison: fewer than two usable arms.", ""]
    for c in analysis.comparisons:
        lines += _comparison(c)
    for arm, why in analysis.skipped_arms.items():
        lines.append(f"- {arm} not compared: {why}")
    return "\n".join(lines).rstrip() + "\n"
