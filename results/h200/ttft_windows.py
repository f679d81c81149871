"""TTFT by when a request was sent, counted from the arm-round's first request, one line per arm: the console
form of the reports' section "TTFT by time since the arm's first request" (``analysis.ttft_over_time``, whose
windows it prints, then every request together). Claim 3 is about the first minutes of a fresh engine, which the
verdicts' steady-state cut (MSER-5) leaves out on purpose.

    PYTHONPATH=. python3 results/h200/ttft_windows.py RUN_DIR...
"""

from __future__ import annotations

import sys
from pathlib import Path

from analysis.report import load_result
from analysis.ttft_over_time import arm_windows

WHOLE_TRACE = (0.0,)


def main(runs: list[str]) -> None:
    for run in runs:
        print("==", Path(run).name)
        for arm in load_result(Path(run)).arms:
            cells = [arm.name] + [
                f"{w.label} n={w.requests} p50={w.ttft_p50_ms:.0f} p90={w.ttft_p90_ms:.0f} mean={w.ttft_mean_ms:.0f}"
                for w in [*arm_windows(arm.columns), *arm_windows(arm.columns, WHOLE_TRACE)]
            ]
            print(" | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
