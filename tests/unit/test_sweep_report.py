"""The sweep where users look: per-level tables in both reports, the frontier chart in the HTML, and runs
without a sweep rendered as before."""

import re

import pytest

from analysis.html_report import render_html
from analysis.markdown import render_markdown
from analysis.report import write_report
from analysis.sweep import SweepAnalysis, analyse_sweep
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.synthetic_sweep import SweepArmTruth, SweepLevelTruth, synthetic_sweep_run
from analysis.verdicts import AnalysisSettings, analyse_run

QUICK = AnalysisSettings(bootstrap_resamples=60)
LEVELS = (
    SweepLevelTruth(1, 2.0, 0.010),
    SweepLevelTruth(4, 8.0, 0.020, ttft_miss_share=0.05),
    SweepLevelTruth(8, 16.0, 0.028, ttft_miss_share=0.5),
)
ARMS = [SweepArmTruth("base"), SweepArmTruth("base-aa", control_of="base"), SweepArmTruth("fast", rate_scale=1.05)]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    run = synthetic_sweep_run("sweep-report", ARMS, LEVELS, requests_per_level=60, warmup_per_level=6, rounds=2)
    out = tmp_path_factory.mktemp("report")
    analysis, files = write_report(run, out, settings=QUICK)
    sweep = SweepAnalysis.model_validate_json((out / "sweep.json").read_text())
    return run, analysis, sweep, out, files


def _frontier_svg(html: str) -> str:
    (svg,) = re.findall(r'<svg class="plot frontier".*?</svg>', html, flags=re.S)
    return svg


def test_markdown_has_every_arms_per_level_table_and_the_frontier_comparison(written):
    run, _, sweep, out, files = written
    md = (out / "report.md").read_text()
    assert {p.name for p in files} == {"report.html", "report.md", "analysis.json", "sweep.json"}
    assert "## Load sweep" in md and "### Capacity and B/A on the frontier" in md
    for arm in ("base", "base-aa", "fast"):
        assert f"### Per level: {arm}" in md
    assert md.count("| load | n measured | output tok/s [CI] | tok/s per GPU [CI] |") == 3
    for lv in ("c=1", "c=4", "c=8"):
        assert md.count(f"| {lv} |") == 3 + 2  # one row per arm, one per comparison's per-level verdicts
    p = sweep.point("fast", 0)
    assert f"| c=1 | {p.requests_measured} | {p.output_tokens_per_s.per_s:.4g} [" in md
    c = sweep.comparison("fast", "base")
    s = c.throughput_at_matched_interactivity
    assert f"| fast vs base | {s.label} |" in md and f"| {s.ratio:.3f} |" in md
    assert "| base-aa vs base (A/A) |" in md and "noise floor" in md
    cap = sweep.capacity("base")
    assert cap.text == "4.44 concurrency" and f"| base | {cap.text} |" in md and "c=4 .. c=8" in md
    assert "(misses)" in md  # c=8: half its requests over the TTFT limit


def test_html_plots_one_frontier_per_arm_with_bands_and_capacity_and_the_same_tables(written):
    _, _, sweep, out, _ = written
    html = (out / "report.html").read_text()
    svg = _frontier_svg(html)
    assert re.findall(r'<polyline class="series" data-arm="([^"]+)"', svg) == ["base", "base-aa", "fast"]
    assert len(re.findall(r'<polygon class="band" data-arm=', svg)) == 3
    assert len(re.findall(r'<path class="capacity" data-arm=', svg)) == 3
    # Every level of every arm is a dot (all on the frontier here: throughput rises as interactivity falls).
    assert svg.count('<circle class="level"') == 3 * len(LEVELS)
    assert html.count('<table class="sweep-levels">') == 3 and '<table class="capacity">' in html
    assert '<table class="sweep-verdicts">' in html and html.count('<table class="level-verdicts">') == 2
    assert "Per level: fast vs base" in html
    # Nothing fetched: no external scripts or styles came with the chart.
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html) and "<script" not in html


def test_renderers_analyse_the_sweep_themselves_when_not_given_one(written):
    run, analysis, sweep, out, _ = written
    assert render_markdown(run, analysis) == (out / "report.md").read_text()
    assert render_html(run, analysis, sweep=sweep) == (out / "report.html").read_text()


def test_a_run_without_a_sweep_renders_without_a_sweep_section(tmp_path):
    run = synthetic_run("plain", "2026-11-01T02:00:00+00:00", [SyntheticArm("a"), SyntheticArm("b")], 60)
    assert analyse_sweep(run, QUICK) is None
    _, files = write_report(run, tmp_path, settings=QUICK)
    assert {p.name for p in files} == {"report.html", "report.md", "analysis.json"}
    md, html = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    assert "Load sweep" not in md and "Load sweep" not in html
    assert 'class="plot frontier"' not in html and html.count('<svg class="plot"') == 3
    analysis = analyse_run(run, QUICK)
    assert render_markdown(run, analysis) == md and render_html(run, analysis) == html
