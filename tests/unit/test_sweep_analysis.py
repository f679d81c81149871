"""The sweep analysis on ground truth: planted throughput found on the frontier, A/A is the noise floor,
capacity interpolated between the right levels, design gaps said, runs without a sweep untouched."""

import math

import numpy as np
import pytest

from analysis.frontier import capacity_crossing, matched_logs, pareto_frontier
from analysis.sweep import analyse_sweep
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.synthetic_sweep import SweepArmTruth, SweepLevelTruth, synthetic_sweep_run
from analysis.verdicts import DECIDED, AnalysisSettings
from workloads.metrics import summarize

QUICK = AnalysisSettings(bootstrap_resamples=200)
# c=4 misses the TTFT limit in 5% of its measured requests (attainment 0.95, meets 0.9), c=8 in half of them.
LEVELS = (
    SweepLevelTruth(1, 2.0, 0.010),
    SweepLevelTruth(2, 4.0, 0.014),
    SweepLevelTruth(4, 8.0, 0.020, ttft_miss_share=0.05),
    SweepLevelTruth(8, 16.0, 0.028, ttft_miss_share=0.5),
)
ARMS = [SweepArmTruth("base"), SweepArmTruth("base-aa", control_of="base"), SweepArmTruth("fast", rate_scale=1.05)]


@pytest.fixture(scope="module")
def planted():
    run = synthetic_sweep_run("planted", ARMS, LEVELS, rounds=3, seed=0, tensor_parallel_size=2)
    return run, analyse_sweep(run, QUICK)


# --- the geometry, on exact numbers ----------------------------------------------------------------------


def test_pareto_frontier_drops_dominated_levels_and_runs_down_in_throughput():
    # (interactivity, throughput): (2.5, 4) is beaten by (3, 5) on both; NaN is never on it.
    xs, ys = [1.0, 2.0, 3.0, 2.5, float("nan")], [10.0, 8.0, 5.0, 4.0, 99.0]
    assert pareto_frontier(xs, ys) == [0, 1, 2]
    assert len(pareto_frontier([1.0, 1.0], [3.0, 3.0])) == 1  # a tie is kept once


def test_matched_ratio_of_a_frontier_scaled_by_1_05_is_exactly_1_05_over_the_shared_range():
    ax, ay = np.array([10.0, 20.0, 40.0]), np.array([400.0, 300.0, 100.0])
    bx, by = np.array([15.0, 30.0, 60.0]), ay * 1.05  # B's reach in interactivity differs
    la, lb, lr = matched_logs(ax, ay, bx * 0 + ax, by)
    assert lr == pytest.approx(math.log(1.05), abs=1e-12)
    _, _, shifted = matched_logs(ax, ay, bx, by)  # only [15, 40] is shared, where B is above 1.05 A
    assert math.isfinite(shifted) and shifted > math.log(1.05)
    assert math.isnan(matched_logs(ax, ay, ax + 100, ay)[2])  # no shared interactivity


def test_capacity_interpolates_between_the_last_level_meeting_the_slo_and_the_first_missing_it():
    c = capacity_crossing([1, 2, 4, 8], [1.0, 1.0, 0.95, 0.5], 0.9)
    assert c.censored == "none" and (c.lower, c.upper) == (2, 3)
    assert c.load == pytest.approx(4 + (0.95 - 0.9) / (0.95 - 0.5) * 4, abs=1e-12)  # 4.444...
    # A level above the first miss that meets it again does not move the capacity past the miss.
    again = capacity_crossing([1, 2, 4, 8], [1.0, 0.8, 1.0, 1.0], 0.9)
    assert again.load == pytest.approx(1 + 0.1 / 0.2) and again.meets_again
    above = capacity_crossing([1, 2, 4], [1.0, 0.99, 0.95], 0.9)
    assert (above.censored, above.load) == ("above", 4.0)
    below = capacity_crossing([1, 2, 4], [0.5, 0.4, 0.3], 0.9)
    assert below.censored == "below" and math.isnan(below.load)


# --- the analysis ----------------------------------------------------------------------------------------


def test_planted_5_percent_throughput_is_improved_at_matched_interactivity(planted):
    _, sa = planted
    c = sa.comparison("fast", "base")
    s = c.throughput_at_matched_interactivity
    print(f"fast/base at matched interactivity: {s.ratio:.4f} CI {s.ci} (one engine {s.ci_within_engine}), dof {s.dof}")
    assert c.kind == "ab" and s.dof == 5  # own engine pairs (3 rounds: 2) + the A/A control's 3
    assert s.verdict == "improved"
    assert s.ci[0] < 1.05 < s.ci[1] and s.ci[0] > 1.0
    assert s.ratio == pytest.approx(1.05, abs=0.02)
    lo, hi = c.matched_interactivity_tokens_per_s_per_user
    assert 30 < lo < hi < 110  # both frontiers cover 1/TPOT from about 36 to 100 tokens/s per user
    # Every level on its own: ~1.05 in output tokens/s, the same interactivity (no latency change planted).
    for lv in c.levels:
        assert lv.output_tokens_per_s_ratio == pytest.approx(1.05, abs=0.01)
        assert lv.interactivity_ratio == pytest.approx(1.0, abs=0.02)
        assert "TPOT p50" not in lv.regressed and "TPOT p50" not in lv.improved
    assert sum(lv.output_tokens_per_s_verdict == "improved" for lv in c.levels) >= 3


