"""What a trace looks like before it is replayed: size, rate, burstiness, length percentiles."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workloads.traces import LoadedTrace


def _pcts(values: Sequence[int]) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(values, dtype=np.float64), (50, 90, 99))
    return {"mean": float(np.mean(values)), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def trace_stats(loaded: LoadedTrace) -> dict[str, object]:
    rows = loaded.rows
    times = [r.arrival_s for r in rows if r.arrival_s is not None]
    timed = len(times) == len(rows)
    duration_s = (times[-1] - times[0]) if timed and rows else None
    gaps = np.diff(np.asarray(times)) if timed else np.array([])
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None
    return {
        "requests": len(rows),
        "skipped": loaded.skipped,
        "duration_s": duration_s,
        "mean_rate_rps": (len(rows) - 1) / duration_s if duration_s else None,
        "interarrival_cv": cv,
        "input_tokens": _pcts([r.input_tokens for r in rows]),
        "output_tokens": _pcts([r.output_tokens for r in rows]),
        "chained_requests": sum(1 for r in rows if r.follows is not None),
        "shared_block_tokens": sum(n for r in rows for _, n in r.shared_blocks),
    }
