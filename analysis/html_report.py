"""The self-contained HTML report: one file, inline CSS and SVG, nothing fetched when it opens.

It is rendered from a saved result (and the analysis computed from it), so the page can be rebuilt
and shared long after the cluster is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from html import escape

import numpy as np

from analysis import compile_attribution, engine_window, fmt, routing, step_time_rounds, ttft_over_time
from analysis.markdown import (
    CAPACITY_HEADERS,
    LEVEL_VERDICT_HEADERS,
    RATE_HEADERS,
    SWEEP_COMPARISON_HEADERS,
    SWEEP_LEVEL_HEADERS,
    capacity_rows,
    comparison_header,
    level_verdict_rows,
    rate_rows,
    rates_sentence,
    report_sweep,
    sweep_comparison_header,
    sweep_comparison_rows,
    sweep_level_rows,
    sweep_sentence,
    warmup_sentence,
)
from analysis.nightly import NightlyVerdict
from analysis.samples import arm_control_of
from analysis.svg import CDF_EXACT_BELOW, BandSeries, Series, cdf_series, frontier_chart, line_chart
from analysis.sweep import SweepAnalysis
from analysis.verdicts import ArmComparison, RunAnalysis
from result_format.run_result import ArmResult, RunResult
from workloads.record_columns import RecordColumns, csr_gaps, csr_positions, row_chunks

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1320px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.v-regressed{background:#fbd5d5;font-weight:600}.v-improved{background:#d4f4dc;font-weight:600}
.v-not-measured,.v-no-verdict--design{color:#888}.plots{display:flex;flex-wrap:wrap;gap:12px}
svg.plot{border:1px solid #eee;background:#fff}svg .title{font-size:13px;font-weight:600}
svg .tick{font-size:10px;fill:#444}svg .axis{font-size:11px;fill:#222}svg .legend{font-size:11px}
.banner{padding:8px 12px;border-radius:4px;margin:8px 0;font-weight:600}
.b-ok{background:#d4f4dc}.b-regression,.b-run_failed{background:#fbd5d5}.b-insufficient_history{background:#fff3c4}
pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto;max-height:360px}.muted{color:#666}.warn{color:#b00020;font-weight:600}
"""


def _table(headers: list[str], rows: list[list[str]], cls: str = "", raw: bool = False) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(c if raw else f"<td>{escape(c)}</td>" for c in row)
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _td(text: str, cls: str = "") -> str:
    return f'<td class="{cls}">{escape(text)}</td>'


def _header(c: ArmComparison) -> str:
    parts = []
    for line in comparison_header(c):
        cls = "banner b-regression" if line.startswith(("No verdicts", "confounded by compilation")) else "muted"
        parts.append(f'<p class="{cls}">{escape(line)}</p>')
    return "".join(parts)


def _comparison(c: ArmComparison) -> str:
    if c.kind == "aa":
        return _noise_floor(c)
    rows = []
    for m in c.metrics:
        rows.append(
            [
                _td(m.label),
                _td(fmt.value(m.a_value, m.unit), "num"),
                _td(fmt.value(m.b_value, m.unit), "num"),
                _td(fmt.ratio(m.ratio), "num"),
                _td(fmt.ratio_interval(m.ci), "num"),
                _td(fmt.ratio_interval(m.ci_within_engine), "num"),
                _td(str(m.dof), "num"),
                _td(fmt.p_value(m.mann_whitney_p), "num"),
                _td(fmt.pct(m.mde_rel), "num"),
                _td(fmt.count(m.pairs_for_min_effect), "num"),
                _td(m.verdict + (f" ({m.note})" if m.note else ""), "verdict v-" + _slug(m.verdict)),
            ]
        )
    headers = ["metric", "A", "B", "B/A", "CI: engines + requests (decides)", "CI: one engine only", "dof",
               "Mann-Whitney p", "min. detectable", "engine pairs for min. effect", "verdict"]  # fmt: skip
    table = _table(headers, rows, cls="verdicts", raw=True)
    flag = ' <span class="v-regressed">confounded by compilation</span>' if c.confounded_by_compilation else ""
    return f"<h3>{escape(c.b_arm)} (B) vs {escape(c.a_arm)} (A){flag}</h3>{_header(c)}{table}"


