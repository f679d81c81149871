"""What ``moeperf run`` prints when the run is over: the per-arm table, notes, failures, the result path.

This is the command's output, not logging: it is printed whatever the verbosity, to stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

from cluster.cli.table import arm_table
from result_format.run_result import RunResult

LOG_TAIL_LINES = 15


def print_result(result: RunResult, run_dir: Path, out: IO[str] | None = None) -> None:
    out = sys.stdout if out is None else out
    print(file=out)
    print(arm_table(result), file=out)
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
    print(f"\nresult: {run_dir / 'result.json'}  (status: {result.status})", file=out)
