"""Service-level objectives that define goodput: the requests a user would count as served well.

One rule (``meets_slo``) serves the live Prometheus goodput, the analysis and the nightly gate, so
the three can never disagree about which request was served well. The thresholds live in the
experiment file (``slo:``) and are stored with every result.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.record_columns import RecordColumns
from workloads.records import RequestRecord


class SloSpec(FrozenStrictModel):
    """Per-request limits; a request meets the SLOs when it succeeded and is under every set limit."""

    ttft_s: float | None = Field(2.0, gt=0, description="Time to first token limit in seconds; null: no limit.")
    tpot_s: float | None = Field(0.2, gt=0, description="Mean time per output token limit in seconds; null: none.")
    e2e_s: float | None = Field(None, gt=0, description="End-to-end latency limit in seconds; null: no limit.")

    def describe(self) -> str:
        parts = [
            f"{k} <= {v:g} s"
            for k, v in (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("E2E", self.e2e_s))
            if v is not None
        ]
        return " and ".join(parts) if parts else "no limits (every successful request counts)"


def meets_slo(record: RequestRecord, slo: SloSpec) -> bool:
    """Succeeded, and under every limit that is set (a missing measurement fails a set limit)."""
    if not record.ok:
        return False
    checks = ((record.ttft_s, slo.ttft_s), (record.tpot_s, slo.tpot_s), (record.e2e_s, slo.e2e_s))
    return all(limit is None or (value is not None and value <= limit) for value, limit in checks)


def slo_met(records: RecordColumns, slo: SloSpec) -> np.ndarray:
    """``meets_slo`` for every row at once (NaN, a missing measurement, fails a set limit)."""
    met = records.ok.copy()
    for values, limit in ((records.ttft_s, slo.ttft_s), (records.tpot_s, slo.tpot_s), (records.e2e_s, slo.e2e_s)):
        if limit is not None:
            with np.errstate(invalid="ignore"):
                met &= values <= limit
    return met
