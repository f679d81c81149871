"""The nightly gate on sweep nights with a known truth: every (arm, level) against the same level of earlier
nights, capacity per arm, nights of another sweep left out, the level named in the reason and the report."""

import pytest

from analysis.html_report import _nightly
from analysis.markdown import nightly_markdown
from analysis.nightly import NightlyPolicy, gated_view, judge_night
from analysis.synthetic_sweep import SweepArmTruth, SweepLevelTruth, synthetic_sweep_run

POLICY = NightlyPolicy(
    bootstrap_resamples=60,
    baseline_nights=5,
    min_history_nights=3,
    consecutive_nights=2,
    metrics=["tpot_s_p50", "ttft_s_p50", "output_tokens_per_s"],
)
# Planted SLO misses (TTFT beyond its limit) give every level an exact attainment: 1, 0.98, 0.92, 0.70; with
# the 0.9 threshold the capacity is 4 + 4 * (0.92 - 0.9) / (0.92 - 0.70) = 4.31 concurrency.
LEVELS = (
    SweepLevelTruth(1, 2.0, 0.010),
    SweepLevelTruth(2, 4.0, 0.014, ttft_miss_share=0.02),
    SweepLevelTruth(4, 8.0, 0.020, ttft_miss_share=0.08),
    SweepLevelTruth(8, 16.0, 0.028, ttft_miss_share=0.3),
)
# c=4 misses 18%: capacity 2 + 2 * (0.98 - 0.9) / (0.98 - 0.82) = 3.0 concurrency, 30% below 4.31.
LOW_CAPACITY = (LEVELS[0], LEVELS[1], SweepLevelTruth(4, 8.0, 0.020, ttft_miss_share=0.18), LEVELS[3])


def _slower_tpot(run, arm: str, level: int, factor: float):
    """``arm``'s requests at ``level`` with every inter-token gap ``factor`` times longer."""

    def fix(r):
        if r.arm != arm or r.level != level:
            return r
        t0 = r.token_times_s[0]
        times = [t0 + (t - t0) * factor for t in r.token_times_s]
        return r.model_copy(update={"token_times_s": times, "end_s": times[-1]})

    arms = [a.model_copy(update={"records": [fix(r) for r in a.records]}) for a in run.arms]
    return run.model_copy(update={"arms": arms})


def night(day: int, levels=LEVELS, slow_level: int | None = None):
    run = synthetic_sweep_run(f"sweep-{day:02d}", [SweepArmTruth("A"), SweepArmTruth("B")], levels, seed=day,
                              rounds=1, started_at=f"2026-11-{day:02d}T02:00:00+00:00")  # fmt: skip
    return _slower_tpot(run, "B", slow_level, 1.2) if slow_level is not None else run


@pytest.fixture(scope="module")
def history():
    return [night(d) for d in range(1, 5)]


def _by(verdict):
    return {(c.arm, c.level, c.metric): c for c in verdict.checks}


def test_the_gated_view_is_one_arm_per_arm_and_level_with_measured_records_only():
    view, names = gated_view(night(1))
    assert list(names) == [f"{a} @ c={c}" for a in ("A", "B") for c in (1, 2, 4, 8)]
    assert names["B @ c=4"] == ("B", "c=4")
    arm = view.arm("B @ c=4")
    assert len(arm.columns) == 120 and arm.columns.levels() == [2]
    assert not arm.columns.warmup.any()


def test_noise_only_sweep_nights_pass(history):
    v = judge_night(night(5), history, POLICY)
    assert (v.status, v.exit_code, v.reason) == ("ok", 0, "no regression")
    assert v.history_runs == [f"sweep-{d:02d}" for d in range(1, 5)]
    checks = _by(v)
    # 2 arms x 4 levels x 3 metrics, plus capacity per arm; none flagged.
    assert len(checks) == 2 * 4 * 3 + 2 and not any(c.flagged for c in v.checks)
    assert checks[("B", "c=4", "tpot_s_p50")].ratio == pytest.approx(1.0, abs=0.1)
    cap = checks[("A", None, "capacity")]
    assert (cap.tonight, cap.baseline, cap.ratio) == (pytest.approx(4.3077, abs=1e-3), pytest.approx(4.3077, abs=1e-3),
                                                      pytest.approx(1.0))  # fmt: skip
    assert cap.unit == "concurrency" and cap.baseline_nights == 4 and cap.ci is not None
    assert any("26 checks" in n for n in v.notes)


