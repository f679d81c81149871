"""TTFT by send time since the arm-round's first request: hand-computed windows, ratios and the reports' section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.html_report import render_html
from analysis.markdown import render_markdown
from analysis.report import write_report
from analysis.synthetic import SyntheticArm, synthetic_run, timed_columns
from analysis.synthetic_sweep import SweepArmTruth, SweepLevelTruth, synthetic_sweep_run
from analysis.ttft_over_time import (
    SECTION_TITLE,
    TtftWindow,
    arm_windows,
    compare_windows,
    run_windows,
    since_round_start_s,
    window_index,
)
from analysis.verdicts import AnalysisSettings, analyse_run
from result_format.run_result import RunResult
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord

QUICK = AnalysisSettings(bootstrap_resamples=60)


def rec(
    round: int,
    send: float,
    ttft: float | None,
    *,
    warmup: bool = False,
    error: str | None = None,
    sent: bool = True,
) -> RequestRecord:
    """A request sent on time; ``ttft`` None: no first token came."""
    first = None if ttft is None or not sent else send + ttft
    return RequestRecord(index=0, arm="a", round=round, warmup=warmup, intended_send_s=send,
                         actual_send_s=send if sent else None, first_token_s=first,
                         token_times_s=[] if first is None else [first], end_s=None if not sent else send + 5.0,
                         prompt_tokens_requested=8, output_tokens_requested=1,
                         error_kind=None if error is None else "other", error=error)  # fmt: skip


def test_windows_include_their_start_and_exclude_their_end() -> None:
    t = np.array([0.0, 14.999, 15.0, 29.9, 30.0, 59.99, 60.0, 119.0, 120.0, 299.9, 300.0, 1e6, np.nan, -0.1])
    assert window_index(t).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, -1, -1]


def test_time_is_counted_from_each_rounds_first_intended_send_even_one_never_sent() -> None:
    cols = RecordColumns.from_records(
        [rec(0, 10.0, None, sent=False), rec(0, 12.0, 0.1), rec(1, 3.0, 0.1), rec(1, 20.0, 0.1)]
    )
    assert since_round_start_s(cols).tolist() == [0.0, 2.0, 0.0, 17.0]


def test_each_window_pools_the_rounds_and_keeps_only_measured_requests_with_a_first_token() -> None:
    records = [
        # Round 0 starts at 100 s: its [0, 15) holds TTFTs of 0.1, 0.2 and 0.3 s.
        rec(0, 100.0, 0.1),
        rec(0, 105.0, 0.2),
        rec(0, 114.9, 0.3),
        rec(0, 115.0, 0.05),  # 15 s after the start: the next window
        rec(0, 101.0, 9.0, warmup=True),  # a sweep level's warm-up share: not measured
        rec(0, 102.0, 9.0, error="stream reset"),  # a first token, then failed: not ok
        rec(0, 103.0, None),  # no first token
        # Round 1 starts at 0 s: 0.4 s in [0, 15), 0.15 s in [15, 30), 1.0 s past 300 s.
        rec(1, 0.0, 0.4),
        rec(1, 29.0, 0.15),
        rec(1, 400.0, 1.0),
    ]
    got = arm_windows(RecordColumns.from_records(records))
    assert [(w.start_s, w.end_s, w.requests) for w in got] == [(0.0, 15.0, 4), (15.0, 30.0, 2), (300.0, None, 1)]
    first, second, last = got
    # numpy's linear percentiles of 100, 200, 300 (round 0) and 400 ms (round 1)
    assert first.ttft_p50_ms == pytest.approx(250.0)
    assert first.ttft_p90_ms == pytest.approx(370.0)
    assert first.ttft_mean_ms == pytest.approx(250.0)
    assert (second.ttft_p50_ms, second.ttft_p90_ms, second.ttft_mean_ms) == pytest.approx((100.0, 140.0, 100.0))
    assert (last.ttft_p50_ms, last.ttft_mean_ms) == pytest.approx((1000.0, 1000.0))
    assert [w.label for w in got] == ["[0, 15) s", "[15, 30) s", "[300, end) s"]


def test_an_arm_without_a_first_token_has_no_window() -> None:
    assert arm_windows(RecordColumns.from_records([rec(0, 0.0, None), rec(0, 1.0, 0.2, error="x")])) == []
    assert arm_windows(RecordColumns.empty()) == []


def _window(start: float, end: float | None, mean_ms: float) -> TtftWindow:
    return TtftWindow(start_s=start, end_s=end, requests=3, ttft_p50_ms=mean_ms, ttft_p90_ms=mean_ms,
                      ttft_mean_ms=mean_ms)  # fmt: skip


def test_ratio_of_means_per_window_and_none_where_one_arm_has_no_request() -> None:
    a = [_window(0.0, 15.0, 400.0), _window(15.0, 30.0, 100.0)]
    b = [_window(0.0, 15.0, 100.0), _window(30.0, 60.0, 90.0)]
    c = compare_windows("a", "b", "ab", a, b)
    assert [(w.start_s, w.end_s, w.ratio) for w in c.windows] == [
        (0.0, 15.0, pytest.approx(0.25)),
        (15.0, 30.0, None),
        (30.0, 60.0, None),
    ]
    assert c.ratio(0.0) == pytest.approx(0.25) and c.ratio(120.0) is None


# --- the reports ---------------------------------------------------------------------------------------------


def _known_ttft_run() -> RunResult:
    """Three arms, two rounds of 200 requests sent every 0.2 s (0 to 39.8 s): the baseline's TTFT is 300 ms for
    the first 15 s, then 100 ms; ``fast``'s 150 ms, then 100 ms; the control's as the baseline's."""
    run = synthetic_run("ttft-time", "2026-12-04T00:00:00+00:00",
                        [SyntheticArm("base"), SyntheticArm("base-aa", control_of="base"), SyntheticArm("fast")],
                        n_requests=200, rounds=2)  # fmt: skip
    send = np.arange(200) * 0.2
    cold_s = {"base": 0.3, "base-aa": 0.3, "fast": 0.15}
    arms = []
    for a in run.arms:
        ttft = np.where(send < 15.0, cold_s[a.name], 0.1)
        parts = [timed_columns(a.name, r, send + 50.0 * r, ttft, np.full(200, 0.01), np.full(200, 4)) for r in (0, 1)]
        arms.append(a.with_columns(RecordColumns.concat(parts)))
    return run.model_copy(update={"arms": arms})


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    run = _known_ttft_run()
    out = tmp_path_factory.mktemp("report")
    write_report(run, out, settings=QUICK)
    return run, out


