"""The Markdown summary: what a CI log shows, so a reader sees the verdicts without opening the HTML."""

from __future__ import annotations

from analysis import compile_attribution, engine_window, fmt, routing, step_time_rounds, ttft_over_time
from analysis.nightly import NightlyVerdict
from analysis.sweep import (
    TABLE_LATENCIES,
    LatencyEstimate,
    SweepAnalysis,
    SweepComparison,
    SweepStatistic,
    analyse_sweep,
)
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
        "| metric | A | B | B/A | CI (engines + requests) | CI (one engine) | dof | MWU p | MDE "
        "| pairs for min. effect | verdict |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in c.metrics:
        lines.append(
            f"| {m.label} | {fmt.value(m.a_value, m.unit)} | {fmt.value(m.b_value, m.unit)} | {fmt.ratio(m.ratio)} "
            f"| {fmt.ratio_interval(m.ci)} | {fmt.ratio_interval(m.ci_within_engine)} | {m.dof} "
            f"| {fmt.p_value(m.mann_whitney_p)} "
            f"| {fmt.pct(m.mde_rel)} | {fmt.count(m.pairs_for_min_effect)} "
            f"| {VERDICT_MARK[m.verdict]}{f' ({m.note})' if m.note else ''} |"
        )
    return lines + [""]