def test_aa_pair_is_the_noise_floor_never_flagged(planted):
    _, sa = planted
    aa = sa.comparison("base-aa", "base")
    assert aa.kind == "aa"
    for s in (aa.throughput_at_matched_interactivity, aa.capacity):
        assert s.verdict == "noise floor" and s.ci is None
        assert s.ratio == pytest.approx(1.0, abs=0.03)
    for lv in aa.levels:
        assert lv.output_tokens_per_s_verdict not in DECIDED and not lv.improved and not lv.regressed


def test_capacity_leaves_out_the_level_that_misses_the_slo_and_interpolates(planted):
    _, sa = planted
    for arm in ("base", "base-aa", "fast"):
        cap = sa.capacity(arm)
        assert cap.censored == "none" and (cap.lower_level, cap.upper_level) == ("c=4", "c=8")
        assert cap.capacity_load == pytest.approx(4 + 0.05 / 0.45 * 4, abs=1e-9)  # attainment 0.95 then 0.5
        assert cap.ci_load[0] <= cap.capacity_load <= cap.ci_load[1] < 8
        assert cap.text == "4.44 concurrency"
        assert [sa.point(arm, i).meets_slo for i in range(4)] == [True, True, True, False]
        assert sa.point(arm, 3).slo_attainment == pytest.approx(0.5)
    # Same latency, same misses: the same capacity, and the verdict says no difference.
    c = sa.comparison("fast", "base").capacity
    assert c.ratio == pytest.approx(1.0, abs=1e-9) and c.verdict == "no detectable difference"


def test_level_points_count_measured_requests_only(planted):
    run, sa = planted
    base = run.arm("base")
    for i in range(4):
        measured = [r for r in base.records if r.level == i and not r.warmup]
        p = sa.point("base", i)
        assert p.requests_measured == len(measured) == 3 * 120
        # The warm-up share was planted 5x slower: any of it in the median would show.
        assert p.interactivity_tokens_per_s_per_user == pytest.approx(1 / np.median([r.tpot_s for r in measured]))
        total = summarize(measured, run.config.slo).output_tokens_per_s
        assert p.output_tokens_per_s.per_s == pytest.approx(total)
        assert p.output_tokens_per_s_per_gpu == pytest.approx(total / 2)  # tensor_parallel_size 2
        lo, hi = p.output_tokens_per_s_per_gpu_ci
        assert lo < p.output_tokens_per_s_per_gpu < hi
        tpot = p.latency("tpot_s_p50")
        assert tpot.value_s == pytest.approx(np.median([r.tpot_s for r in measured]))
        assert tpot.ci_s[0] < tpot.value_s < tpot.ci_s[1]
    # Throughput rises with the load, interactivity falls: every level is on the frontier.
    f = sa.frontier("base")
    assert [p.label for p in f.points] == ["c=8", "c=4", "c=2", "c=1"]
    assert all(p.on_frontier for p in f.points)
    # The per-level verdicts are analyse_run's on that level alone.
    assert all(lv.analysis.settings.steady_state == "none" for lv in sa.levels)
    assert {c.kind for c in sa.levels[0].analysis.comparisons} == {"aa", "ab"}


def test_one_round_without_a_control_gives_no_verdict_by_design():
    run = synthetic_sweep_run("one", [SweepArmTruth("base"), SweepArmTruth("fast", rate_scale=1.05)], LEVELS, rounds=1)
    c = analyse_sweep(run, AnalysisSettings(bootstrap_resamples=100)).comparison("fast")
    s = c.throughput_at_matched_interactivity
    assert s.verdict == "no verdict (design)" and s.ci is None and s.dof == 0
    assert s.ci_within_engine is not None and s.ratio == pytest.approx(1.05, abs=0.03)
    assert c.capacity.verdict == "no verdict (design)"
    assert "`rounds: 2`" in c.design_advice and "`control_of: base`" in c.design_advice
    assert all(lv.output_tokens_per_s_verdict == "no verdict (design)" for lv in c.levels)


def test_a_run_without_a_sweep_has_no_sweep_analysis():
    run = synthetic_run("plain", "2026-11-01T02:00:00+00:00", [SyntheticArm("a"), SyntheticArm("b")], 40)
    assert analyse_sweep(run, QUICK) is None


def test_same_seed_same_numbers():
    run = synthetic_sweep_run("rep", ARMS[:2], LEVELS[:2], requests_per_level=30, warmup_per_level=3, rounds=2)
    settings = AnalysisSettings(bootstrap_resamples=50, seed=7)
    assert analyse_sweep(run, settings) == analyse_sweep(run, settings)