def _noise_floor(c: ArmComparison) -> str:
    rows = [
        [
            _td(m.label),
            _td(fmt.value(m.a_value, m.unit), "num"),
            _td(fmt.value(m.b_value, m.unit), "num"),
            _td(fmt.ratio(m.ratio), "num"),
            _td(fmt.pct(m.aa_noise_rel), "num"),
            _td(fmt.ratio_interval(m.ci_within_engine), "num"),
            _td(fmt.pct(m.engine_sd_rel), "num"),
            _td(fmt.pct(m.mde_rel), "num"),
            _td(fmt.count(m.pairs_for_min_effect), "num"),
            _td(m.note or "", "v-not-measured" if m.verdict == "not measured" else ""),
        ]
        for m in c.metrics
    ]
    headers = ["metric", "A", "A'", "A'/A", "discrepancy", "CI: one engine only", "engine SD (est.)",
               "min. detectable effect", "engine pairs for min. effect", "note"]  # fmt: skip
    flag = ' <span class="v-regressed">confounded by compilation</span>' if c.confounded_by_compilation else ""
    return (
        f"<h3>A/A noise floor: {escape(c.b_arm)} vs {escape(c.a_arm)}{flag}</h3>{_header(c)}"
        "<p>Two engines with the same settings: their discrepancy is noise, never an effect. The minimum "
        "detectable effect is the smallest change a comparison with this many engine pairs can detect; the engine "
        "pairs for the minimum effect, how many would make the analysis' minimum effect detectable (a projection "
        "from this noise, a lower bound while the pairs are few).</p>"
        + _table(headers, rows, cls="noise-floor", raw=True)
    )


def _slug(verdict: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in verdict).strip("-")


def _rates(analysis: RunAnalysis) -> str:
    if not analysis.arm_rates:
        return ""
    return f"<p>{escape(rates_sentence(analysis))}</p>" + _table(RATE_HEADERS, rate_rows(analysis), cls="rates")


def _finite(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)]


