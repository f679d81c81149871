"""The resampling machinery: exact percentiles, determinism, rounds, ITL kept with its request."""

import numpy as np
import pytest

from analysis import stats
from analysis.samples import from_arrays
from analysis.verdicts import AnalysisSettings, compare_samples


def _arm(name, n=120, seed=0, scale=1.0, rounds=None):
    rng = np.random.default_rng(seed)
    return from_arrays(
        name,
        rng.lognormal(np.log(0.05), 0.25, n) * scale,
        rng.lognormal(np.log(0.01), 0.25, n) * scale,
        rng.integers(8, 33, n),
        np.arange(n) * 0.1,
        rounds=rounds,
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


def test_point_values_match_plain_numpy():
    arm = _arm("a")
    values = dict(zip(stats.METRIC_KEYS, stats.point_values(arm), strict=True))
    assert values["ttft_s_p90"] == pytest.approx(np.percentile(arm.ttft_s, 90))
    assert values["itl_s_p50"] == pytest.approx(np.percentile(arm.itl_flat_s, 50))
    span = arm.end_s.max() - arm.start_s.min()
    assert values["output_tokens_per_s"] == pytest.approx(arm.output_tokens.sum() / span)


def test_itl_of_keeps_each_requests_tokens_together():
    arm = _arm("a", n=5)
    idx = np.array([3, 3, 0])
    expected = np.concatenate([arm.itl_flat_s[arm.itl_offsets[i] : arm.itl_offsets[i + 1]] for i in idx])
    assert np.array_equal(arm.itl_of(idx), expected)


def test_same_seed_same_verdicts_different_seed_different_intervals():
    a, b = _arm("a", seed=1), _arm("b", seed=2)
    s = AnalysisSettings(bootstrap_resamples=100, seed=7)
    first, again = compare_samples(a, b, s), compare_samples(a, b, s)
    assert first == again
    other = compare_samples(a, b, s.model_copy(update={"seed": 8}))
    assert other.metrics[0].ci_requests != first.metrics[0].ci_requests
    assert other.metrics[0].ratio == first.metrics[0].ratio


def test_rounds_error_needs_two_shared_rounds():
    rng = np.random.default_rng(0)
    single = stats.paired_bootstrap(_arm("a", n=40), _arm("b", n=40, seed=3), 20, rng)
    assert single is not None and np.all(np.isnan(single.se_rounds()))
    rounds = np.arange(40) % 4
    boot = stats.paired_bootstrap(_arm("a", 40, rounds=rounds), _arm("b", 40, 3, rounds=rounds), 20, rng)
    assert boot is not None and boot.round_log_ratios.shape == (4, len(stats.METRICS))
    assert np.isfinite(boot.se_rounds()[0])


def test_round_drift_not_shared_by_the_arms_widens_the_rounds_interval():
    rng = np.random.default_rng(1)
    rounds = np.arange(400) % 4
    a = _arm("a", 400, seed=1, rounds=rounds)
    calm = _arm("b", 400, seed=2, rounds=rounds)
    drift = np.array([1.0, 1.3, 0.8, 1.25])[rounds]
    drifting = from_arrays("b", calm.ttft_s * drift, calm.tpot_s, calm.output_tokens, calm.start_s, rounds=rounds)
    se_calm = stats.paired_bootstrap(a, calm, 60, rng).se_rounds()[0]
    se_drift = stats.paired_bootstrap(a, drifting, 60, rng).se_rounds()[0]
    assert se_drift > 1.5 * se_calm


def test_rounds_interval_reported_only_with_rounds():
    s = AnalysisSettings(bootstrap_resamples=60)
    single = compare_samples(_arm("a"), _arm("b", seed=1), s)
    assert all(m.ci_rounds is None for m in single.metrics) and single.shared_rounds == 1
    r = np.arange(120) % 3
    multi = compare_samples(_arm("a", rounds=r), _arm("b", seed=1, rounds=r), s)
    assert multi.shared_rounds == 3
    assert multi.metrics[0].ci_rounds is not None


def test_mann_whitney_is_none_for_tiny_samples_and_rates():
    assert stats.mann_whitney_p(np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0])) is None
    assert stats.per_request_series(_arm("a"), "output_tokens_per_s") is None
    p = stats.mann_whitney_p(np.arange(50.0), np.arange(50.0) + 100)
    assert p is not None and p < 1e-6
