"""Evenly spaced arrivals: the cleanest load for measuring the client and the server's ceiling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from workloads.arrivals.base import ArrivalPlan, OpenArrivalSpec
from workloads.arrivals.ramp import warp


class ConstantArrivalSpec(OpenArrivalSpec):
    kind: Literal["constant"] = "constant"
    rate_rps: float = Field(gt=0, description="Requests per second.")


def plan_constant(
    spec: ConstantArrivalSpec, trace_times_s: Sequence[float | None], rng: np.random.Generator
) -> ArrivalPlan:
    return ArrivalPlan(offsets_s=warp([i / spec.rate_rps for i in range(len(trace_times_s))], spec.ramp_up_s))
