"""The Markdown summary: what a CI log shows, so a reader sees the verdicts without opening the HTML."""

from __future__ import annotations

from analysis import engine_window, fmt
from analysis.nightly import NightlyVerdict
from analysis.verdicts import ArmComparison, RunAnalysis
from result_format.run_result import RunResult
from workloads.metrics import RateEstimate

VERDICT_MARK = {
    "improved": "improved",
    "regressed": "**REGRESSED**",
    "no detectable difference": "no detectable diff",
    "not measured": "not measured",
    "no verdict (design)": "no verdict (design)",
    "noise floor": "noise floor",
}


def comparison_header(c: ArmComparison) -> list[str]:
    """What a comparison's verdicts rest on, and what may make them misleading (shared with the HTML)."""
    level = c.metrics[0].ci_level * 100 if c.metrics else 0.0
    lines = [
        f"{c.n_b} vs {c.n_a} requests, {c.shared_rounds} shared round(s); {c.design}. "
        f"Intervals at {level:.2f}% (Bonferroni over {len(c.metrics)} metrics)."
    ]
    if c.design_advice:
        lines.append(
            "No verdicts: this design cannot tell an effect from the difference between two engine instances "
            f"(1-1.5% is normal). To get verdicts, {c.design_advice}."
        )
    return lines + list(c.notes)


def _emphasis(line: str) -> str:
    return f"**{line}**" if line.startswith(("No verdicts", "confounded by compilation")) else line


def _comparison(c: ArmComparison) -> list[str]:
    if c.kind == "aa":
        return _noise_floor(c)
    lines = [f"### {c.b_arm} vs {c.a_arm}", ""]
    for x in comparison_header(c):
        lines += [_emphasis(x), ""]
    lines += [
        "| metric | A | B | B/A | CI (engines + requests) | CI (one engine) | dof | MWU p | MDE | verdict |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for m in c.metrics:
        lines.append(
            f"| {m.label} | {fmt.value(m.a_value, m.unit)} | {fmt.value(m.b_value, m.unit)} | {fmt.ratio(m.ratio)} "
            f"| {fmt.interval(m.ci)} | {fmt.interval(m.ci_within_engine)} | {m.dof} | {fmt.p_value(m.mann_whitney_p)} "
            f"| {fmt.pct(m.mde_rel)} | {VERDICT_MARK[m.verdict]}{f' ({m.note})' if m.note else ''} |"
        )
    return lines + [""]


def _noise_floor(c: ArmComparison) -> list[str]:
    lines = [f"### A/A noise floor: {c.b_arm} vs {c.a_arm}", ""]
    for x in comparison_header(c):
        lines += [_emphasis(x), ""]
    lines += [
        "Two engines with the same settings: their discrepancy is noise, never an effect. MDE: the smallest "
        "change a comparison with this many engine pairs can detect against it.",
        "",
        "| metric | A | A' | A'/A | discrepancy | CI (one engine) | engine SD | MDE |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for m in c.metrics:
        lines.append(
            f"| {m.label} | {fmt.value(m.a_value, m.unit)} | {fmt.value(m.b_value, m.unit)} | {fmt.ratio(m.ratio)} "
            f"| {fmt.pct(m.aa_noise_rel)} | {fmt.interval(m.ci_within_engine)} | {fmt.pct(m.engine_sd_rel)} "
            f"| {fmt.pct(m.mde_rel)} |"
        )
    return lines + [""]


def rate_cell(r: RateEstimate | None, digits: str = ".4g") -> str:
    if r is None:
        return "n/a"
    ci = f" [{r.ci[0]:{digits}}, {r.ci[1]:{digits}}]" if r.ci else ""
    return f"{r.per_s:{digits}}{ci}"


RATE_HEADERS = ["arm", "rounds", "measured s", "output tok/s [CI]", "requests/s [CI]", "goodput req/s [CI]",
                "tok/s per round"]  # fmt: skip


def rate_rows(analysis: RunAnalysis) -> list[list[str]]:
    """Per-arm rates over all measured requests: the numbers the console table prints (shared with the HTML)."""
    rows = []
    for arm, r in analysis.arm_rates.items():
        rows.append(
            [
                arm,
                str(len(r.round_durations_s)),
                f"{sum(r.round_durations_s):.1f}",
                rate_cell(r.output_tokens_per_s),
                rate_cell(r.requests_per_s),
                rate_cell(r.goodput_rps),
                ", ".join(f"{x:.4g}" for x in r.output_tokens_per_s.by_round),
            ]
        )
    return rows


def rates_sentence(analysis: RunAnalysis) -> str:
    level = next(iter(analysis.arm_rates.values())).ci_level if analysis.arm_rates else 0.95
    return (
        f"Rates per round (each round's own span), then total over total time; {level:.0%} batch-means intervals "
        "over time blocks (sampling inside the measured windows, no engine-to-engine term). All measured requests, "
        "as in the console table; the verdicts use the steady-state requests."
    )


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
    if analysis.arm_rates:
        lines += ["## Rates", "", rates_sentence(analysis), "", *_md_table(RATE_HEADERS, rate_rows(analysis)), ""]
    lines.append("## A/B verdicts")
    lines.append("")
    if not analysis.comparisons:
        lines += ["No comparison: fewer than two usable arms.", ""]
    for c in [*(c for c in analysis.comparisons if c.kind == "ab"), *analysis.noise_floor]:
        lines += _comparison(c)
    for arm, why in analysis.skipped_arms.items():
        lines.append(f"- {arm} not compared: {why}")
    return "\n".join(lines).rstrip() + "\n"
