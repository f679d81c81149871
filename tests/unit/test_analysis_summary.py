"""The one-line-per-comparison summary `moeperf run` prints at its end."""

from analysis.summary import SUMMARY_METRICS, summary_lines
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run

T0 = "2026-11-01T00:00:00+00:00"
QUICK = AnalysisSettings(bootstrap_resamples=50)


def test_one_line_per_comparison_then_the_noise_floor():
    arms = [
        SyntheticArm("baseline"),
        SyntheticArm("baseline-aa", control_of="baseline"),
        SyntheticArm("slow", tpot_scale=1.1),
        SyntheticArm("same"),
    ]
    run = synthetic_run("s", T0, arms, 200, seed=5, rounds=4, request_sigma=0.5, sigma=0.01)
    analysis = analyse_run(run, QUICK)
    lines = summary_lines(run, analysis)
    assert len(lines) == 3
    slow, same, floor = lines
    assert slow.startswith("slow vs baseline:") and same.startswith("same vs baseline:")
    for line in (slow, same):
        assert all(label in line for _, label in SUMMARY_METRICS)
    assert "TPOT p50 1.1" in slow and "REGRESSED" in slow and "REGRESSED" not in same
    ratio = analysis.comparisons[1].metric("ttft_s_p50").ratio
    assert f"TTFT p50 {ratio:.3f}" in slow  # the numbers are the analysis's
    assert floor.startswith("A/A noise floor baseline-aa vs baseline") and "min detectable effect" in floor


def test_a_design_without_engine_noise_says_what_to_add():
    run = synthetic_run("s", T0, [SyntheticArm("baseline"), SyntheticArm("b")], 60, seed=5)
    (line,) = summary_lines(run, settings=QUICK)
    assert "no verdict" in line and "`rounds: 2`" in line and "control_of: baseline" in line
