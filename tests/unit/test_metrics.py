import functools

import numpy as np
import pytest

from workloads import metrics
from workloads.metrics import distribution, summarize
from workloads.records import RequestRecord


def rec(index, send, tokens, *, error=None, intended=None):
    return RequestRecord(
        index=index,
        arm="a",
        intended_send_s=send if intended is None else intended,
        actual_send_s=send,
        first_token_s=tokens[0] if tokens else None,
        token_times_s=tokens,
        end_s=(tokens[-1] if tokens else send),
        prompt_tokens_requested=4,
        output_tokens_requested=len(tokens),
        output_tokens=len(tokens),
        error=error,
    )


def test_percentiles_match_numpy_on_known_data():
    rng = np.random.default_rng(7)
    data = rng.lognormal(size=1001)
    d = distribution(data.tolist())
    for q, v in zip((50, 90, 99), (d.p50, d.p90, d.p99), strict=True):
        assert v == pytest.approx(np.percentile(data, q))
    assert d.mean == pytest.approx(data.mean())
    assert d.count == 1001


def test_empty_distribution_is_null_not_zero():
    d = distribution([])
    assert d.count == 0 and d.p50 is None and d.mean is None


def test_per_request_metrics():
    r = rec(0, 1.0, [1.5, 1.7, 2.0, 2.1], intended=0.9)
    assert r.ttft_s == pytest.approx(0.5)
    assert r.e2e_s == pytest.approx(1.1)
    assert r.tpot_s == pytest.approx((2.1 - 1.5) / 3)
    assert r.itl_s == pytest.approx([0.2, 0.3, 0.1])
    assert r.send_lag_ms == pytest.approx(100.0)


def test_single_token_has_no_tpot():
    assert rec(0, 0.0, [0.3]).tpot_s is None


def test_summary_uses_only_successful_requests_for_latency():
    ok = [rec(i, float(i), [i + 0.1 * (i + 1), i + 1.0]) for i in range(4)]
    bad = rec(9, 5.0, [], error="HTTP 500")
    s = summarize([*ok, bad])
    assert s.ttft_s.count == 4
    assert s.ttft_s.p50 == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4], 50))
    assert s.itl_s.count == 4
    assert s.duration_s == pytest.approx(4.0)  # first intended send 0.0 -> last end 4.0
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.output_tokens_per_s == pytest.approx(2.0)
    assert s.send_lag_ms.count == 5


def _poisson_records(rng, rate_rps, duration_s, rounds=1, mean_latency_s=0.2):
    """Poisson arrivals, 8-32 output tokens each; every round's clock starts at 0, as a real replay's does."""
    out = []
    for rnd in range(rounds):
        t, i = 0.0, 0
        while True:
            t += rng.exponential(1 / rate_rps)
            if t > duration_s:
                break
            n = int(rng.integers(8, 33))
            first = t + rng.exponential(mean_latency_s)
            times = [first + 0.01 * k for k in range(n)]
            out.append(
                RequestRecord(
                    index=i,
                    arm="a",
                    round=rnd,
                    intended_send_s=t,
                    actual_send_s=t,
                    first_token_s=first,
                    token_times_s=times,
                    end_s=times[-1],
                    prompt_tokens_requested=4,
                    output_tokens_requested=n,
                    output_tokens=n,
                )  # fmt: skip
            )
            i += 1
    return out


def test_rate_intervals_cover_a_known_truth_and_are_not_absurdly_wide():
    # True rates: 5 req/s and 5 x 20 (mean of 8..32) = 100 output tokens/s.
    covered = {"req": 0, "tok": 0}
    widths = []
    trials = 200
    for seed in range(trials):
        rates = summarize(_poisson_records(np.random.default_rng(seed), 5.0, 200.0)).rates
        for key, truth, r in (("req", 5.0, rates.requests_per_s), ("tok", 100.0, rates.output_tokens_per_s)):
            covered[key] += r.ci[0] <= truth <= r.ci[1]
        widths.append((rates.output_tokens_per_s.ci[1] - rates.output_tokens_per_s.ci[0]) / 100.0)
    for key in covered:
        assert 0.88 <= covered[key] / trials <= 0.99, covered  # nominal 95%
    # Poisson count over 200 s is ~1000 requests: SD of the tokens/s about 3.4%, so a 95% interval
    # about 15% wide; far from absurd, and no narrower than the truth allows.
    assert 0.08 < float(np.median(widths)) < 0.25


def test_two_rounds_do_not_double_the_rates():
    records = _poisson_records(np.random.default_rng(1), 5.0, 100.0, rounds=2)
    s = summarize(records)
    assert s.rounds == 2 and len(s.rates.round_durations_s) == 2
    assert s.requests_per_s == pytest.approx(5.0, rel=0.15)  # one span over both rounds would say ~10
    assert s.duration_s == pytest.approx(sum(s.rates.round_durations_s)) and s.duration_s > 190
    assert s.output_tokens_per_s == pytest.approx(len(records) * 20 / s.duration_s, rel=0.1)
    assert s.rates.requests_per_s.ci_rounds is not None and len(s.rates.requests_per_s.by_round) == 2


def test_goodput_counts_only_requests_meeting_the_slo():
    from experiment.slo import SloSpec

    records = _poisson_records(np.random.default_rng(2), 5.0, 100.0)
    slo = SloSpec(ttft_s=0.2, tpot_s=None)
    s = summarize(records, slo)
    met = sum(1 for r in records if r.ttft_s <= 0.2)
    assert 0 < met < len(records)
    assert s.goodput_rps == pytest.approx(met / s.duration_s)
    assert summarize(records).goodput_rps is None  # no SLO, no goodput


@pytest.mark.parametrize("chunk", [1, 5, 10**7])
def test_block_rates_read_row_by_chunk_are_the_rates_of_the_gathered_events(monkeypatch, chunk):
    rng = np.random.default_rng(chunk)
    lengths = rng.integers(0, 9, 40)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    flat = rng.uniform(0.0, 10.0, int(offsets[-1]))
    rows = np.array([0, 3, 4, 9, 17, 18, 30, 39])
    weight, shift = rng.uniform(0.5, 2.0, rows.size), rng.uniform(-1.0, 1.0, rows.size)
    times = np.concatenate([flat[offsets[r] : offsets[r + 1]] + s for r, s in zip(rows, shift, strict=True)])
    weights = np.repeat(weight, lengths[rows])
    monkeypatch.setattr(metrics, "row_chunks", functools.partial(metrics.row_chunks, chunk_values=chunk))
    got = metrics.csr_block_rates(0.5, 9.5, (flat, offsets), rows, weight, 7, shift)
    assert got == pytest.approx(metrics.block_rates(0.5, 9.5, times, weights, 7), rel=1e-12)
    assert np.isnan(metrics.csr_block_rates(1.0, 1.0, (flat, offsets), rows, weight, 7)).all()
