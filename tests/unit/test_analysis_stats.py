"""The resampling machinery: exact percentiles, one bootstrap, determinism, engine pairs, rates by blocks."""

import numpy as np
import pytest

from analysis import design, stats
from analysis.samples import from_arrays
from analysis.synthetic import SyntheticArm, synthetic_run
from analysis.verdicts import AnalysisSettings, analyse_run, compare_samples


def _arm(name, n=120, seed=0, scale=1.0, rounds=None):
    """Random requests; with ``rounds``, slot = position inside its round (the same request in every arm)."""
    rng = np.random.default_rng(seed)
    slots = None
    if rounds is not None:
        rounds = np.asarray(rounds)
        slots = np.array([np.sum(rounds[:i] == r) for i, r in enumerate(rounds)])
    return from_arrays(
        name,
        rng.lognormal(np.log(0.05), 0.25, n) * scale,
        rng.lognormal(np.log(0.01), 0.25, n) * scale,
        rng.integers(8, 33, n),
        np.arange(n) * 0.1,
        rounds=rounds,
        slots=slots,
    )


def test_weighted_percentiles_equal_numpy_on_the_expanded_sample():
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = np.sort(rng.normal(size=rng.integers(1, 30)))
        w = rng.integers(0, 4, v.size)
        if w.sum() == 0:
            continue
        got = stats.weighted_percentiles(v, w, (0, 50, 90, 99, 100))
        assert np.allclose(got, np.percentile(np.repeat(v, w), (0, 50, 90, 99, 100)))
    rows = rng.integers(0, 3, (40, 25))
    v = np.sort(rng.random(25))
    batch = stats.weighted_percentiles_batch(v, rows, (50, 90))
    for r in range(40):
        expected = np.percentile(np.repeat(v, rows[r]), (50, 90)) if rows[r].sum() else [np.nan, np.nan]
        assert np.allclose(batch[r], expected, equal_nan=True)


def test_point_values_match_plain_numpy_and_merged_itl_is_exact():
    arm = _arm("a")
    values = dict(zip(stats.METRIC_KEYS, stats.point_values(arm), strict=True))
    assert values["ttft_s_p90"] == pytest.approx(np.percentile(arm.ttft_s, 90))
    # Each request's tokens come at one pace, so its ITLs are merged into one weighted entry: still exact.
    assert arm.family("itl_s")[0].size == arm.n
    for q in (50, 90, 99):
        assert values[f"itl_s_p{q}"] == pytest.approx(np.percentile(arm.itl_flat_s, q))
    span = arm.end_s.max() - arm.start_s.min()
    assert values["output_tokens_per_s"] == pytest.approx(arm.output_tokens.sum() / span)


def test_rates_take_each_rounds_own_span():
    rounds = np.repeat([0, 1], 60)
    arm = _arm("a", rounds=rounds)
    arm = from_arrays("a", arm.ttft_s, arm.tpot_s, arm.output_tokens, np.tile(np.arange(60) * 0.1, 2),
                      rounds=rounds, slots=np.tile(np.arange(60), 2))  # fmt: skip
    spans = [arm.end_s[rounds == r].max() - arm.start_s[rounds == r].min() for r in (0, 1)]
    tok = stats.point_values(arm)[stats.METRIC_KEYS.index("output_tokens_per_s")]
    assert tok == pytest.approx(arm.output_tokens.sum() / sum(spans))  # not / one span: not doubled


def test_one_bootstrap_serves_one_arm_and_pairs_of_arms():
    rng = np.random.default_rng(0)
    a = _arm("a", n=50)
    (single,) = stats.slot_bootstrap([a], [0], 30, rng)
    assert single.shape == (30, 50) and np.all(single.sum(axis=1) == 50)
    ca, cb = stats.slot_bootstrap([a, _arm("b", n=50, seed=1)], [0], 30, rng)
    assert np.array_equal(ca, cb)  # the same slots drawn for both arms: the request mix cancels in B/A


