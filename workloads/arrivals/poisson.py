"""Poisson arrivals: exponential gaps, the memoryless load of many independent users."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from workloads.arrivals.base import ArrivalPlan, OpenArrivalSpec
from workloads.arrivals.ramp import warp


class PoissonArrivalSpec(OpenArrivalSpec):
    kind: Literal["poisson"] = "poisson"
    rate_rps: float = Field(gt=0, description="Mean requests per second.")


def cumulative(gaps_s: np.ndarray) -> list[float]:
    """First request at 0, then the gaps."""
    return np.concatenate([[0.0], np.cumsum(gaps_s[:-1])]).tolist() if len(gaps_s) else []


def plan_poisson(
    spec: PoissonArrivalSpec, trace_times_s: Sequence[float | None], rng: np.random.Generator
) -> ArrivalPlan:
    gaps = rng.exponential(1.0 / spec.rate_rps, size=len(trace_times_s))
    return ArrivalPlan(offsets_s=warp(cumulative(gaps), spec.ramp_up_s))
