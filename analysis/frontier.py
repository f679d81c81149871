"""The geometry of a load sweep, kept apart from its statistics so it can be checked on exact numbers.

Three pure functions on a handful of level points: the Pareto frontier of throughput against
interactivity (more of both is better, so a point another beats on both counts is never what an
operator would run), the log ratio of two frontiers at matched interactivity, and the capacity
crossing of an attainment curve. ``analysis.sweep`` calls them once on the estimates and once per
bootstrap replicate, so the interval is of exactly the statistic the point estimate is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

MATCHED_GRID_POINTS = 33
"""Interactivity values the frontiers are compared at, evenly spaced in log over their shared range."""

Censoring = Literal["none", "above", "below"]


def pareto_frontier(xs: Sequence[float], ys: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both x and y (ties kept once), sorted by x ascending.

    Along the result y strictly falls as x rises: the trade-off curve. Non-finite points are never on it.
    """
    pts = [(float(x), float(y), i) for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
    pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
    # Scan from the highest x down; a point is on the frontier when its y beats every y seen so far.
    pts.sort(key=lambda p: (-p[0], -p[1]))
    out: list[int] = []
    best_y = -math.inf
    for _x, y, i in pts:
        if y > best_y:
            out.append(i)
            best_y = y
    return out[::-1]


def interpolate(frontier_x: np.ndarray, frontier_y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """y of the frontier (linear between its points, x ascending) at ``at``; NaN outside its x range."""
    y = np.interp(at, frontier_x, frontier_y)
    outside = (at < frontier_x[0] - 1e-12 * abs(frontier_x[0])) | (at > frontier_x[-1] + 1e-12 * abs(frontier_x[-1]))
    return np.where(outside, np.nan, y)


def shared_range(a_x: np.ndarray, b_x: np.ndarray) -> tuple[float, float] | None:
    """The interactivity both frontiers cover; None when they do not overlap."""
    lo, hi = max(float(a_x[0]), float(b_x[0])), min(float(a_x[-1]), float(b_x[-1]))
    return (lo, hi) if lo <= hi else None


def matched_grid(a_x: np.ndarray, b_x: np.ndarray) -> np.ndarray | None:
    """Interactivity values to compare two frontiers at: their shared range, evenly spaced in log (a
    single value when they share one point); None when they share none."""
    if a_x.size == 0 or b_x.size == 0:
        return None
    rng = shared_range(a_x, b_x)
    if rng is None or rng[0] <= 0:
        return None
    lo, hi = rng
    return np.array([lo]) if hi == lo else np.geomspace(lo, hi, MATCHED_GRID_POINTS)


def matched_logs(a_x: np.ndarray, a_y: np.ndarray, b_x: np.ndarray, b_y: np.ndarray) -> tuple[float, float, float]:
    """(mean log y_A, mean log y_B, mean log(y_B / y_A)) over the frontiers' shared interactivity range.

    A mean of logs over a grid even in log x weighs every part of the trade-off alike, whatever the levels'
    spacing, and its difference is the log of a geometric-mean ratio. NaNs when they share no interactivity.
    """
    grid = matched_grid(a_x, b_x)
    if grid is None:
        return math.nan, math.nan, math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        la, lb = np.log(interpolate(a_x, a_y, grid)), np.log(interpolate(b_x, b_y, grid))
    if not (np.all(np.isfinite(la)) and np.all(np.isfinite(lb))):
        return math.nan, math.nan, math.nan
    return float(la.mean()), float(lb.mean()), float(np.mean(lb - la))


@dataclass(frozen=True)
class Crossing:
    """Where an attainment curve (levels sorted by load) first falls below its threshold."""

    load: float  # the capacity; for "above" the top load, for "below" NaN
    censored: Censoring  # "above": every level meets it; "below": the lowest already misses
    lower: int | None  # position (in load order) of the last level that meets it before the crossing
    upper: int | None  # position of the first level that misses it
    fraction: float  # where between lower and upper the crossing lies (0..1); 0 when censored
    meets_again: bool  # a level above the first miss meets it again (the curve is not monotone)


def capacity_crossing(loads: Sequence[float], attainment: Sequence[float], threshold: float) -> Crossing:
    """Capacity of levels sorted by load: the load where attainment, linear between the last level that
    meets ``threshold`` and the first that misses it, equals the threshold.

    Taken at the *first* miss: a higher level that meets the SLO again (noise, or a level the engine
    happened to serve well) does not make the load between them safe. A level with no measurement
    (NaN attainment) misses.
    """
    load = np.asarray(loads, dtype=np.float64)
    att = np.nan_to_num(np.asarray(attainment, dtype=np.float64), nan=-1.0)
    meets = att >= threshold
    if meets.all():
        return Crossing(float(load[-1]), "above", len(load) - 1, None, 0.0, False)
    first_miss = int(np.argmin(meets))
    again = bool(meets[first_miss:].any())
    if first_miss == 0:
        return Crossing(math.nan, "below", None, 0, 0.0, again)
    i, j = first_miss - 1, first_miss
    a_i, a_j = max(float(att[i]), threshold), max(float(att[j]), 0.0)
    f = (a_i - threshold) / (a_i - a_j) if a_i > a_j else 0.0
    return Crossing(float(load[i] + f * (load[j] - load[i])), "none", i, j, float(f), again)