def _noise_floor(c: ArmComparison) -> list[str]:
    lines = [f"### A/A noise floor: {c.b_arm} vs {c.a_arm}", ""]
    for x in comparison_header(c):
        lines += [_emphasis(x), ""]
    lines += [
        "Two engines with the same settings: their discrepancy is noise, never an effect. MDE: the smallest "
        "change a comparison with this many engine pairs can detect against it; pairs for min. effect: how many "
        "engine pairs would make the analysis' minimum effect detectable (a projection from this noise).",
        "",
        "| metric | A | A' | A'/A | discrepancy | CI (one engine) | engine SD | MDE | pairs for min. effect |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for m in c.metrics:
        lines.append(
            f"| {m.label} | {fmt.value(m.a_value, m.unit)} | {fmt.value(m.b_value, m.unit)} | {fmt.ratio(m.ratio)} "
            f"| {fmt.pct(m.aa_noise_rel)} | {fmt.ratio_interval(m.ci_within_engine)} | {fmt.pct(m.engine_sd_rel)} "
            f"| {fmt.pct(m.mde_rel)} | {fmt.count(m.pairs_for_min_effect)} |"
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
    sweep = any(c.level is not None or c.metric == "capacity" for c in v.checks)
    if shown:
        level_head, level_rule = ("| level ", "| --- ") if sweep else ("", "")
        lines += [
            f"| arm {level_head}| metric | tonight | baseline | ratio | CI | nights flagged | regression |",
            f"| --- {level_rule}| --- | ---: | ---: | ---: | --- | ---: | --- |",
        ]
        for c in shown:
            level = f"| {c.level or 'all levels'} " if sweep else ""
            lines.append(
                f"| {c.arm} {level}| {c.label} | {fmt.value(c.tonight, c.unit)} | {fmt.value(c.baseline, c.unit)} "
                f"| {fmt.ratio(c.ratio)} | {fmt.ratio_interval(c.ci)} | {c.consecutive_flagged} "
                f"| {'**yes**' if c.regression else 'no'} |"
            )
        lines.append("")
    capacities = [c for c in v.checks if c.metric == "capacity"]
    for c in capacities:
        tail = c.note or f"ratio {fmt.ratio(c.ratio)} {fmt.ratio_interval(c.ci)}"
        lines.append(
            f"- Capacity at SLO of {c.arm}: {fmt.value(c.tonight, c.unit)} tonight, baseline "
            f"{fmt.value(c.baseline, c.unit)} ({c.baseline_nights} night(s)); {tail}"
        )
    if capacities:
        lines.append("")
    lines += [f"- {n}" for n in v.notes]
    return lines


def warmup_sentence(analysis: RunAnalysis, result: RunResult | None = None) -> str:
    sweep = result.config.sweep if result is not None else None
    if sweep is not None:
        return (
            f"Warm-up: each sweep level's warm-up share (default {sweep.warmup_fraction:.0%} of its first requests) "
            "is excluded; no MSER-5 cut."
        )
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


def _step_time_rounds(result: RunResult, analysis: RunAnalysis) -> list[str]:
    """Only when some arm kept its step times per round (results before that keep one window per arm)."""
    comparisons = step_time_rounds.step_time_rounds(result, analysis)
    if not comparisons:
        return []
    return [
        f"## {step_time_rounds.SECTION_TITLE}",
        "",
        step_time_rounds.SECTION_INTRO,
        "",
        *_md_table(step_time_rounds.headers(comparisons), step_time_rounds.table_rows(comparisons)),
        "",
    ]


def _routing(result: RunResult) -> list[str]:
    """Only when some arm counted its routing (the plugin's counter on)."""
    arms = routing.run_routing(result.arms)
    if not arms:
        return []
    warnings = [f"- **{w}**" for w in routing.warnings(arms)]
    return [
        f"## {routing.SECTION_TITLE}",
        "",
        routing.SECTION_INTRO,
        "",
        *_md_table(routing.HEADERS, [a.row() for a in arms]),
        "",
        *([*warnings, ""] if warnings else []),
    ]


def _compile_attribution(result: RunResult) -> list[str]:
    """Only when some arm logged a compile while serving: most runs have none, and an empty table says nothing."""
    attributions = compile_attribution.attribute_run(result.arms)
    if not attributions:
        return []
    lines = [
        f"## {compile_attribution.SECTION_TITLE}",
        "",
        compile_attribution.SECTION_INTRO,
        "",
        *_md_table(compile_attribution.SUMMARY_HEADERS, compile_attribution.summary_rows(attributions)),
        "",
    ]
    for x in attributions:
        rows, left_out = compile_attribution.event_rows(x)
        lines += [f"{x.arm}:", "", *_md_table(compile_attribution.EVENT_HEADERS, rows), ""]
        if left_out:
            lines += [f"({left_out} more compile event(s) of {x.arm} not listed)", ""]
    return lines


def _ttft_over_time(analysis: RunAnalysis) -> list[str]:
    """Only when some arm has windows: a run with a sweep has none (``ttft_over_time.applies``)."""
    windows = analysis.ttft_over_time
    if not windows:
        return []
    comparisons = ttft_over_time.compare_run(windows, analysis)
    return [
        f"## {ttft_over_time.SECTION_TITLE}",
        "",
        ttft_over_time.SECTION_INTRO,
        "",
        *_md_table(ttft_over_time.HEADERS, ttft_over_time.table_rows(windows, comparisons)),
        "",
    ]


# --- load sweep (only for runs with a sweep) ----------------------------------------------------------------


def _num_ci(v: float | None, ci: tuple[float, float] | None, digits: str = ".4g") -> str:
    if v is None:
        return "n/a"
    return f"{v:{digits}}" + (f" [{ci[0]:{digits}}, {ci[1]:{digits}}]" if ci else "")


def _latency_cell(x: LatencyEstimate | None) -> str:
    if x is None or x.value_s is None:
        return "n/a"
    scale, unit = (1000.0, "ms") if x.value_s < 1 else (1.0, "s")
    ci = f" [{x.ci_s[0] * scale:.3g}, {x.ci_s[1] * scale:.3g}]" if x.ci_s else ""
    return f"{x.value_s * scale:.3g}{ci} {unit}"


SWEEP_LEVEL_HEADERS = ["load", "n measured", "output tok/s [CI]", "tok/s per GPU [CI]", "interactivity tok/s/user [CI]",
                       "requests/s [CI]", "goodput req/s [CI]", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90",
                       "E2E p90", "SLO attainment [CI]"]  # fmt: skip


def sweep_level_rows(sweep: SweepAnalysis, arm: str) -> list[list[str]]:
    """One arm's row per level, in sweep order (shared with the HTML)."""
    rows = []
    for p in (p for p in sweep.points if p.arm == arm):
        att = p.slo_attainment
        rows.append(
            [
                p.label,
                str(p.requests_measured),
                rate_cell(p.output_tokens_per_s),
                _num_ci(p.output_tokens_per_s_per_gpu, p.output_tokens_per_s_per_gpu_ci),
                _num_ci(p.interactivity_tokens_per_s_per_user, p.interactivity_tokens_per_s_per_user_ci),
                rate_cell(p.requests_per_s),
                rate_cell(p.goodput_rps),
                *(_latency_cell(p.latency(k)) for k in TABLE_LATENCIES),
                "n/a"
                if att is None
                else f"{att:.1%}"
                + (f" [{p.slo_attainment_ci[0]:.1%}, {p.slo_attainment_ci[1]:.1%}]" if p.slo_attainment_ci else "")
                + ("" if p.meets_slo else " (misses)"),
            ]
        )
    return rows


CAPACITY_HEADERS = ["arm", "capacity", "CI", "between levels", "note"]


def capacity_rows(sweep: SweepAnalysis) -> list[list[str]]:
    rows = []
    for c in sweep.capacities:
        ci = f"[{c.ci_load[0]:.3g}, {c.ci_load[1]:.3g}]" if c.ci_load else "n/a"
        between = f"{c.lower_level} .. {c.upper_level}" if c.upper_level and c.lower_level else "-"
        note = "a level above the first miss meets the SLO again" if c.meets_again else "-"
        rows.append([c.arm, c.text, ci, between, note])
    return rows


SWEEP_COMPARISON_HEADERS = ["B vs A", "statistic", "A", "B", "B/A", "CI (engines + requests)", "CI (one engine)",
                            "dof", "verdict"]  # fmt: skip


def _stat_value(s: SweepStatistic, v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g} {s.unit}"


def sweep_comparison_rows(sweep: SweepAnalysis) -> list[list[str]]:
    rows = []
    for c in sweep.comparisons:
        for s in (c.throughput_at_matched_interactivity, c.capacity):
            rows.append(
                [
                    f"{c.b_arm} vs {c.a_arm}" + (" (A/A)" if c.kind == "aa" else ""),
                    s.label,
                    _stat_value(s, s.a_value),
                    _stat_value(s, s.b_value),
                    fmt.ratio(s.ratio),
                    fmt.ratio_interval(s.ci),
                    fmt.ratio_interval(s.ci_within_engine),
                    str(s.dof),
                    VERDICT_MARK[s.verdict] + (f" ({s.note})" if s.note else ""),
                ]
            )
    return rows


def sweep_comparison_header(c: SweepComparison) -> list[str]:
    """What a sweep comparison's verdicts rest on (shared with the HTML)."""
    s = c.throughput_at_matched_interactivity
    rng = c.matched_interactivity_tokens_per_s_per_user
    where = f"interactivity {rng[0]:.4g} to {rng[1]:.4g} tok/s/user" if rng else "no shared interactivity"
    lines = [f"{c.b_arm} vs {c.a_arm}: {c.design}; matched over {where}; intervals at {s.ci_level * 100:.2f}%."]
    if c.design_advice:
        lines.append(
            "No verdicts: this design cannot tell an effect from the difference between two engine instances. "
            f"To get verdicts, {c.design_advice}."
        )
    return lines


LEVEL_VERDICT_HEADERS = ["level", "output tok/s B/A [CI]", "verdict", "pairs for min. effect",
                         "interactivity B/A [CI]", "verdict", "improved", "regressed"]  # fmt: skip


def level_verdict_rows(c: SweepComparison) -> list[list[str]]:
    rows = []
    for lv in c.levels:
        rows.append(
            [
                lv.label,
                f"{fmt.ratio(lv.output_tokens_per_s_ratio)} {fmt.ratio_interval(lv.output_tokens_per_s_ci)}",
                VERDICT_MARK[lv.output_tokens_per_s_verdict],
                fmt.count(lv.output_tokens_per_s_pairs_needed),
                f"{fmt.ratio(lv.interactivity_ratio)} {fmt.ratio_interval(lv.interactivity_ci)}",
                VERDICT_MARK[lv.interactivity_verdict],
                ", ".join(lv.improved) or "-",
                ", ".join(lv.regressed) or lv.note or "-",
            ]
        )
    return rows


def sweep_sentence(sweep: SweepAnalysis) -> str:
    return (
        f"{len(sweep.levels)} {sweep.level_kind} levels ({sweep.load_unit}), every arm's engine serving each in every "
        f"round. Per-arm intervals at {sweep.ci_level:.0%}: rates by batch means, per-GPU throughput, interactivity, "
        "attainment and latencies by the bootstrap. " + " ".join(sweep.notes)
    )


def sweep_markdown(sweep: SweepAnalysis) -> list[str]:
    lines = ["## Load sweep", "", sweep_sentence(sweep), "", "### Capacity and B/A on the frontier", ""]
    lines += [*_md_table(CAPACITY_HEADERS, capacity_rows(sweep)), ""]
    if sweep.comparisons:
        for c in sweep.comparisons:
            lines += [_emphasis(x) for x in sweep_comparison_header(c)] + [""]
        lines += [*_md_table(SWEEP_COMPARISON_HEADERS, sweep_comparison_rows(sweep)), ""]
    for c in sweep.comparisons:
        lines += [
            f"### Per level: {c.b_arm} vs {c.a_arm}",
            "",
            *_md_table(LEVEL_VERDICT_HEADERS, level_verdict_rows(c)),
        ]
        lines.append("")
    for arm in dict.fromkeys(p.arm for p in sweep.points):
        lines += [f"### Per level: {arm}", "", *_md_table(SWEEP_LEVEL_HEADERS, sweep_level_rows(sweep, arm)), ""]
    lines += [f"- {arm} not in the sweep analysis: {why}" for arm, why in sweep.skipped_arms.items()]
    return lines


def report_sweep(result: RunResult, analysis: RunAnalysis, sweep: SweepAnalysis | None) -> SweepAnalysis | None:
    """What a report's sweep section shows: ``sweep`` if given, else for a run with a sweep its analysis with the
    settings of ``analysis``; None for a run without one (the Markdown and the HTML report alike)."""
    if sweep is None and result.config.sweep is not None:
        sweep = analyse_sweep(result, analysis.settings)
    return sweep


def render_markdown(
    result: RunResult,
    analysis: RunAnalysis,
    nightly: NightlyVerdict | None = None,
    sweep: SweepAnalysis | None = None,
) -> str:
    """The report; a run with a sweep gets its sweep section (see ``report_sweep``)."""
    sweep = report_sweep(result, analysis, sweep)
    lines = [
        f"# moeperf report: {result.run_id}",
        "",
        f"Experiment `{result.experiment}`, status **{result.status}**, {result.started_at} to {result.finished_at}.",
        f"Goodput SLOs: {analysis.slo.describe()}. Baseline arm: `{analysis.baseline_arm}`.",
        warmup_sentence(analysis, result),
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
    lines += _step_time_rounds(result, analysis)
    lines += _routing(result)
    lines += _compile_attribution(result)
    lines += _ttft_over_time(analysis)
    if analysis.arm_rates:
        lines += ["## Rates", "", rates_sentence(analysis), "", *_md_table(RATE_HEADERS, rate_rows(analysis)), ""]
    if sweep is not None:
        lines += sweep_markdown(sweep)
    lines.append("## A/B verdicts")
    lines.append("")
    if not analysis.comparisons:
        lines += ["No comparison: fewer than two usable arms.", ""]
    for c in analysis.in_report_order:
        lines += _comparison(c)
    for arm, why in analysis.skipped_arms.items():
        lines.append(f"- {arm} not compared: {why}")
    return "\n".join(lines).rstrip() + "\n"
