"""TTFT by when a request was sent, counted from its arm-round's first request: how long a cold start costs.

Why: a claim such as "no Triton re-specialisation: -9% TTFT" is about the first minutes of a fresh engine, when
JIT compiles stall the requests that reach new shapes. The verdicts leave that time out on purpose (the MSER-5
steady-state cut) and pool the rest, so they cannot say how long the cold start lasts or whether the arms
converge once it is over. Here every measured request of an arm (a sweep level's warm-up share aside; the
steady-state cut is not applied) that finished without error and had a first token is placed by its intended
send time less the first intended send of its arm and round (each round a fresh engine under interleaved
placement; under parallel placement an engine serves every round, so only round 0 holds its cold start), in
the windows of ``WINDOW_EDGES_S``; a window pools the arm's rounds. Per window: how many
requests, TTFT p50, p90 and mean; per comparison the report makes (A/A controls included), B/A of the means.
Descriptive only: no intervals, no verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from analysis import fmt
from common.strict import FrozenStrictModel
from result_format.run_result import RunResult
from workloads.record_columns import RecordColumns

if TYPE_CHECKING:
    from analysis.verdicts import RunAnalysis

WINDOW_EDGES_S = (0.0, 15.0, 30.0, 60.0, 120.0, 300.0)
"""Window starts, seconds after the arm-round's first intended send; the last window runs to the end. Fixed
rather than a share of the run, so that runs of different lengths line up: fine at the start, where compiles
cluster (a 60 s trace still gets four windows), wider later, where a long run's TTFT is steady and a window
of a few minutes still holds enough requests for a p90."""

PERCENTILES = (50, 90)


class TtftWindow(FrozenStrictModel):
    """One arm's measured requests sent in one window, every round of the arm together."""

    start_s: float = Field(description="Window start, seconds after the arm-round's first intended send (inclusive).")
    end_s: float | None = Field(description="Window end (exclusive); null: to the end of the round.")
    requests: int = Field(description="Requests sent in the window that finished without error with a first token.")
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_mean_ms: float

    @property
    def label(self) -> str:
        return f"[{self.start_s:g}, {'end' if self.end_s is None else f'{self.end_s:g}'}) s"


def since_round_start_s(columns: RecordColumns) -> np.ndarray:
    """Each record's intended send less the first intended send of its round (every record of the round counts,
    sent or not: the schedule's start is when the engine met its first request)."""
    out = np.full(len(columns), np.nan)
    for rnd in np.unique(columns.round):
        rows = columns.round == rnd
        sends = columns.intended_send_s[rows]
        if np.isfinite(sends).any():
            out[rows] = sends - np.nanmin(sends)
    return out


def window_index(since_start_s: np.ndarray, edges_s: Sequence[float] = WINDOW_EDGES_S) -> np.ndarray:
    """The window of each time: i where edges_s[i] <= t < edges_s[i + 1] (the last one open-ended); -1 for a time
    before the first edge or NaN."""
    t = np.asarray(since_start_s, dtype=np.float64)
    idx = np.searchsorted(np.asarray(edges_s, dtype=np.float64), t, side="right") - 1
    return np.where(np.isnan(t), -1, idx)


def arm_windows(columns: RecordColumns, edges_s: Sequence[float] = WINDOW_EDGES_S) -> list[TtftWindow]:
    """The non-empty windows of one arm's records, in time order."""
    ttft_ms = columns.ttft_s * 1000.0
    usable = columns.ok & ~columns.warmup & np.isfinite(ttft_ms)
    which = window_index(since_round_start_s(columns), edges_s)
    out = []
    for i, start_s in enumerate(edges_s):
        values = ttft_ms[usable & (which == i)]
        if not values.size:
            continue
        p50, p90 = (float(v) for v in np.percentile(values, PERCENTILES))
        out.append(
            TtftWindow(
                start_s=float(start_s),
                end_s=float(edges_s[i + 1]) if i + 1 < len(edges_s) else None,
                requests=int(values.size),
                ttft_p50_ms=p50,
                ttft_p90_ms=p90,
                ttft_mean_ms=float(values.mean()),
            )
        )
    return out


