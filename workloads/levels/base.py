"""What every load level shares: how many requests it sends, its warm-up share, and what it is called.

A level is one point of a sweep: the same engine serves it right after the level before, so each
level is a complete, separately measured replay (its own clock, its own warm-up share, its own
prompts). A level turns the experiment's workload into that replay by replacing only "when to send"
and "how many"; request lengths stay the workload's.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from common.strict import FrozenStrictModel


class LevelBase(FrozenStrictModel):
    name: str | None = Field(None, description="Label in tables and plots; null: made from the level's load.")
    requests: int | None = Field(
        None, ge=1, description="Requests this level sends (the workload's first ones, whole conversations)."
    )
    warmup_fraction: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Share of the level's first requests (in send order) sent but excluded from measurement; "
        "null: the sweep's warmup_fraction.",
    )

    # --- what each kind provides ---------------------------------------------------------------
    @property
    def load(self) -> float:
        """The level's position on the load axis, in ``load_unit``."""
        raise NotImplementedError

    @property
    def load_unit(self) -> str:
        raise NotImplementedError

    def label(self) -> str:
        return self.name if self.name is not None else f"{self.load:g} {self.load_unit}"

    def request_count(self) -> int | None:
        """How many of the workload's requests the level keeps; null: all of them."""
        return self.requests

    def replay_speedup(self) -> float:
        """What the send offsets are divided by: 1 unless the level replays the trace's own clock faster."""
        return 1.0

    def window_end_s(self) -> float | None:
        """End of the trace-time window the level keeps; null: no window of its own."""
        return None

    def warmup_count(self, n: int, default_fraction: float) -> int:
        """Warm-up requests of a level of ``n``: the share rounded up, leaving at least one measured request."""
        f = default_fraction if self.warmup_fraction is None else self.warmup_fraction
        return min(math.ceil(f * n), max(n - 1, 0))


class TimedLevelBase(LevelBase):
    """Open-loop levels: sized by a request count or by a duration at the level's rate (one of the two)."""

    duration_s: float | None = Field(
        None, gt=0, description="Send for this long at the level's rate instead of a request count."
    )

    @model_validator(mode="after")
    def _one_size(self) -> TimedLevelBase:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of requests and duration_s")
        return self
