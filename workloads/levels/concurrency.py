"""Closed loop at a fixed concurrency: C users, each sending its next request when its last one ends.

The InferenceMAX / `vllm bench serve --max-concurrency` kind of point: throughput is what the
engine sustains at C in flight, interactivity is what each of those C users sees.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.levels.base import LevelBase


class ConcurrencyLevel(LevelBase):
    kind: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(ge=1, description="Requests in flight (closed-loop users).")
    requests: int = Field(ge=1, description="Requests this level sends (the workload's first ones).")

    @property
    def load(self) -> float:
        return float(self.concurrency)

    @property
    def load_unit(self) -> str:
        return "concurrency"

    def label(self) -> str:
        return self.name if self.name is not None else f"c={self.concurrency}"

    def arrival(self) -> ClosedLoopArrivalSpec:
        return ClosedLoopArrivalSpec(concurrency=self.concurrency)