def test_both_reports_show_one_row_per_arm_and_window_with_the_ratio_to_the_arm_it_is_compared_with(known) -> None:
    _, out = known
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert f"## {SECTION_TITLE}" in md and f"<h2>{SECTION_TITLE.replace(chr(39), '&#x27;')}</h2>" in html
    assert md.index(f"## {SECTION_TITLE}") < md.index("## Rates")  # after compile attribution, before the rates
    rows = [line for line in md.splitlines() if line.startswith(("| base", "| fast"))]
    section = [r for r in rows if " s | " in r]
    assert section == [
        "| base | [0, 15) s | 150 | 300.0 | 300.0 | 300.0 | - | - |",
        "| base | [15, 30) s | 150 | 100.0 | 100.0 | 100.0 | - | - |",
        "| base | [30, 60) s | 100 | 100.0 | 100.0 | 100.0 | - | - |",
        "| base-aa | [0, 15) s | 150 | 300.0 | 300.0 | 300.0 | 1.000 | base |",
        "| base-aa | [15, 30) s | 150 | 100.0 | 100.0 | 100.0 | 1.000 | base |",
        "| base-aa | [30, 60) s | 100 | 100.0 | 100.0 | 100.0 | 1.000 | base |",
        "| fast | [0, 15) s | 150 | 150.0 | 150.0 | 150.0 | 0.500 | base |",
        "| fast | [15, 30) s | 150 | 100.0 | 100.0 | 100.0 | 1.000 | base |",
        "| fast | [30, 60) s | 100 | 100.0 | 100.0 | 100.0 | 1.000 | base |",
    ]
    assert '<table class="ttft-over-time">' in html
    assert "<td>fast</td><td>[0, 15) s</td><td>150</td><td>150.0</td><td>150.0</td><td>150.0</td><td>0.500</td>" in html


def test_analysis_json_holds_each_arms_windows(known) -> None:
    _, out = known
    windows = json.loads((out / "analysis.json").read_text())["ttft_over_time"]
    assert list(windows) == ["base", "base-aa", "fast"]
    assert [(w["start_s"], w["end_s"], w["requests"]) for w in windows["fast"]] == [
        (0.0, 15.0, 150),
        (15.0, 30.0, 150),
        (30.0, 60.0, 100),
    ]
    assert windows["fast"][0]["ttft_mean_ms"] == pytest.approx(150.0)


def test_the_steady_state_cut_leaves_the_windows_as_they_are(known) -> None:
    run, out = known
    cut = json.loads((out / "analysis.json").read_text())
    kept = analyse_run(run, QUICK.model_copy(update={"steady_state": "none"}))
    assert cut["warmup_excluded"]  # MSER-5 cut the cold start from the verdicts here ...
    assert {k: [w.model_dump() for w in v] for k, v in kept.ttft_over_time.items()} == cut["ttft_over_time"]


def test_no_section_without_a_usable_request_or_for_a_sweep() -> None:
    run = _known_ttft_run()
    analysis = analyse_run(run, QUICK)
    empty = analysis.model_copy(update={"ttft_over_time": {}})
    assert SECTION_TITLE not in render_markdown(run, empty)
    assert SECTION_TITLE.replace("'", "&#x27;") not in render_html(run, empty)

    sweep = synthetic_sweep_run("sweep", [SweepArmTruth("base"), SweepArmTruth("fast", rate_scale=1.05)],
                                (SweepLevelTruth(1, 2.0, 0.010), SweepLevelTruth(4, 8.0, 0.020)),
                                requests_per_level=40, warmup_per_level=4, rounds=1)  # fmt: skip
    assert run_windows(sweep) == {}
    sweep_analysis = analyse_run(sweep, QUICK)
    assert sweep_analysis.ttft_over_time == {}
    assert SECTION_TITLE not in render_markdown(sweep, sweep_analysis)


def test_an_experiment_about_the_cold_start_is_judged_on_every_request_unless_the_report_says_otherwise() -> None:
    run = _known_ttft_run()
    assert analyse_run(run, QUICK).warmup_excluded  # the default rule cuts this run's slow start
    cold = run.model_copy(update={"config": run.config.model_copy(update={"steady_state": "none"})})
    kept = analyse_run(cold, QUICK)
    assert kept.settings.steady_state == "none" and kept.warmup_excluded == {}
    assert "every request kept" in render_markdown(cold, kept)
    assert {(c.n_a, c.n_b) for c in kept.comparisons} == {(len(a.columns.measured),) * 2 for a in run.arms}
    overridden = analyse_run(cold, QUICK.model_copy(update={"steady_state": "mser5"}))  # `--steady-state mser5`
    assert overridden.settings.steady_state == "mser5" and overridden.warmup_excluded
