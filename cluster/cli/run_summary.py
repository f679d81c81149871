"""What ``moeperf run`` prints when the run is over: the per-arm table, notes, failures, the result path.

This is the command's output, not logging: it is printed whatever the verbosity, to stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from cluster.cli.table import arm_table, level_table
from result_format.run_result import RunResult

LOG_TAIL_LINES = 15


def print_result(result: RunResult, run_dir: Path, out: IO[str] | None = None) -> None:
    out = sys.stdout if out is None else out
    print(file=out)
    print(arm_table(result), file=out)
    if result.config.sweep is not None and (levels := level_table(result)):
        print(f"\nsweep levels (warm-up share excluded; load in {result.config.sweep.load_unit}):", file=out)
        print(levels, file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
    if result.error:
        print(f"run FAILED: {result.error}", file=out)
    for a in result.arms:
        if a.status == "failed":
            print(f"arm {a.name} FAILED: {a.failure_reason}", file=out)
            if a.engine_log_tail:
                print("  engine log (last lines):", file=out)
                for line in a.engine_log_tail.strip().splitlines()[-LOG_TAIL_LINES:]:
                    print(f"    {line}", file=out)
    lines = _verdict_lines(result)
    if lines:
        print(file=out)
        for line in lines:
            print(line, file=out)
    print(f"\nresult: {run_dir / 'result.json'}  (status: {result.status})", file=out)


def _verdict_lines(result: RunResult) -> list[str]:
    """One line per comparison (verdicts and the A/A noise floor), as ``moeperf report`` would judge it."""
    from analysis.summary import summary_lines

    try:
        return summary_lines(result)
    except Exception as e:  # noqa: BLE001 - the run and its result file stand; the report can be re-rendered
        return [f"(no verdict summary: {type(e).__name__}: {e}; run `moeperf report` on the run folder)"]
