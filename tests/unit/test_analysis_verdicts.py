"""The verdicts on ground truth: engine-instance offsets are noise, planted effects are found, design gaps said."""

import math

import pytest

from analysis import stats
from analysis.calibration import Design, Effect, NoiseModel, false_flag_rate
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import DECIDED, AnalysisSettings, analyse_run

T0 = "2026-11-01T02:00:00+00:00"
QUICK = AnalysisSettings(bootstrap_resamples=100)
# As on an H200: requests differ a lot from each other (the same in every arm), little inside one engine.
H200_LIKE = {"request_sigma": 0.5, "sigma": 0.002}


def _ab(analysis, b=None):
    return next(c for c in analysis.comparisons if c.kind == "ab" and (b is None or c.b_arm == b))


def _old_decision_flags(m, alpha=0.05):
    """The rule before engine noise: the within-engine interval alone, beyond min_effect (1%)."""
    lo, hi = m.ci_within_engine
    return (lo > 1 or hi < 1) and abs(m.ratio - 1) >= 0.01


def test_two_engines_1_5_percent_apart_flagged_by_the_old_rule_get_no_verdict():
    # One round, two arms with identical settings whose engines differ by 1.5%: today's design.
    arms = [SyntheticArm("baseline"), SyntheticArm("copy", ttft_scale=1.015, tpot_scale=1.015)]
    run = synthetic_run("r", T0, arms, 400, seed=3, **H200_LIKE)
    c = _ab(analyse_run(run, QUICK))
    ttft = c.metric("ttft_s_p90")
    assert _old_decision_flags(ttft) and _old_decision_flags(c.metric("tpot_s_p50"))
    assert not any(m.verdict in DECIDED for m in c.metrics)
    assert ttft.verdict == "no verdict (design)" and ttft.ci is None and ttft.dof == 0
    assert "`rounds: 2`" in c.design_advice and "`control_of: baseline`" in c.design_advice


def test_an_aa_control_that_happens_to_agree_does_not_turn_an_engine_offset_into_a_verdict():
    # The control's engine matches the baseline's, the candidate's is 1.5% off. One A/A pair is one
    # degree of freedom: plugging its near-zero discrepancy in as a known variance (the old rule)
    # would flag the candidate; Student's t on 1 dof must not.
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", control_of="baseline"),
        SyntheticArm("candidate", ttft_scale=1.015, tpot_scale=1.015),
    ]
    analysis = analyse_run(synthetic_run("r", T0, arms, 400, seed=4, **H200_LIKE), QUICK)
    aa, c = analysis.noise_floor[0], _ab(analysis)
    tpot = c.metric("tpot_s_p50")
    assert aa.metric("tpot_s_p50").aa_noise_rel < 0.005
    z = stats.z_two_sided(0.05 / len(stats.METRICS))
    old_se = math.log(tpot.ci_within_engine[1] / tpot.ci_within_engine[0]) / (2 * z)
    assert abs(math.log(tpot.ratio)) > z * old_se  # the old plug-in interval excludes 1
    assert tpot.dof == 1 and tpot.verdict == "no detectable difference"
    assert not any(m.verdict in DECIDED for m in c.metrics)


def test_the_aa_comparison_is_the_noise_floor_never_a_verdict():
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", tpot_scale=1.06, control_of="baseline"),
        SyntheticArm("candidate", tpot_scale=1.05),
    ]
    analysis = analyse_run(synthetic_run("r", T0, arms, 800, seed=21, **H200_LIKE), QUICK)
    (aa,) = analysis.noise_floor
    assert (aa.a_arm, aa.b_arm) == ("baseline", "baseline-aa")
    assert {m.verdict for m in aa.metrics} <= {"noise floor", "not measured"}
    floor = aa.metric("tpot_s_p50")
    assert floor.aa_noise_rel == pytest.approx(0.06, abs=0.01) and floor.mde_rel > 0.06
    ab = _ab(analysis)
    assert ab.controls == ["baseline-aa"]
    tpot = ab.metric("tpot_s_p50")
    # A 5% effect is no evidence when two copies of the baseline already differ by 6%.
    assert tpot.verdict == "no detectable difference" and tpot.mde_rel > 0.05


@pytest.mark.parametrize("tpot_scale, expected", [(1.10, "regressed"), (0.90, "improved")])
def test_a_planted_tpot_change_is_found_by_rounds_with_an_aa_control(tpot_scale, expected):
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", control_of="baseline"),
        SyntheticArm("candidate", tpot_scale=tpot_scale),
    ]
    run = synthetic_run("r", T0, arms, 300, seed=12, rounds=6, engine_sd=0.013, engine_rate_sd=0.01, **H200_LIKE)
    c = _ab(analyse_run(run, QUICK))
    assert c.engine_pairs == 6 and c.metric("tpot_s_p50").dof == 5 + 6
    assert c.metric("tpot_s_p50").verdict == expected
    assert c.metric("itl_s_p50").verdict == expected
    other = "improved" if expected == "regressed" else "regressed"
    assert not c.with_verdict(other)


