"""Engine step times per round: B/A per round and over engine pairs, and the reports' section of them."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.html_report import render_html
from analysis.markdown import render_markdown
from analysis.step_time_rounds import SECTION_TITLE, compare_rounds, round_steps, step_time_rounds
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, RunResult

QUICK = AnalysisSettings(bootstrap_resamples=100)
GPU_COUNT, GPU_SUM = "moeperf_gpu_step_seconds_count", "moeperf_gpu_step_seconds_sum"
HOST_COUNT, HOST_SUM = "moeperf_rank_step_seconds_count", "moeperf_rank_step_seconds_sum"


def _key(name: str, rank: str, phase: str) -> str:
    return f'{name}{{arm="a",engine="run/a",gpu="{rank}",node="n",phase="{phase}",rank="{rank}"}}'


def _round(gpu_mean_ms: float, host_mean_ms: float, phase: str = "decode", steps: int = 100) -> dict[str, float]:
    """One round's window of a TP=2 engine: each rank ran ``steps`` / 2 steps of ``phase`` at the given means."""
    out = {}
    for rank in ("0", "1"):
        out[_key(GPU_COUNT, rank, phase)] = steps / 2
        out[_key(GPU_SUM, rank, phase)] = steps / 2 * gpu_mean_ms / 1e3
        out[_key(HOST_COUNT, rank, phase)] = steps / 2
        out[_key(HOST_SUM, rank, phase)] = steps / 2 * host_mean_ms / 1e3
    return out


def _arm(name: str, by_round: dict[int, dict[str, float]]) -> ArmResult:
    return ArmResult(name=name, flags=OptimizationFlags(), flags_applied=True, status="ok",
                     requests_planned=1, requests_sent=1, requests_succeeded=1, requests_failed=0, requests_not_sent=0,
                     window_metrics_by_round=by_round, records_file=f"records/{name}.parquet")  # fmt: skip


# --- the analysis -------------------------------------------------------------------------------------------

B_GPU_MS = {0: 11.0, 1: 9.9, 2: 12.0}  # A's decode steps take 10 ms on the GPU in every round


def _pair() -> tuple[ArmResult, ArmResult]:
    a = _arm("a", {r: _round(10.0, 5.0) | _round(30.0, 20.0, phase="mixed") for r in range(3)})
    b = _arm("b", {r: _round(ms, 5.0 if r else 5.5) for r, ms in B_GPU_MS.items()})
    return a, b


def test_each_round_is_an_engine_pair_and_the_pooled_ratio_is_their_geometric_mean_with_a_t_interval():
    a, b = _pair()
    assert round_steps(a)[1]["decode"].gpu_step_mean_ms == pytest.approx(10.0)  # both ranks' steps together
    x = compare_rounds(a, b, "ab", "interleaved")
    decode = x.phase("decode")
    assert decode is not None and [p.phase for p in x.phases] == ["decode", "mixed"]
    assert [r.round for r in decode.rounds] == [0, 1, 2]
    assert [r.gpu_ratio for r in decode.rounds] == pytest.approx([1.1, 0.99, 1.2])
    assert [r.host_ratio for r in decode.rounds] == pytest.approx([1.1, 1.0, 1.0])
    logs = np.log([1.1, 0.99, 1.2])
    half = sps.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    assert decode.gpu.engine_pairs == 3
    assert decode.gpu.ratio == pytest.approx(math.exp(logs.mean()))
    assert decode.gpu.ci == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert decode.gpu.ci[0] < decode.gpu.ratio < decode.gpu.ci[1]
    assert decode.host.ratio == pytest.approx(1.1 ** (1 / 3))
    mixed = x.phase("mixed")  # only A ran mixed steps: rows without a ratio, nothing to pool
    assert mixed is not None and all(r.gpu_ratio is None and r.b.gpu_step_mean_ms is None for r in mixed.rounds)
    assert mixed.gpu.ratio is None and mixed.gpu.ci is None and mixed.gpu.engine_pairs == 0