def test_one_slower_level_on_two_nights_is_a_regression_of_that_arm_and_level(history):
    v = judge_night(night(6, slow_level=2), [*history, night(5, slow_level=2)], POLICY)
    assert (v.status, v.exit_code) == ("regression", 1)
    assert {(c.arm, c.level, c.metric) for c in v.regressions} == {("B", "c=4", "tpot_s_p50")}
    (bad,) = v.regressions
    assert bad.ratio == pytest.approx(1.2, abs=0.05) and bad.consecutive_flagged == 2
    assert bad.ci is not None and bad.ci[0] > 1
    flagged = {(c.arm, c.level) for c in v.checks if c.flagged}
    assert flagged == {("B", "c=4")}  # the other levels of B, and A, are not flagged
    assert "B @ c=4 TPOT p50 x1.2" in v.reason
    md = "\n".join(nightly_markdown(v))
    assert "| arm | level | metric |" in md and "| B | c=4 | TPOT p50 |" in md
    html = _nightly(v)
    assert "<th>level</th>" in html and '<td class="">c=4</td>' in html


def test_one_slower_night_is_flagged_but_waits(history):
    v = judge_night(night(5, slow_level=2), history, POLICY)
    c = _by(v)[("B", "c=4", "tpot_s_p50")]
    assert c.flagged and not c.regression and v.exit_code == 0
    assert v.reason.startswith("no regression (1 check(s) flagged tonight")


def test_a_capacity_drop_on_two_nights_is_a_regression_on_capacity(history):
    tonight = night(6, levels=LOW_CAPACITY)
    v = judge_night(tonight, [*history, night(5, levels=LOW_CAPACITY)], POLICY)
    assert (v.status, v.exit_code) == ("regression", 1)
    assert {(c.arm, c.level, c.metric) for c in v.regressions} == {("A", None, "capacity"), ("B", None, "capacity")}
    cap = _by(v)[("A", None, "capacity")]
    assert cap.tonight == pytest.approx(3.0, abs=1e-6) and cap.baseline == pytest.approx(4.3077, abs=1e-3)
    assert cap.ratio == pytest.approx(0.696, abs=0.005) and cap.ci is not None and cap.ci[1] < 1
    assert cap.consecutive_flagged == 2 and "A capacity at SLO x0.696" in v.reason
    md = "\n".join(nightly_markdown(v))
    assert "| A | all levels | capacity at SLO |" in md
    assert "- Capacity at SLO of A: 3 concurrency tonight, baseline 4.308 concurrency (5 night(s))" in md


def test_a_censored_capacity_is_reported_and_never_flagged(history):
    # Nothing misses the SLO tonight: the capacity is above the sweep's top level.
    calm = tuple(SweepLevelTruth(t.concurrency, t.rate_rps, t.tpot_median_s) for t in LEVELS)
    v = judge_night(night(6, levels=calm), [*history, night(5, levels=calm)], POLICY)
    cap = _by(v)[("A", None, "capacity")]
    assert (cap.tonight, cap.ratio, cap.flagged) == (8.0, None, False)
    assert cap.note is not None and "at least 8 concurrency" in cap.note
    assert v.exit_code == 0


def test_a_night_of_another_sweep_is_not_in_the_baseline(history):
    other = night(4, levels=LEVELS[:3])  # levels c=1, c=2, c=4 only
    v = judge_night(night(5), [*history[:3], other], POLICY)
    assert v.history_runs == ["sweep-01", "sweep-02", "sweep-03"]
    assert any("1 earlier night(s) ran a different" in n for n in v.notes)
    assert any("different sweep (levels c=1, c=2, c=4 instead of levels c=1, c=2, c=4, c=8)" in n for n in v.notes)
    assert {c.baseline_nights for c in v.checks} == {3}
