"""The nightly gate on synthetic nights with known history: consecutive rule, exit codes, store."""

import json

import pytest

from analysis.gate import gate_night
from analysis.history import add_to_history, load_history
from analysis.nightly import NightlyPolicy, judge_night
from analysis.synthetic import SyntheticArm, synthetic_run

POLICY = NightlyPolicy(
    bootstrap_resamples=60,
    baseline_nights=5,
    min_history_nights=3,
    consecutive_nights=2,
    metrics=["tpot_s_p50", "ttft_s_p50", "output_tokens_per_s"],
)


def night(day: int, tpot_scale: float = 1.0, status: str = "ok", n: int = 300):
    arms = [SyntheticArm("baseline", tpot_scale=tpot_scale), SyntheticArm("all-optimizations", tpot_scale=tpot_scale)]
    return synthetic_run(f"nightly-{day:02d}", f"2026-11-{day:02d}T02:00:00+00:00", arms, n, seed=day, status=status)


@pytest.fixture(scope="module")
def calm_history():
    return [night(d) for d in range(1, 7)]


def _flags(verdict, metric="tpot_s_p50"):
    return {c.arm: c for c in verdict.checks if c.metric == metric}


def test_a_normal_night_passes(calm_history):
    v = judge_night(night(7), calm_history, POLICY)
    assert (v.status, v.exit_code) == ("ok", 0)
    assert len(v.history_runs) == 5 and not any(c.flagged for c in v.checks)


def test_one_bad_night_is_flagged_but_does_not_fail(calm_history):
    v = judge_night(night(7, tpot_scale=1.15), calm_history, POLICY)
    flags = _flags(v)
    assert flags["baseline"].flagged and flags["baseline"].consecutive_flagged == 1
    assert flags["baseline"].ratio == pytest.approx(1.15, rel=0.05)
    assert (v.status, v.exit_code) == ("ok", 0)


def test_two_bad_nights_in_a_row_fail_with_exit_1(calm_history):
    # The first bad night is in the second one's baseline window and widens its spread: a clear effect.
    history = [*calm_history, night(7, tpot_scale=1.2)]
    v = judge_night(night(8, tpot_scale=1.2), history, POLICY)
    assert (v.status, v.exit_code) == ("regression", 1)
    regressed = {(c.arm, c.metric) for c in v.regressions}
    assert regressed == {("baseline", "tpot_s_p50"), ("all-optimizations", "tpot_s_p50")}
    assert "tpot" in v.reason.lower()


def test_bad_nights_separated_by_a_good_one_do_not_fail(calm_history):
    history = [*calm_history, night(7, tpot_scale=1.15), night(8)]
    v = judge_night(night(9, tpot_scale=1.15), history, POLICY)
    assert v.exit_code == 0 and _flags(v)["baseline"].flagged


def test_failed_run_exits_2_and_too_little_history_exits_0(calm_history):
    failed = judge_night(night(7, status="failed"), calm_history, POLICY)
    assert (failed.status, failed.exit_code) == ("run_failed", 2)
    young = judge_night(night(3), calm_history[:2], POLICY)
    assert (young.status, young.exit_code) == ("insufficient_history", 0)


def test_later_nights_in_the_history_are_ignored(calm_history):
    v = judge_night(night(3), [*calm_history], POLICY)
    assert v.history_runs == ["nightly-01", "nightly-02"]


def test_history_store_round_trip_skips_broken_and_failed_files(tmp_path, calm_history):
    for r in calm_history[:3]:
        add_to_history(tmp_path, r)
    add_to_history(tmp_path, night(4, status="failed"))
    (tmp_path / "zz-broken.json").write_text("{not json")
    runs, skipped = load_history(tmp_path, experiment="nightly")
    assert [r.run_id for r in runs] == ["nightly-01", "nightly-02", "nightly-03"]
    assert len(skipped) == 2 and any("broken" in s for s in skipped) and any("failed" in s for s in skipped)
    assert load_history(tmp_path, experiment="other")[0] == []


