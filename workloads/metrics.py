"""Summary statistics over request records: the numbers in the per-arm table and result file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from workloads.records import RequestRecord

QUANTILES = (50, 90, 99)


class Distribution(BaseModel):
    """Quantiles of one latency metric in seconds; all null when there were no samples."""

    model_config = ConfigDict(extra="forbid")

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class ArmSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    send_lag_ms: Distribution = Field(description="Actual minus intended send time: the client's own lag.")
    duration_s: float = Field(description="First intended send to last response end.")
    requests_per_s: float = Field(description="Successful requests per second over duration_s.")
    output_tokens_per_s: float = Field(description="Output tokens of successful requests per second.")


def distribution(values: Sequence[float]) -> Distribution:
    """Linear-interpolated percentiles (numpy's default), the convention vllm bench serve uses."""
    if len(values) == 0:
        return Distribution(count=0, mean=None, p50=None, p90=None, p99=None)
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, QUANTILES))
    return Distribution(count=len(arr), mean=float(arr.mean()), p50=p50, p90=p90, p99=p99)


def summarize(records: Sequence[RequestRecord]) -> ArmSummary:
    ok = [r for r in records if r.ok]
    ttft = [v for r in ok if (v := r.ttft_s) is not None]
    tpot = [v for r in ok if (v := r.tpot_s) is not None]
    e2e = [v for r in ok if (v := r.e2e_s) is not None]
    itl = [v for r in ok for v in r.itl_s]
    lag = [v for r in records if (v := r.send_lag_ms) is not None]
    starts = [r.intended_send_s for r in records]
    ends = [r.end_s for r in ok if r.end_s is not None]
    duration_s = (max(ends) - min(starts)) if ends and starts else 0.0
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    return ArmSummary(
        ttft_s=distribution(ttft),
        tpot_s=distribution(tpot),
        itl_s=distribution(itl),
        e2e_s=distribution(e2e),
        send_lag_ms=distribution(lag),
        duration_s=duration_s,
        requests_per_s=len(ok) / duration_s if duration_s > 0 else 0.0,
        output_tokens_per_s=out_tokens / duration_s if duration_s > 0 else 0.0,
    )
