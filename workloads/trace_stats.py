"""What a trace looks like before it is replayed: size, rate, burstiness, length percentiles.

One pass over a stream of rows, in memory that does not grow with the number of rows, so a
multi-gigabyte trace can be described: token counts are integers, so a count of rows per length
gives exact means and exactly numpy's (linear) percentiles, in memory bounded by the number of
distinct lengths; the interarrival CV comes from running (Welford) sums of the gaps.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping

from workloads.schedule import TraceRow
from workloads.traces import LoadedTrace

PERCENTILES = (50, 90, 99)


class LengthCounts:
    """Rows per token count: exact mean and percentiles without keeping the rows."""

    def __init__(self) -> None:
        self.rows_by_tokens: dict[int, int] = {}
        self.rows = 0
        self.total_tokens = 0

    def add(self, tokens: int) -> None:
        self.rows_by_tokens[tokens] = self.rows_by_tokens.get(tokens, 0) + 1
        self.rows += 1
        self.total_tokens += tokens

    def summary(self) -> dict[str, float]:
        if not self.rows:
            raise ValueError("no rows to describe")
        lengths = sorted(self.rows_by_tokens)
        # rows_up_to[k]: rows with a length <= lengths[k]; the value at sorted position i is the first length
        # whose count goes past i.
        rows_up_to = list(itertools.accumulate(self.rows_by_tokens[t] for t in lengths))

        def at(i: int) -> float:
            return float(lengths[bisect.bisect_right(rows_up_to, i)])

        # The exact sum over the count is np.mean's result while the sum stays below 2**53 (numpy's float sum
        # of integers is exact there), and the correctly rounded mean beyond.
        out = {"mean": self.total_tokens / self.rows}
        for pct in PERCENTILES:
            out[f"p{pct}"] = percentile_linear(at, self.rows, pct)
        return out


def percentile_linear(at: Callable[[int], float], n: int, pct: float) -> float:
    """``np.percentile(values, pct)`` (method 'linear') from ``at(i)``, the i-th smallest of ``n`` values, in
    numpy's own float steps (index ``(n - 1) * q``, lerp from the nearer end), so the result is bit for bit its."""
    index = (n - 1) * (pct / 100)
    if index >= n - 1:
        return at(n - 1)
    below = math.floor(index)
    a, b = at(below), at(below + 1)
    t = index - below
    diff = b - a
    return a + diff * t if t < 0.5 else b - diff * (1 - t)


class GapMoments:
    """Welford's running mean and sum of squared deviations of the gaps between arrivals."""

    def __init__(self) -> None:
        self.gaps = 0
        self.mean_s = 0.0
        self.m2_s2 = 0.0

    def add(self, gap_s: float) -> None:
        self.gaps += 1
        delta_s = gap_s - self.mean_s
        self.mean_s += delta_s / self.gaps
        self.m2_s2 += delta_s * (gap_s - self.mean_s)

    def cv(self) -> float | None:
        """Population std over mean, as ``gaps.std() / gaps.mean()``; None for one gap or none, or no spread in time."""
        if self.gaps <= 1 or self.mean_s <= 0:
            return None
        return math.sqrt(self.m2_s2 / self.gaps) / self.mean_s


def trace_stats_stream(rows: Iterable[TraceRow], skipped: Mapping[str, int]) -> dict[str, object]:
    """Stats of ``rows`` read once; ``skipped`` is read after the rows, so a reader may fill it as it goes.

    No rows is a ValueError: the readers report an empty trace themselves, naming the file."""
    inputs, outputs, gaps = LengthCounts(), LengthCounts(), GapMoments()
    requests = chained = shared_tokens = 0
    timed = True  # every row so far has an arrival time
    first_s: float | None = None
    last_s: float | None = None
    for r in rows:
        requests += 1
        inputs.add(r.input_tokens)
        outputs.add(r.output_tokens)
        chained += r.follows is not None
        shared_tokens += sum(n for _, n in r.shared_blocks)
        if r.arrival_s is None:
            timed = False
        elif timed:
            if last_s is not None:
                gaps.add(r.arrival_s - last_s)
            first_s = r.arrival_s if first_s is None else first_s
            last_s = r.arrival_s
    duration_s = last_s - first_s if timed and first_s is not None and last_s is not None else None
    return {
        "requests": requests,
        "skipped": dict(skipped),
        "duration_s": duration_s,
        "mean_rate_rps": (requests - 1) / duration_s if duration_s else None,
        "interarrival_cv": gaps.cv() if timed else None,
        "input_tokens": inputs.summary(),
        "output_tokens": outputs.summary(),
        "chained_requests": chained,
        "shared_block_tokens": shared_tokens,
    }


def trace_stats(loaded: LoadedTrace) -> dict[str, object]:
    """The stats of a trace already in memory: the same pass, so both give the same numbers."""
    return trace_stats_stream(loaded.rows, loaded.skipped)