def test_gate_night_writes_report_and_stores_only_ok_nights(tmp_path, calm_history):
    hist = tmp_path / "history"
    for r in calm_history:
        add_to_history(hist, r)
    out = tmp_path / "out"
    v = gate_night(night(7), hist, out, POLICY)
    assert v.exit_code == 0
    expected = {"report.html", "report.md", "nightly.json", "analysis.json", "result.json"}
    assert {p.name for p in out.iterdir()} >= expected
    assert json.loads((out / "nightly.json").read_text())["exit_code"] == 0
    assert len(load_history(hist)[0]) == 7
    failed = gate_night(night(8, status="failed"), hist, tmp_path / "out2", POLICY)
    assert failed.exit_code == 2 and len(load_history(hist)[0]) == 7
    missing = gate_night(None, hist, tmp_path / "out3", POLICY, failure="ray job failed")
    assert missing.exit_code == 2 and "ray job failed" in (tmp_path / "out3" / "report.md").read_text()


def test_nights_with_a_different_workload_are_not_the_baseline(calm_history):
    changed = [
        r.model_copy(
            update={
                "config": r.config.model_copy(
                    update={"workload": r.config.workload.model_copy(update={"speedup": 9.0})}
                )
            }
        )
        for r in calm_history
    ]
    v = judge_night(night(7, tpot_scale=1.15), changed, POLICY)
    assert (v.status, v.history_runs) == ("insufficient_history", [])
    assert any("different" in n for n in v.notes)


def test_tail_quantiles_of_small_nights_are_not_gated(calm_history):
    small = POLICY.model_copy(update={"metrics": ["tpot_s_p99", "tpot_s_p50"]})
    v = judge_night(night(7, tpot_scale=1.3), calm_history, small)  # 300 requests: 3 beyond p99
    checks = {c.metric: c for c in v.checks if c.arm == "baseline"}
    assert checks["tpot_s_p99"].ci is None and not checks["tpot_s_p99"].flagged
    assert checks["tpot_s_p50"].flagged


def _with_warmup(run, slow_requests=20, extra_s=2.0):
    """Tonight's engines were cold: their first requests waited ``extra_s`` for the first token."""

    def warm(r):
        if r.index >= slow_requests:
            return r
        shifted = [t + extra_s for t in r.token_times_s]
        return r.model_copy(update={"first_token_s": shifted[0], "token_times_s": shifted, "end_s": shifted[-1]})

    arms = [a.model_copy(update={"records": [warm(r) for r in a.records]}) for a in run.arms]
    return run.model_copy(update={"arms": arms})


def test_the_gate_and_the_report_judge_the_same_requests(calm_history):
    from analysis.verdicts import AnalysisSettings, analyse_run

    tonight = _with_warmup(night(7))
    v = judge_night(tonight, calm_history, POLICY)
    report = analyse_run(tonight, AnalysisSettings(bootstrap_resamples=60))
    assert report.warmup_excluded and v.warmup_excluded == report.warmup_excluded
    (comparison,) = report.comparisons
    judged = {comparison.a_arm: comparison.n_a, comparison.b_arm: comparison.n_b}
    cut = report.warmup_excluded[0]
    assert cut >= 20
    for check in v.checks:
        assert check.requests == judged[check.arm] == 300 - cut
    # Judged on steady state, the cold start does not flag TTFT tonight.
    assert not any(c.flagged for c in v.checks if c.metric == "ttft_s_p50")


def test_a_night_whose_experiment_judges_every_request_is_gated_on_every_request_as_its_report_is(calm_history):
    from analysis.verdicts import AnalysisSettings, analyse_run

    tonight = _with_warmup(night(7))
    tonight = tonight.model_copy(update={"config": tonight.config.model_copy(update={"steady_state": "none"})})
    v = judge_night(tonight, calm_history, POLICY)
    report = analyse_run(tonight, AnalysisSettings(bootstrap_resamples=60))
    assert v.warmup_excluded == report.warmup_excluded == {}
    assert all(check.requests == 300 for check in v.checks)