def test_parallel_engines_are_one_pair_their_rounds_pooled_and_without_an_interval():
    a, b = _pair()
    decode = compare_rounds(a, b, "ab", "parallel").phase("decode")
    assert decode is not None
    assert [r.gpu_ratio for r in decode.rounds] == pytest.approx([1.1, 0.99, 1.2])  # still shown per round
    assert decode.gpu.engine_pairs == 1 and decode.gpu.ci is None
    assert decode.gpu.ratio == pytest.approx(sum(B_GPU_MS.values()) / 3 / 10.0)  # the one engine pair's means


def test_only_rounds_both_arms_have_are_paired():
    a, b = _pair()
    b = b.model_copy(update={"window_metrics_by_round": {1: b.window_metrics_by_round[1]}})
    decode = compare_rounds(a, b, "ab", "interleaved").phase("decode")
    assert decode is not None and [r.round for r in decode.rounds] == [1]
    assert decode.gpu.engine_pairs == 1 and decode.gpu.ci is None and decode.gpu.ratio == pytest.approx(0.99)


# --- the reports --------------------------------------------------------------------------------------------


def _three_arm_run(with_rounds: bool) -> RunResult:
    arms = [SyntheticArm("baseline"), SyntheticArm("baseline-aa", control_of="baseline"), SyntheticArm("b")]
    run = synthetic_run("steps", "2026-12-04T00:00:00+00:00", arms, 60, seed=2, rounds=2, sigma=0.05)
    if not with_rounds:
        return run
    gpu_ms = {"baseline": (10.0, 10.0), "baseline-aa": (10.2, 9.9), "b": (9.0, 9.5)}
    return run.model_copy(
        update={
            "arms": [
                a.model_copy(update={"window_metrics_by_round": {r: _round(gpu_ms[a.name][r], 4.0) for r in (0, 1)}})
                for a in run.arms
            ]
        }
    )


def test_both_reports_show_each_round_and_the_pooled_row_with_the_controls_column():
    run = _three_arm_run(with_rounds=True)
    analysis = analyse_run(run, QUICK)
    comparisons = step_time_rounds(run, analysis)
    assert [(c.b_arm, c.a_arm, c.kind) for c in comparisons] == [("b", "baseline", "ab"),
                                                                 ("baseline-aa", "baseline", "aa")]  # fmt: skip
    md = render_markdown(run, analysis)
    assert f"## {SECTION_TITLE}" in md
    header = next(line for line in md.splitlines() if line.startswith("| B vs A | phase | round |"))
    assert header.endswith("| A'/A GPU | A'/A host |")
    rows = [line for line in md.splitlines() if line.startswith("| b vs baseline | decode |")]
    assert len(rows) == 3  # rounds 0 and 1, then the pooled one
    assert rows[0].startswith("| b vs baseline | decode | 0 | 10.000 | 9.000 | 0.900 |")
    assert rows[0].endswith("| 1.020 | 1.000 |")  # the control's A'/A in the same round
    assert rows[1].endswith("| 0.990 | 1.000 |")
    pooled = math.sqrt(0.9 * 0.95)
    assert rows[2].startswith(f"| b vs baseline | decode | geo. mean, 2 engine pair(s) |  |  | {pooled:.3f} [")
    assert any(line.startswith("| baseline-aa vs baseline (A/A) | decode | 0 |") for line in md.splitlines())
    html = render_html(run, analysis)
    assert f"<h2>{SECTION_TITLE}</h2>" in html and '<table class="step-rounds">' in html
    assert "<td>b vs baseline</td><td>decode</td><td>0</td><td>10.000</td><td>9.000</td><td>0.900</td>" in html


def test_results_without_per_round_step_times_have_no_section():
    run = _three_arm_run(with_rounds=False)
    analysis = analyse_run(run, QUICK)
    assert step_time_rounds(run, analysis) == []
    assert SECTION_TITLE not in render_markdown(run, analysis)
    assert SECTION_TITLE not in render_html(run, analysis)
