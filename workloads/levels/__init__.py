"""Load levels of a sweep: a discriminated union on ``kind``, one module per kind, chosen by lookup.

Each kind says when to send (its arrival process and clock) and how many; the workload keeps the
request lengths. ``level_workload`` is the one place a level is applied to a workload.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from workloads.levels.base import LevelBase
from workloads.levels.concurrency import ConcurrencyLevel
from workloads.levels.rate import RateLevel
from workloads.levels.trace_speed import TraceSpeedLevel

AnyLoadLevel = ConcurrencyLevel | RateLevel | TraceSpeedLevel
LoadLevel = Annotated[AnyLoadLevel, Field(discriminator="kind")]

LEVEL_KINDS: dict[str, type[LevelBase]] = {
    "concurrency": ConcurrencyLevel,
    "rate": RateLevel,
    "trace_speed": TraceSpeedLevel,
}

__all__ = ["AnyLoadLevel", "LoadLevel", "LEVEL_KINDS", "LevelBase", "ConcurrencyLevel", "RateLevel", "TraceSpeedLevel"]
