"""The report from a real saved run (a CPU `moeperf run`, trimmed to its result file)."""

import re
from pathlib import Path

from analysis.report import load_result, write_report
from analysis.report_cli import main
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run

FIXTURE = Path(__file__).parent / "data" / "analysis_quick_cpu_result.json"
QUICK = AnalysisSettings(bootstrap_resamples=100)


def test_real_result_gives_a_complete_self_contained_page(tmp_path):
    result = load_result(FIXTURE)
    analysis, written = write_report(result, tmp_path, settings=QUICK)
    html = (tmp_path / "report.html").read_text()
    assert {p.name for p in written} == {"report.html", "report.md", "analysis.json"}
    assert html.count('<svg class="plot"') == 3
    assert html.count('class="series"') == 3 * len(result.arms)
    assert '<table class="verdicts">' in html and '<table class="arms">' in html
    assert "Not measured in this run" in html
    for arm in result.arms:
        assert arm.flags.describe() in html
    # Nothing is fetched when the page opens: no external scripts, styles, images or fonts.
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "<script" not in html
    assert analysis.baseline_arm == "baseline"
    assert [c.b_arm for c in analysis.comparisons] == ["all-optimizations"]


def test_small_run_withholds_tail_verdicts_and_one_round_withholds_all():
    analysis = analyse_run(load_result(FIXTURE), QUICK)
    by_metric = {m.metric: m for m in analysis.comparisons[0].metrics}
    assert by_metric["ttft_s_p99"].verdict == "not measured" and "p99" in (by_metric["ttft_s_p99"].note or "")
    # One round, no A/A control: two engines, nothing to tell their offset from an effect.
    assert by_metric["ttft_s_p50"].verdict == "no verdict (design)"
    assert by_metric["output_tokens_per_s"].verdict == "no verdict (design)"
    assert by_metric["output_tokens_per_s"].ci_within_engine is not None  # rates have intervals now


def test_reports_say_what_to_add_when_the_design_gives_no_verdict(tmp_path):
    write_report(load_result(FIXTURE), tmp_path, settings=QUICK)
    for name in ("report.md", "report.html"):
        text = (tmp_path / name).read_text()
        assert "no verdict (design)" in text
        assert "`rounds: 2`" in text and "control_of: baseline" in text


def test_markdown_summary_lists_every_metric_the_regression_and_the_noise_floor(tmp_path):
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", control_of="baseline"),
        SyntheticArm("b", tpot_scale=1.1),
    ]
    run = synthetic_run("md", "2026-11-01T00:00:00+00:00", arms, 200, seed=3, rounds=4, request_sigma=0.5, sigma=0.01)
    write_report(run, tmp_path, formats=["md"], settings=QUICK)
    md = (tmp_path / "report.md").read_text()
    assert md.count("| TPOT p") == 2 * 3 and "| output tokens/s |" in md  # B/A table and noise-floor table
    assert "**REGRESSED**" in md
    assert "### A/A noise floor: baseline-aa vs baseline" in md
    assert not (tmp_path / "report.html").exists()


def test_reports_and_the_console_summary_read_the_same_rates(tmp_path):
    """The per-arm rate table of the report is ArmSummary's (what the console table prints)."""
    from workloads.metrics import summarize

    result = load_result(FIXTURE)
    analysis, _ = write_report(result, tmp_path, settings=QUICK)
    md = (tmp_path / "report.md").read_text()
    for arm in result.arms:
        summary = summarize(arm.records, result.config.slo)
        assert analysis.arm_rates[arm.name] == summary.rates
        assert f"{summary.output_tokens_per_s:.4g}" in md and f"{summary.requests_per_s:.4g}" in md


def test_cli_writes_into_the_run_folder_by_default(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "x"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(FIXTURE.read_text())
    assert main([str(run_dir), "--bootstrap", "60"]) == 0
    assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()
    assert "# moeperf report" in capsys.readouterr().out


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    (tmp_path / "result.json").write_text('{"schema_version": 1}')
    assert main([str(tmp_path)]) == 2
    assert main([str(FIXTURE), "--out", str(tmp_path / "o"), "--format", "pdf"]) == 2
    assert main([str(FIXTURE), "--out", str(tmp_path / "o"), "--baseline", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no result.json" in err and "pdf" in err and "nope" in err


def test_cli_slo_options_reach_the_goodput(tmp_path):
    out = tmp_path / "o"
    assert main([str(FIXTURE), "--out", str(out), "--slo-ttft-ms", "1", "--bootstrap", "60", "--quiet"]) == 0
    assert "TTFT &lt;= 0.001 s" in (out / "report.html").read_text()


def test_numbers_read_as_people_write_them():
    from analysis import fmt

    assert fmt.value(0.0123, "s") == "12.3 ms" and fmt.value(2.5, "s") == "2.5 s"
    assert fmt.value(None, "s") == "n/a" and fmt.value(197.4, "tok/s") == "197.4 tok/s"
    assert fmt.pct(0.0512) == "5.1%" and fmt.pct(46.0) == ">1000%"
    assert fmt.p_value(3e-7) == "<1e-4" and fmt.interval((0.9, 1.1)) == "[0.900, 1.100]"
    assert fmt.ratio_interval((0.9, 1.1)) == "[0.900, 1.100]" and fmt.ratio_interval(None) == "n/a"
    assert fmt.ratio_interval((1.2e-5, 55528.81)) == "[<0.001, >1000]"  # one engine pair on 1 dof: no information