def test_the_gate_and_the_verdicts_draw_from_the_same_bootstrap(monkeypatch):
    from analysis.nightly import NightlyPolicy, judge_night

    calls = []
    original = stats.unit_layouts  # every bootstrap lays its arms' requests into units first

    def spy(arms, *args, **kwargs):
        calls.append(len(arms))
        return original(arms, *args, **kwargs)

    monkeypatch.setattr(stats, "unit_layouts", spy)
    nights = [synthetic_run(f"n{d}", f"2026-11-0{d}T02:00:00+00:00", [SyntheticArm("baseline"), SyntheticArm("b")],
                            60, seed=d) for d in range(1, 5)]  # fmt: skip
    judge_night(nights[-1], nights[:-1], NightlyPolicy(bootstrap_resamples=50, metrics=["ttft_s_p50"]))
    assert 1 in calls and 2 in calls  # the gate (one arm) and the report's B/A (two) both resampled here


def test_same_seed_same_verdicts_different_seed_different_intervals():
    a, b = _arm("a", seed=1), _arm("b", seed=2)
    s = AnalysisSettings(bootstrap_resamples=100, seed=7)
    first, again = compare_samples(a, b, s), compare_samples(a, b, s)
    assert first == again
    other = compare_samples(a, b, s.model_copy(update={"seed": 8}))
    assert other.metrics[0].ci_within_engine != first.metrics[0].ci_within_engine
    assert other.metrics[0].ratio == first.metrics[0].ratio


def test_engine_pairs_follow_the_placement():
    assert design.engine_pairs("interleaved", [0, 1, 2]) == [(0,), (1,), (2,)]
    assert design.engine_pairs("parallel", [0, 1, 2]) == [(0, 1, 2)]
    rng = np.random.default_rng(0)
    rounds = np.arange(160) % 4
    a, b = _arm("a", 160, rounds=rounds), _arm("b", 160, 3, rounds=rounds)
    est = stats.paired_estimates(a, b, design.engine_pairs("interleaved", [0, 1, 2, 3]), 50, rng)
    assert est.pair_log_ratios.shape == (4, len(stats.METRICS)) and np.allclose(
        est.log_ratio, est.pair_log_ratios.mean(axis=0)
    )
    assert np.all(design.own_term(est).dof[:3] == 3)


def test_engine_drift_between_rounds_widens_the_decision_interval():
    rounds = np.arange(400) % 4
    a = _arm("a", 400, seed=1, rounds=rounds)
    calm = _arm("b", 400, seed=2, rounds=rounds)
    drift = np.array([1.0, 1.3, 0.8, 1.25])[calm.rounds]
    drifting = from_arrays("b", calm.ttft_s * drift, calm.tpot_s, calm.output_tokens, calm.start_s,
                           rounds=calm.rounds, slots=calm.slots)  # fmt: skip
    s = AnalysisSettings(bootstrap_resamples=60)
    width = {}
    for name, b in (("calm", calm), ("drift", drifting)):
        ci = compare_samples(a, b, s).metric("ttft_s_p50").ci
        width[name] = np.log(ci[1] / ci[0])
    assert width["drift"] > 1.5 * width["calm"]


def test_rates_have_within_engine_intervals_from_time_blocks():
    run = synthetic_run("r", "2026-11-01T00:00:00+00:00", [SyntheticArm("baseline"), SyntheticArm("b")], 200, seed=1)
    (c,) = analyse_run(run, AnalysisSettings(bootstrap_resamples=60)).comparisons
    tok = c.metric("output_tokens_per_s")
    assert tok.ci_within_engine is not None and tok.ci_within_engine[0] < tok.ratio < tok.ci_within_engine[1]
    assert tok.verdict == "no verdict (design)"  # one engine each: still no verdict


def test_mann_whitney_is_none_for_tiny_samples_and_rates():
    assert stats.mann_whitney_p(np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0])) is None
    assert stats.per_request_series(_arm("a"), "output_tokens_per_s") is None
    p = stats.mann_whitney_p(np.arange(50.0), np.arange(50.0) + 100)
    assert p is not None and p < 1e-6
