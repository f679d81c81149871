"""Per-rank stalls and Triton compiles read back from a result's window metrics, as the reports show them."""

from __future__ import annotations

from analysis.engine_window import compile_table, rank_rows, rank_table, step_skew_mean_ms
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, parse_series_key, series_key

KERNEL = "vllm.model_executor.layers.fused_moe.fused_moe.fused_moe_kernel"


def _labels(rank: str, **extra: str) -> str:
    labels = {"arm": "a", "engine": "run/a", "gpu": rank, "gpu_uuid": f"GPU-{rank}", "node": "n", "rank": rank}
    labels |= extra
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def _arm(window: dict[str, float], name: str = "a") -> ArmResult:
    return ArmResult(name=name, flags=OptimizationFlags(), flags_applied=True, status="ok", requests_planned=1,
                     requests_sent=1, requests_succeeded=1, requests_failed=0, requests_not_sent=0,
                     window_metrics=window, records_file="records/a.jsonl")  # fmt: skip


def tp2_window() -> dict[str, float]:
    w: dict[str, float] = {}
    for rank, stall_s in (("0", 0.002), ("1", 0.5)):
        w[f"moeperf_rank_step_seconds_count{{{_labels(rank, phase='decode')}}}"] = 90
        w[f"moeperf_rank_step_seconds_count{{{_labels(rank, phase='prefill')}}}"] = 10
        w[f"moeperf_rank_step_seconds_sum{{{_labels(rank, phase='decode')}}}"] = 1.0
        w[f"moeperf_rank_step_seconds_sum{{{_labels(rank, phase='prefill')}}}"] = 1.0
        w[f"moeperf_rank_sync_stall_seconds_count{{{_labels(rank)}}}"] = 100
        w[f"moeperf_rank_sync_stall_seconds_sum{{{_labels(rank)}}}"] = stall_s
        w[f"moeperf_rank_collective_seconds_total{{{_labels(rank)}}}"] = 0.1 + stall_s
        w[f"moeperf_rank_ttft_seconds_count{{{_labels(rank)}}}"] = 4
        w[f"moeperf_rank_ttft_seconds_sum{{{_labels(rank)}}}"] = 0.2 + stall_s
        w[f"moeperf_triton_compiles_total{{{_labels(rank, kernel=KERNEL, during='serving')}}}"] = 3
        w[f"moeperf_triton_compiles_total{{{_labels(rank, kernel=KERNEL, during='startup')}}}"] = 1
        w[f"moeperf_triton_compile_seconds_sum{{{_labels(rank, kernel=KERNEL, during='serving')}}}"] = 2.5
    w['moeperf_step_skew_seconds_count{arm="a",engine="run/a",node="n"}'] = 100
    w['moeperf_step_skew_seconds_sum{arm="a",engine="run/a",node="n"}'] = 0.4
    w['moeperf_steps_gated_total{arm="a",engine="run/a",gating_rank="0",node="n"}'] = 2
    w['moeperf_steps_gated_total{arm="a",engine="run/a",gating_rank="1",node="n"}'] = 0
    w['moeperf_steps_gated_seconds_total{arm="a",engine="run/a",gating_rank="0",node="n"}'] = 0.25
    w['vllm:prompt_tokens_total{engine="0"}'] = 1000
    return w


def test_parse_series_round_trips_a_prometheus_key() -> None:
    assert parse_series_key('m_total{a="x",b="y z"}') == ("m_total", {"a": "x", "b": "y z"})
    assert parse_series_key("plain") == ("plain", {})
    assert series_key("m_total", {"b": "y z", "a": "x"}) == 'm_total{a="x",b="y z"}'  # what the driver writes


def test_tp2_ranks_show_their_own_stall_and_the_engine_skew() -> None:
    arm = _arm(tp2_window())
    r0, r1 = rank_rows(arm)
    assert (r0.rank, r1.rank, r0.steps, r1.steps) == ("0", "1", 100, 100)
    assert r0.step_mean_ms == 20.0
    assert round(r1.sync_stall_mean_ms or 0, 6) == 5.0 and round(r0.sync_stall_mean_ms or 0, 6) == 0.02
    assert step_skew_mean_ms(arm) == 4.0
    rows = rank_table([arm])
    # rank 1 waited 0.5 s in all: rank 0, which gated the slow steps, is the one to look at
    # per-rank TTFT (rank 1 waited longer) and compiles per rank (3 while serving + 1 at start-up, each)
    assert rows[0][5:] == ["50.50", "4", "0.02", "0.002", "0.102", "4.00", "2", "0.250"]
    assert rows[1][5:] == ["175.00", "4", "5.00", "0.500", "0.600", "", "0", "0.000"]


def test_compiles_are_the_windows_growth_as_the_result_counts_them_and_kernels_are_named_short() -> None:
    """Startup-labelled compiles inside the window (the first served step's) are counted like the rest."""
    from cluster.engine.counters import compiles_in_window

    assert compile_table([_arm(tp2_window())]) == [["a", "fused_moe_kernel", "8", "5.0"]]
    assert compiles_in_window(tp2_window()) == 8


def test_tp1_has_no_stall_or_skew_and_an_arm_without_compiles_says_zero() -> None:
    w = {k: v for k, v in tp2_window().items() if 'rank="1"' not in k and "compile" not in k}
    arm = _arm(w, "marlin")
    (row,) = rank_table([arm])
    assert row[5:7] == ["50.50", "0"]  # its own TTFT; no compile in the window
    assert row[7:9] == ["-", "-"] and row[10] == "-" and row[11:] == ["-", "-"]
    assert compile_table([arm]) == [["marlin", "-", "0", "0.0"]]
    assert rank_table([_arm({})]) == [] and compile_table([_arm({})]) == []


def test_reports_show_the_engine_tables_of_a_saved_run(tmp_path) -> None:
    from analysis.report import load_result, write_report
    from analysis.verdicts import AnalysisSettings
    from tests.unit.test_analysis_report import FIXTURE

    saved = load_result(FIXTURE)
    arms = [a.model_copy(update={"window_metrics": tp2_window()}) for a in saved.arms]
    write_report(saved.model_copy(update={"arms": arms}), tmp_path, settings=AnalysisSettings(bootstrap_resamples=50))
    html, md = (tmp_path / "report.html").read_text(), (tmp_path / "report.md").read_text()
    assert "Not measured in this run" not in html
    assert '<table class="ranks">' in html and '<table class="compiles">' in html
    assert "## Engines during the measured window" in md
    assert f"| {arms[0].name} | fused_moe_kernel | 8 | 5.0 |" in md