def _ok_itl_ms(cols: RecordColumns) -> np.ndarray:
    """Inter-token gaps of the arm's successful requests in ms, every k-th of them as ``cdf_series`` would thin
    them (at most ``CDF_EXACT_BELOW``), made a chunk of requests at a time: a long run's gaps are as large as its
    token times, and this runs while the analysis still holds its own."""
    rows = np.flatnonzero(cols.ok)
    lengths = np.maximum(cols.token_counts[rows] - 1, 0)
    step = max(1, -(-int(lengths.sum()) // CDF_EXACT_BELOW))
    parts, seen = [], 0
    for part in row_chunks(lengths):
        gaps = csr_gaps(cols.token_times_s, cols.token_offsets, rows[part])[0]
        parts.append(gaps[(-seen) % step :: step] * 1000)
        seen += gaps.size
    return np.concatenate(parts) if parts else np.empty(0)


def _throughput_series(arm: ArmResult) -> Series:
    """Output tokens/s against time since the round's first send, averaged over the arm's rounds."""
    cols = arm.columns
    rows = np.flatnonzero(cols.ok & ~np.isnan(cols.actual_send_s))
    if not rows.size:
        return Series(arm.name, [], [])
    rounds = cols.round[rows]
    t0 = {int(rnd): float(cols.intended_send_s[rows][rounds == rnd].min()) for rnd in np.unique(rounds)}
    start = np.array([t0[int(rnd)] for rnd in rounds])
    lengths = cols.token_counts[rows]

    def since_start() -> Iterator[np.ndarray]:  # token times less their round's start, a chunk of rows at a time
        for part in row_chunks(lengths):
            positions = csr_positions(cols.token_offsets, rows[part])[0]
            yield cols.token_times_s[positions] - np.repeat(start[part], lengths[part])

    if not lengths.sum():
        return Series(arm.name, [], [])
    span = max(float(t.max()) for t in since_start() if t.size)
    width = max(0.5, span / 60)
    edges = np.arange(0.0, span + width, width)
    counts = np.sum([np.histogram(t, bins=edges)[0] for t in since_start()], axis=0)
    return Series(arm.name, list(edges[:-1]), list(counts / width / len(t0)))


def _charts(result: RunResult) -> str:
    ok_arms = [a for a in result.arms if len(a.columns)]
    ttft = [cdf_series(a.name, _finite(a.columns.ttft_s[a.columns.ok]) * 1000) for a in ok_arms]
    itl = [cdf_series(a.name, _ok_itl_ms(a.columns)) for a in ok_arms]
    thr = [_throughput_series(a) for a in ok_arms]
    return (
        '<div class="plots">'
        + line_chart("CDF of TTFT per arm", ttft, "TTFT (ms)", "fraction of requests", step=True)
        + line_chart("CDF of inter-token latency per arm", itl, "ITL (ms)", "fraction of tokens", step=True)
        + line_chart(
            "Output throughput over time", thr, "seconds since the round's first request", "output tokens/s", step=True
        )
        + "</div>"
    )


def _nightly(v: NightlyVerdict) -> str:
    parts = [
        f'<h2>Nightly gate</h2><div class="banner b-{v.status}">{escape(v.status)} (exit {v.exit_code}): '
        f"{escape(v.reason)}</div>"
    ]
    if v.history_runs:
        parts.append(
            f"<p class='muted'>Baseline: median of {len(v.history_runs)} night(s): "
            f"{escape(', '.join(v.history_runs))}. Policy: {escape(v.policy.model_dump_json())}</p>"
        )
    sweep = any(c.level is not None or c.metric == "capacity" for c in v.checks)
    checks = sorted(v.checks, key=lambda c: (not c.regression, not c.flagged, c.arm, c.level or "", c.metric))
    rows = []
    for c in checks:
        cls = "v-regressed" if c.regression else ("v-not-measured" if c.ratio is None else "")
        rows.append(
            [
                _td(c.arm),
                *([_td(c.level or "all levels")] if sweep else []),
                _td(c.label),
                _td(fmt.value(c.tonight, c.unit), "num"),
                _td(fmt.value(c.baseline, c.unit), "num"),
                _td(fmt.ratio(c.ratio), "num"),
                _td(fmt.ratio_interval(c.ci), "num"),
                _td(fmt.pct(c.night_to_night_rel), "num"),
                _td(fmt.p_value(c.mann_whitney_p), "num"),
                _td("yes" if c.flagged else "no"),
                _td(str(c.consecutive_flagged), "num"),
                _td("REGRESSION" if c.regression else "no", cls),
                *([_td(c.note or "")] if sweep else []),
            ]
        )
    headers = ["arm", *(["level"] if sweep else []), "metric", "tonight", "baseline", "ratio", "CI",
               "night-to-night SD", "MWU p", "flagged tonight", "nights in a row", "regression",
               *(["note"] if sweep else [])]  # fmt: skip
    flagged = [r for r, c in zip(rows, checks, strict=True) if c.flagged or c.regression]
    calm = [r for r, c in zip(rows, checks, strict=True) if not (c.flagged or c.regression)]
    parts.append(f"<p>{len(flagged)} of {len(rows)} checks flagged tonight.</p>")
    if flagged:
        parts.append(_table(headers, flagged, cls="nightly", raw=True))
    if calm:
        parts.append(
            f"<details><summary>{len(calm)} checks not flagged</summary>"
            f"{_table(headers, calm, cls='nightly', raw=True)}</details>"
        )
    parts += [f"<p>{escape(n)}</p>" for n in v.notes]
    return "".join(parts)


def _engine_window(result: RunResult) -> str:
    if not engine_window.has_engine_window(result.arms):
        return (
            '<p class="not-measured">Not measured in this run: the result file carries no per-rank step, '
            "sync-stall or compile metrics.</p>"
        )
    return (
        "<p>Per rank, from the moeperf plugin's counters (growth while the arm's requests were replayed):</p>"
        + _table(engine_window.RANK_HEADERS, engine_window.rank_table(result.arms), cls="ranks")
        + "<p>Triton JIT compiles in the measured window (requests waited for these):</p>"
        + _table(engine_window.COMPILE_HEADERS, engine_window.compile_table(result.arms), cls="compiles")
    )


def _step_time_rounds(result: RunResult, analysis: RunAnalysis) -> str:
    """Only when some arm kept its step times per round (the same content as the Markdown's section)."""
    comparisons = step_time_rounds.step_time_rounds(result, analysis)
    if not comparisons:
        return ""
    table = _table(step_time_rounds.headers(comparisons), step_time_rounds.table_rows(comparisons), cls="step-rounds")
    return f"<h2>{escape(step_time_rounds.SECTION_TITLE)}</h2><p>{escape(step_time_rounds.SECTION_INTRO)}</p>{table}"


def _routing(result: RunResult) -> str:
    """Only when some arm counted its routing (the same content as the Markdown's section)."""
    arms = routing.run_routing(result.arms)
    if not arms:
        return ""
    warnings = "".join(f'<p class="warn">{escape(w)}</p>' for w in routing.warnings(arms))
    return (
        f"<h2>{escape(routing.SECTION_TITLE)}</h2><p>{escape(routing.SECTION_INTRO)}</p>"
        + _table(routing.HEADERS, [a.row() for a in arms], cls="routing")
        + warnings
    )


def _compile_attribution(result: RunResult) -> str:
    """Only when some arm logged a compile while serving (the same content as the Markdown's section)."""
    attributions = compile_attribution.attribute_run(result.arms)
    if not attributions:
        return ""
    parts = [
        f"<h2>{escape(compile_attribution.SECTION_TITLE)}</h2>",
        f"<p>{escape(compile_attribution.SECTION_INTRO)}</p>",
        _table(compile_attribution.SUMMARY_HEADERS, compile_attribution.summary_rows(attributions), cls="compiles"),
    ]
    for x in attributions:
        rows, left_out = compile_attribution.event_rows(x)
        parts += [f"<h3>{escape(x.arm)}</h3>", _table(compile_attribution.EVENT_HEADERS, rows, cls="compiles")]
        if left_out:
            parts.append(f'<p class="muted">{left_out} more compile event(s) of {escape(x.arm)} not listed.</p>')
    return "".join(parts)


def _ttft_over_time(analysis: RunAnalysis) -> str:
    """Only when some arm has windows (the same content as the Markdown's section)."""
    windows = analysis.ttft_over_time
    if not windows:
        return ""
    rows = ttft_over_time.table_rows(windows, ttft_over_time.compare_run(windows, analysis))
    table = _table(ttft_over_time.HEADERS, rows, cls="ttft-over-time")
    return f"<h2>{escape(ttft_over_time.SECTION_TITLE)}</h2><p>{escape(ttft_over_time.SECTION_INTRO)}</p>{table}"


def _arms(result: RunResult) -> str:
    rows = []
    for a in result.arms:
        eng = a.engine
        rows.append(
            [
                a.name,
                a.status + (f": {a.failure_reason}" if a.failure_reason else ""),
                a.flags.describe(),
                "yes" if a.flags_applied else "no",
                arm_control_of(a) or "-",
                f"{a.requests_succeeded} ok / {a.requests_sent} sent / {a.requests_planned} planned",
                f"{eng.device}, TP={eng.tensor_parallel_size}, vLLM {eng.vllm_version}, "
                f"ready in {eng.describe_startup()}, MoE backend {', '.join(eng.moe_backends) or 'not logged'}"
                if eng
                else "-",
                "; ".join(a.notes) or "-",
            ]
        )
    return _table(
        ["arm", "status", "flags", "flags applied", "control of", "requests", "engine", "notes"], rows, cls="arms"
    )


def _frontier_series(sweep: SweepAnalysis) -> list[BandSeries]:
    out = []
    for f in sweep.frontiers:
        front = f.frontier
        cap = sweep.capacity(f.arm)
        marker = None
        if cap.at_interactivity_tokens_per_s_per_user is not None and cap.at_output_tokens_per_s_per_gpu is not None:
            marker = (cap.at_interactivity_tokens_per_s_per_user, cap.at_output_tokens_per_s_per_gpu)
        out.append(
            BandSeries(
                name=f.arm,
                xs=[p.interactivity_tokens_per_s_per_user for p in front],
                ys=[p.output_tokens_per_s_per_gpu for p in front],
                lo=[(p.output_tokens_per_s_per_gpu_ci or (p.output_tokens_per_s_per_gpu,) * 2)[0] for p in front],
                hi=[(p.output_tokens_per_s_per_gpu_ci or (p.output_tokens_per_s_per_gpu,) * 2)[1] for p in front],
                others=[
                    (p.interactivity_tokens_per_s_per_user, p.output_tokens_per_s_per_gpu)
                    for p in f.points
                    if not p.on_frontier
                ],
                marker=marker,
                marker_label=f"{f.arm}: capacity {cap.text}",
            )
        )
    return out


def _sweep(sweep: SweepAnalysis | None) -> str:
    """The load-sweep section; empty for a run without a sweep, so such a page is what it always was."""
    if sweep is None:
        return ""
    chart = frontier_chart(
        f"Throughput per GPU against interactivity ({sweep.ci_level:.0%} bootstrap band; diamond: capacity)",
        _frontier_series(sweep),
        "interactivity (tokens/s per user: 1 / median TPOT)",
        "output tokens/s per GPU",
    )
    parts = ["<h2>Load sweep</h2>", f"<p>{escape(sweep_sentence(sweep))}</p>", f'<div class="plots">{chart}</div>']
    parts += ["<h3>Capacity</h3>", _table(CAPACITY_HEADERS, capacity_rows(sweep), cls="capacity")]
    if sweep.comparisons:
        parts.append("<h3>B/A on the frontier</h3>")
        for c in sweep.comparisons:
            for line in sweep_comparison_header(c):
                cls = "banner b-regression" if line.startswith("No verdicts") else "muted"
                parts.append(f'<p class="{cls}">{escape(line)}</p>')
        parts.append(_table(SWEEP_COMPARISON_HEADERS, sweep_comparison_rows(sweep), cls="sweep-verdicts"))
    for c in sweep.comparisons:
        parts.append(f"<h3>Per level: {escape(c.b_arm)} vs {escape(c.a_arm)}</h3>")
        parts.append(_table(LEVEL_VERDICT_HEADERS, level_verdict_rows(c), cls="level-verdicts"))
    for arm in dict.fromkeys(p.arm for p in sweep.points):
        parts.append(f"<h3>Per level: {escape(arm)}</h3>")
        parts.append(_table(SWEEP_LEVEL_HEADERS, sweep_level_rows(sweep, arm), cls="sweep-levels"))
    parts += [f"<p>{escape(k)} not in the sweep analysis: {escape(v)}</p>" for k, v in sweep.skipped_arms.items()]
    return "".join(parts)


def render_html(
    result: RunResult,
    analysis: RunAnalysis,
    nightly: NightlyVerdict | None = None,
    sweep: SweepAnalysis | None = None,
) -> str:
    """The page; a run with a sweep gets its sweep section (see ``markdown.report_sweep``)."""
    sweep = report_sweep(result, analysis, sweep)
    comparisons = "".join(_comparison(c) for c in analysis.in_report_order)
    comparisons = comparisons or "<p>No comparison: fewer than two usable arms.</p>"
    skipped = "".join(f"<p>{escape(k)} not compared: {escape(v)}</p>" for k, v in analysis.skipped_arms.items())
    notes = "".join(f"<li>{escape(n)}</li>" for n in result.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>moeperf report {escape(result.run_id)}</title>
<style>{CSS}</style></head><body>
<h1>moeperf report: {escape(result.run_id)}</h1>
<p>Experiment <b>{escape(result.experiment)}</b>, status <b>{escape(result.status)}</b>,
{escape(result.started_at)} to {escape(result.finished_at)}; {result.schedule.requests} requests per arm over
{result.schedule.duration_s:.1f} s of schedule. Baseline arm: <b>{escape(str(analysis.baseline_arm))}</b>.
{escape(warmup_sentence(analysis, result))} Goodput SLOs: {escape(analysis.slo.describe())}.</p>
<p class="muted">Command: <code>{escape(" ".join(result.command))}</code>.
Bootstrap: {analysis.settings.bootstrap_resamples} resamples, seed {analysis.settings.seed},
family-wise alpha {analysis.settings.alpha}, minimum effect
{fmt.pct(analysis.settings.min_effect)}.</p>
{_nightly(nightly) if nightly is not None else ""}{_sweep(sweep)}
<h2>Verdicts</h2>{comparisons}{skipped}
<h2>Rates per arm</h2>{_rates(analysis)}
<h2>Latency and throughput</h2>{_charts(result)}
<h2>Per-rank step stalls and Triton compile events</h2>{_engine_window(result)}
{_step_time_rounds(result, analysis)}
{_routing(result)}
{_compile_attribution(result)}
{_ttft_over_time(analysis)}
<h2>Arms and their flags</h2>{_arms(result)}
{f"<h2>Run notes</h2><ul>{notes}</ul>" if notes else ""}
<h2>Environment</h2><pre>{escape(json.dumps(result.environment, indent=2, sort_keys=True))}</pre>
</body></html>
"""
