"""What an arrival process hands the schedule builder."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from common.strict import FrozenStrictModel


class OpenArrivalSpec(FrozenStrictModel):
    """Open-loop processes: send times do not depend on how fast the server answers."""

    ramp_up_s: float = Field(0.0, ge=0, description="Grow the rate linearly from 0 to full over this time.")


@dataclass(frozen=True)
class ArrivalPlan:
    """Send offsets of the independent requests, in order; ``users`` set for closed loops.

    With ``users`` = C, request k (k >= C) is chained to request k - C: each of C users sends
    its next request as soon as its previous one is answered.
    """

    offsets_s: list[float]
    users: int | None = None


class ArrivalError(ValueError):
    """The arrival process cannot be applied to this trace (e.g. no timestamps)."""
