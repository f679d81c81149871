"""Service-level objectives that define goodput: the requests a user would count as served well.

The experiment file has no SLO section yet, so the thresholds come from here (or the report's CLI
options); a future ``slo`` mapping in the resolved config is honoured when present.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SloSpec(BaseModel):
    """Per-request limits; a request meets the SLOs when it succeeded and is under every set limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


def slo_from_config(config: dict[str, Any], default: SloSpec | None = None) -> SloSpec:
    """The run's own SLOs when its config carries an ``slo`` mapping, else ``default``."""
    raw = config.get("slo")
    if isinstance(raw, dict):
        return SloSpec.model_validate(raw)
    return default or SloSpec()
