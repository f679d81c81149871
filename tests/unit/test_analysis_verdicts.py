"""The statistics on ground truth: a planted 5% regression is caught, A/A data is left alone."""

import numpy as np

from analysis.calibration import aa_false_positive_rate
from analysis.samples import arm_samples
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run
from experiment.slo import SloSpec

T0 = "2026-11-01T02:00:00+00:00"
QUICK = AnalysisSettings(bootstrap_resamples=150)


def _verdicts(run, settings=QUICK):
    (comparison,) = [c for c in analyse_run(run, settings).comparisons if c.kind == "ab"]
    return {m.metric: m.verdict for m in comparison.metrics}


def test_planted_five_percent_tpot_regression_is_detected():
    run = synthetic_run("r", T0, [SyntheticArm("baseline"), SyntheticArm("slow", tpot_scale=1.05)], 800, seed=11)
    v = _verdicts(run)
    assert v["tpot_s_p50"] == "regressed"
    assert v["itl_s_p50"] == "regressed"
    assert "improved" not in v.values()


def test_planted_improvement_is_called_improved():
    run = synthetic_run("r", T0, [SyntheticArm("baseline"), SyntheticArm("fast", tpot_scale=0.95)], 800, seed=12)
    v = _verdicts(run)
    assert v["tpot_s_p50"] == "improved"
    assert "regressed" not in v.values()


def test_aa_runs_say_no_detectable_difference_in_at_least_95_percent_of_trials():
    trials, clean = 30, 0
    for seed in range(trials):
        run = synthetic_run("r", T0, [SyntheticArm("baseline"), SyntheticArm("copy")], 150, seed=1000 + seed)
        v = _verdicts(run, QUICK.model_copy(update={"seed": seed}))
        clean += set(v.values()) <= {"no detectable difference", "not measured"}
    assert clean / trials >= 0.95


def test_false_positive_rate_of_recorded_samples_is_at_most_alpha():
    run = synthetic_run("r", T0, [SyntheticArm("baseline")], 300, seed=5)
    arm = arm_samples("baseline", run.arms[0].records, SloSpec())
    rate = aa_false_positive_rate(arm, 20, AnalysisSettings(bootstrap_resamples=100, alpha=0.05))
    assert rate <= 0.05


def test_aa_control_noise_widens_the_interval_and_the_detectable_effect():
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", tpot_scale=1.06, control_of="baseline"),
        SyntheticArm("candidate", tpot_scale=1.05),
    ]
    analysis = analyse_run(synthetic_run("r", T0, arms, 800, seed=21), QUICK)
    aa = next(c for c in analysis.comparisons if c.kind == "aa")
    ab = next(c for c in analysis.comparisons if c.kind == "ab")
    assert (aa.a_arm, aa.b_arm) == ("baseline", "baseline-aa")
    assert ab.b_arm == "candidate" and ab.control_arm == "baseline-aa"
    tpot = next(m for m in ab.metrics if m.metric == "tpot_s_p50")
    # A 5% effect is no evidence when two copies of the baseline already differ by about 6%.
    assert tpot.verdict == "no detectable difference"
    assert tpot.aa_noise_rel is not None and tpot.aa_noise_rel > 0.03
    assert tpot.mde_rel is not None and tpot.mde_rel > 0.05


def test_control_arm_is_not_compared_as_a_candidate_and_failed_arms_are_skipped():
    arms = [SyntheticArm("baseline"), SyntheticArm("copy", control_of="baseline"), SyntheticArm("broken")]
    run = synthetic_run("r", T0, arms, 60, seed=2, status="failed")
    analysis = analyse_run(run, QUICK)
    assert [(c.kind, c.b_arm) for c in analysis.comparisons] == [("aa", "copy")]
    assert "broken" in analysis.skipped_arms and not analysis.regressed


def test_rounds_are_used_when_present():
    run = synthetic_run("r", T0, [SyntheticArm("baseline"), SyntheticArm("b")], 60, seed=4, rounds=4)
    (c,) = analyse_run(run, QUICK).comparisons
    assert c.shared_rounds == 4
    assert all(m.ci_rounds is not None for m in c.metrics if m.ratio is not None)
    assert np.isfinite(c.metrics[0].ci_rounds[0])
