"""Closed loop: C users, each sending its next request when the previous one is answered.

The rate is whatever the server sustains; this answers "what latency at concurrency C", the
question open-loop arrivals cannot. Users start together, or staggered evenly over ramp_up_s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.arrivals.base import ArrivalPlan


class ClosedLoopArrivalSpec(FrozenStrictModel):
    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, description="Users, i.e. requests in flight.")
    ramp_up_s: float = Field(0.0, ge=0, description="Start the users evenly spread over this time.")


def plan_closed_loop(
    spec: ClosedLoopArrivalSpec, trace_times_s: Sequence[float | None], rng: np.random.Generator
) -> ArrivalPlan:
    users = spec.concurrency
    offsets = [spec.ramp_up_s * min(i, users - 1) / users if i < users else 0.0 for i in range(len(trace_times_s))]
    return ArrivalPlan(offsets_s=offsets, users=users)
