"""The trace's own timestamps, optionally rescaled to a target mean rate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from workloads.arrivals.base import ArrivalError, ArrivalPlan, OpenArrivalSpec
from workloads.arrivals.ramp import warp


class TraceArrivalSpec(OpenArrivalSpec):
    kind: Literal["trace"] = "trace"
    target_rate_rps: float | None = Field(
        None, gt=0, description="Rescale time so the mean rate is this (keeps the trace's burst pattern)."
    )


def plan_trace(spec: TraceArrivalSpec, trace_times_s: Sequence[float | None], rng: np.random.Generator) -> ArrivalPlan:
    if any(t is None for t in trace_times_s):
        raise ArrivalError(
            "this trace has no timestamps: set workload.arrival to poisson, gamma, constant or closed_loop"
        )
    times = [float(t) for t in trace_times_s if t is not None]
    if spec.target_rate_rps is not None:
        span = times[-1] - times[0] if times else 0.0
        if span <= 0:
            raise ArrivalError("target_rate_rps needs a trace that spans some time")
        factor = (len(times) - 1) / span / spec.target_rate_rps
        times = [t * factor for t in times]
    return ArrivalPlan(offsets_s=warp(times, spec.ramp_up_s))
