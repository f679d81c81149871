"""Open loop at a fixed mean request rate: Poisson (independent users) or evenly spaced."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from workloads.arrivals.constant import ConstantArrivalSpec
from workloads.arrivals.poisson import PoissonArrivalSpec
from workloads.levels.base import TimedLevelBase


class RateLevel(TimedLevelBase):
    kind: Literal["rate"] = "rate"
    rate_rps: float = Field(gt=0, description="Mean requests per second.")
    process: Literal["poisson", "constant"] = Field("poisson", description="Gaps: exponential or equal.")

    @property
    def load(self) -> float:
        return self.rate_rps

    @property
    def load_unit(self) -> str:
        return "req/s"

    def request_count(self) -> int | None:
        if self.duration_s is not None:
            return max(1, math.ceil(self.rate_rps * self.duration_s))
        return self.requests

    def arrival(self) -> PoissonArrivalSpec | ConstantArrivalSpec:
        if self.process == "poisson":
            return PoissonArrivalSpec(rate_rps=self.rate_rps)
        return ConstantArrivalSpec(rate_rps=self.rate_rps)