def applies(result: RunResult) -> bool:
    """A replay of one trace or schedule per round; a sweep's rounds restart at every load level, so time since
    the round's first request mixes the levels and says nothing about the cold start."""
    return result.config.sweep is None


def run_windows(result: RunResult) -> dict[str, list[TtftWindow]]:
    """Per arm with a usable request, in the result's order; empty for a run with a sweep (see ``applies``)."""
    if not applies(result):
        return {}
    return {a.name: w for a in result.arms if (w := arm_windows(a.columns))}


# --- B/A per window ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRatio:
    start_s: float
    end_s: float | None
    ratio: float | None  # B's TTFT mean over A's; None where either arm had no request in the window


@dataclass(frozen=True)
class ComparisonTtftOverTime:
    a_arm: str
    b_arm: str
    kind: Literal["ab", "aa"]
    windows: tuple[WindowRatio, ...]

    def ratio(self, start_s: float) -> float | None:
        return next((w.ratio for w in self.windows if w.start_s == start_s), None)


def _mean_ratio(b: TtftWindow | None, a: TtftWindow | None) -> float | None:
    if a is None or b is None or not a.ttft_mean_ms > 0 or not math.isfinite(b.ttft_mean_ms):
        return None
    return b.ttft_mean_ms / a.ttft_mean_ms


def compare_windows(
    a_arm: str, b_arm: str, kind: Literal["ab", "aa"], a: Sequence[TtftWindow], b: Sequence[TtftWindow]
) -> ComparisonTtftOverTime:
    """B/A of the TTFT means in every window either arm has."""
    by_a = {w.start_s: w for w in a}
    by_b = {w.start_s: w for w in b}
    ends = {w.start_s: w.end_s for w in (*a, *b)}
    rows = tuple(WindowRatio(s, ends[s], _mean_ratio(by_b.get(s), by_a.get(s))) for s in sorted(ends))
    return ComparisonTtftOverTime(a_arm, b_arm, kind, rows)


def compare_run(windows: Mapping[str, Sequence[TtftWindow]], analysis: RunAnalysis) -> list[ComparisonTtftOverTime]:
    """Every comparison of ``analysis`` (A/B first, then the A/A controls, as the reports list them) whose arms
    both have windows."""
    return [
        compare_windows(c.a_arm, c.b_arm, c.kind, windows[c.a_arm], windows[c.b_arm])
        for c in analysis.in_report_order
        if c.a_arm in windows and c.b_arm in windows
    ]


# --- the reports' table (shared by the Markdown and the HTML) --------------------------------------------------

SECTION_TITLE = "TTFT by time since the arm's first request"
SECTION_INTRO = (
    "TTFT of every measured request that finished with a first token, by when it was to be sent, counted from the "
    "first request of its arm and round (a fresh engine per round under interleaved placement); the steady-state "
    "cut of the verdicts is not applied, so the cold start (Triton JIT compiles, first shapes) shows in the first "
    "windows. Rounds are pooled within a window. B/A is the arm's TTFT mean over that of the arm it is compared "
    "with in the verdicts (the baseline; for an A/A control, the arm it copies), in the same window. Descriptive "
    "only: no intervals, and the verdicts are elsewhere."
)
HEADERS = ["arm", "sent in", "requests", "TTFT p50 (ms)", "TTFT p90 (ms)", "TTFT mean (ms)", "B/A mean", "A"]


def _ms(v: float) -> str:
    return f"{v:.1f}"


def table_rows(
    windows: Mapping[str, Sequence[TtftWindow]], comparisons: Sequence[ComparisonTtftOverTime]
) -> list[list[str]]:
    """One row per arm and window, in the arms' order; the ratio from the comparison the arm is B of."""
    as_b: dict[str, ComparisonTtftOverTime] = {}
    for c in comparisons:
        as_b.setdefault(c.b_arm, c)
    rows = []
    for arm, arm_rows in windows.items():
        of = as_b.get(arm)
        for w in arm_rows:
            cells = [arm, w.label, str(w.requests), _ms(w.ttft_p50_ms), _ms(w.ttft_p90_ms), _ms(w.ttft_mean_ms)]
            rows.append(cells + ([fmt.ratio(of.ratio(w.start_s)), of.a_arm] if of is not None else ["-", "-"]))
    return rows