def test_parallel_rounds_reuse_their_engines_so_they_give_no_engine_noise():
    arms = [SyntheticArm("baseline"), SyntheticArm("b")]
    parallel = _ab(analyse_run(synthetic_run("r", T0, arms, 60, seed=4, rounds=4, placement="parallel"), QUICK))
    assert parallel.engine_pairs == 1 and parallel.shared_rounds == 4
    assert {m.verdict for m in parallel.metrics} <= {"no verdict (design)", "not measured"}
    assert "control_of: baseline" in parallel.design_advice and "parallel" in parallel.design_advice
    interleaved = _ab(analyse_run(synthetic_run("r", T0, arms, 60, seed=4, rounds=4), QUICK))
    assert interleaved.engine_pairs == 4 and interleaved.design_advice is None
    assert interleaved.metric("tpot_s_p50").dof == 3 and interleaved.metric("tpot_s_p50").ci is not None


def test_control_arm_is_not_compared_as_a_candidate_and_failed_arms_are_skipped():
    arms = [SyntheticArm("baseline"), SyntheticArm("copy", control_of="baseline"), SyntheticArm("broken")]
    run = synthetic_run("r", T0, arms, 60, seed=2, status="failed")
    analysis = analyse_run(run, QUICK)
    assert [(c.kind, c.b_arm) for c in analysis.comparisons] == [("aa", "copy")]
    assert "broken" in analysis.skipped_arms and not analysis.regressed


def test_seeded_aa_runs_of_todays_design_never_flag_and_four_rounds_rarely_do():
    settings = AnalysisSettings(bootstrap_resamples=50)
    noise = NoiseModel(requests=200, within_sigma=0.0015)
    today = false_flag_rate(Design("1r"), noise, 10, settings)
    assert today.tally.hits == 0 and set(today.verdicts) == {"no verdict (design)", "not measured"}
    assert today.legacy.hits >= 8  # the old rule called most of these A/A runs a difference
    rounds = false_flag_rate(Design("4r", rounds=4), noise, 20, settings)
    assert rounds.tally.hits <= 1  # family-wise 5%: the committed benchmark has the 1000-run numbers


def test_noise_model_effect_reaches_the_rates():
    # A planted throughput change shows in both rates and nowhere in the latencies.
    from analysis.calibration import simulate

    design = Design("6r+aa", rounds=6, control=True)
    c, aa = simulate(design, NoiseModel(requests=200), Effect(rate_scale=1.05), 1, QUICK)
    assert aa is not None and aa.b_arm == "baseline-aa"
    assert c.metric("output_tokens_per_s").ratio == pytest.approx(1.05, abs=0.015)
    assert c.metric("output_tokens_per_s").verdict == "improved"
    assert abs(c.metric("tpot_s_p50").ratio - 1) < 0.03


def test_pairs_for_an_effect_scale_with_the_noise_and_give_back_the_design_they_came_from():
    from analysis.verdicts import pairs_for_effect

    alpha, power = 0.05 / len(stats.METRICS), 0.8
    z = stats.z_two_sided(alpha) + stats.z_one_sided(power)
    # One engine's offset spread 2.3% (hold 5, c=64): a pair's log ratio spreads sqrt(2) x that.
    tau2 = 2 * 0.023**2
    k = pairs_for_effect(0.02, tau2, 0.0, 1, alpha, power)
    assert k == math.ceil(tau2 * (z / math.log1p(0.02)) ** 2)
    # The design that many pairs make detects exactly that effect (normal quantiles): the projection inverts the MDE.
    assert math.expm1(z * math.sqrt(tau2 / k)) <= 0.02 < math.expm1(z * math.sqrt(tau2 / (k - 1)))
    assert pairs_for_effect(0.04, tau2, 0.0, 1, alpha, power) == pytest.approx(k / 4, rel=0.05)  # twice the effect
    # Within-engine error counts per pair: a mean over 4 pairs with se 1% is a pair spreading 2%.
    assert pairs_for_effect(0.02, 0.0, 0.01, 4, alpha, power) == pairs_for_effect(0.02, 0.02**2, 0.0, 1, alpha, power)
    assert pairs_for_effect(0.02, 0.0, 0.0, 1, alpha, power) == 2  # no noise: still two, to see an engine term
    assert pairs_for_effect(0.0, tau2, 0.0, 1, alpha, power) is None
    assert pairs_for_effect(0.02, math.nan, 0.0, 1, alpha, power) is None


def test_a_verdict_names_the_pairs_for_the_minimum_effect_only_where_the_engine_term_is_estimable():
    arms = [SyntheticArm("baseline"), SyntheticArm("candidate", tpot_scale=1.01)]
    one = _ab(analyse_run(synthetic_run("r", T0, arms, 200, seed=5, **H200_LIKE), QUICK)).metric("tpot_s_p50")
    assert one.dof == 0 and one.pairs_for_min_effect is None
    run = synthetic_run("r", T0, arms, 200, seed=5, rounds=3, engine_sd=0.013, **H200_LIKE)
    tpot = _ab(analyse_run(run, QUICK)).metric("tpot_s_p50")
    stricter = _ab(analyse_run(run, QUICK.model_copy(update={"min_effect": 0.005}))).metric("tpot_s_p50")
    assert tpot.dof == 2 and tpot.pairs_for_min_effect is not None and tpot.pairs_for_min_effect >= 2
    assert stricter.pairs_for_min_effect == pytest.approx(4 * tpot.pairs_for_min_effect, rel=0.02)
