"""Gamma-distributed gaps: Poisson's mean rate with tunable burstiness.

``burstiness`` is the gamma shape k, as in ``vllm bench serve``: 1 is Poisson, below 1 is burstier
(CV of the gaps = 1/sqrt(k)), above 1 is smoother.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from workloads.arrivals.base import ArrivalPlan, OpenArrivalSpec
from workloads.arrivals.poisson import cumulative
from workloads.arrivals.ramp import warp


class GammaArrivalSpec(OpenArrivalSpec):
    kind: Literal["gamma"] = "gamma"
    rate_rps: float = Field(gt=0, description="Mean requests per second.")
    burstiness: float = Field(gt=0, description="Gamma shape k; CV of the gaps is 1/sqrt(k); 1 = Poisson.")


def plan_gamma(spec: GammaArrivalSpec, trace_times_s: Sequence[float | None], rng: np.random.Generator) -> ArrivalPlan:
    k = spec.burstiness
    gaps = rng.gamma(shape=k, scale=1.0 / (spec.rate_rps * k), size=len(trace_times_s))
    return ArrivalPlan(offsets_s=warp(cumulative(gaps), spec.ramp_up_s))
