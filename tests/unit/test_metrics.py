import numpy as np
import pytest

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
