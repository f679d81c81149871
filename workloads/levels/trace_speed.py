"""The trace's own arrivals, time-scaled: its bursts and lulls at 1x, 2x, 4x ... of its recorded rate."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workloads.arrivals.trace import TraceArrivalSpec
from workloads.levels.base import TimedLevelBase


class TraceSpeedLevel(TimedLevelBase):
    kind: Literal["trace_speed"] = "trace_speed"
    speedup: float = Field(gt=0, description="Replay the trace's timestamps this many times faster.")

    @property
    def load(self) -> float:
        return self.speedup

    @property
    def load_unit(self) -> str:
        return "x trace"

    def label(self) -> str:
        return self.name if self.name is not None else f"{self.speedup:g}x"

    def arrival(self) -> TraceArrivalSpec:
        return TraceArrivalSpec()

    def replay_speedup(self) -> float:
        return self.speedup

    def window_end_s(self) -> float | None:
        """A duration in replay time is this much trace time (the trace's own clock runs ``speedup`` faster)."""
        return None if self.duration_s is None else self.duration_s * self.speedup
