"""Arrival processes (when to send): a discriminated union on ``kind``, one module per kind.

They produce send offsets for the schedule's independent requests; how many may be in flight
is a separate setting of the client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from workloads.arrivals.base import ArrivalError, ArrivalPlan
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec, plan_closed_loop
from workloads.arrivals.constant import ConstantArrivalSpec, plan_constant
from workloads.arrivals.gamma import GammaArrivalSpec, plan_gamma
from workloads.arrivals.poisson import PoissonArrivalSpec, plan_poisson
from workloads.arrivals.trace import TraceArrivalSpec, plan_trace

AnyArrivalSpec = TraceArrivalSpec | PoissonArrivalSpec | GammaArrivalSpec | ConstantArrivalSpec | ClosedLoopArrivalSpec
ArrivalSpec = Annotated[AnyArrivalSpec, Field(discriminator="kind")]

PLANNERS: dict[str, Callable[[Any, Sequence[float | None], np.random.Generator], ArrivalPlan]] = {
    "trace": plan_trace,
    "poisson": plan_poisson,
    "gamma": plan_gamma,
    "constant": plan_constant,
    "closed_loop": plan_closed_loop,
}

_ARRIVAL_SEED_DOMAIN = 0xA221


def plan_arrivals(spec: AnyArrivalSpec, trace_times_s: Sequence[float | None], seed: int) -> ArrivalPlan:
    rng = np.random.default_rng([seed, _ARRIVAL_SEED_DOMAIN])
    return PLANNERS[spec.kind](spec, trace_times_s, rng)


__all__ = ["ArrivalSpec", "AnyArrivalSpec", "ArrivalPlan", "ArrivalError", "plan_arrivals", "PLANNERS"]
