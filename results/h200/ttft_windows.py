"""TTFT by when a request was sent, counted from the trace's start: claim 3 is about the first minutes of a fresh
engine, which the verdicts' steady-state cut (MSER-5) leaves out on purpose. Every measured request of each arm,
in send-time windows of [0, 15), [15, 30) and [30, end) seconds, and all together.

    python3 results/h200/ttft_windows.py RUN_DIR...
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

WINDOWS_S = ((0.0, 15.0), (15.0, 30.0), (30.0, float("inf")), (0.0, float("inf")))
COLUMNS = ["first_token_s", "actual_send_s", "intended_send_s", "warmup"]


def arm_ttft_ms(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(send time from the arm's first intended send in s, TTFT in ms) of its measured requests with a first token."""
    d = pq.read_table(path, columns=COLUMNS).to_pydict()
    ok = [i for i, t in enumerate(d["first_token_s"]) if t is not None and not d["warmup"][i]]
    ttft_ms = np.array([d["first_token_s"][i] - d["actual_send_s"][i] for i in ok]) * 1e3
    sent_s = np.array([d["intended_send_s"][i] for i in ok])
    return sent_s - sent_s.min(), ttft_ms


def main(runs: list[str]) -> None:
    for run in runs:
        print("==", Path(run).name)
        for path in sorted(Path(run, "records").glob("*.parquet")):
            sent_s, ttft_ms = arm_ttft_ms(path)
            cells = [path.stem]
            for lo, hi in WINDOWS_S:
                m = (sent_s >= lo) & (sent_s < hi)
                if not m.any():
                    continue
                p50, p90 = np.percentile(ttft_ms[m], [50, 90])
                end = "end" if hi == float("inf") else f"{hi:g}"
                cells.append(f"[{lo:g},{end}) n={m.sum()} p50={p50:.0f} p90={p90:.0f} mean={ttft_ms[m].mean():.0f}")
            print(" | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
