"""Linear ramp-up as a warp of the time axis: the rate grows from 0 to full over ``ramp_up_s``.

An arrival process generates offsets at full rate; mapping each through the inverse of the
cumulative intensity (rate * t^2 / 2R during the ramp, rate * (t - R/2) after) gives the ramped
process, for any process, without each one knowing about ramps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def warp(offsets_s: Sequence[float], ramp_up_s: float) -> list[float]:
    if ramp_up_s <= 0:
        return list(offsets_s)
    half = ramp_up_s / 2
    return [math.sqrt(2 * ramp_up_s * t) if t < half else t + half for t in offsets_s]
