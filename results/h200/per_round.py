"""Per arm, sweep level and round of a saved run: TPOT and TTFT medians, mean E2E, and output tokens/s two ways.

Why: a sweep's per-level interval pools its rounds, and a wide one can come from the engines (each round is
a fresh engine) or from the estimator (a short closed-loop level has ramp edges). Two estimators side by
side tell which: tokens over the level's span, and Little's law (concurrency x mean tokens / mean E2E),
which has no edges. When they agree per round and the rounds still differ, the engines differ. "pos" is the
arm-round's place among its round's engines, in the order the driver ran them (``result.json: turns``), so a drift
with the engines' order on one machine shows beside the setting. Files written before turns were recorded get the
plan under today's order (``plan_turns``: A B C, C B A, then B C A, ...), which for runs of three or more arms made
before 2026-12-03 is not what ran from round 2 on (those ran A B C, C B A in every pair).

    python3 results/h200/per_round.py results/h200/<run>
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from analysis.places import arm_places
from cluster.orchestration.driver import plan_turns
from result_format.run_result import TurnRecord, load_run


def main(run_dir: str) -> None:
    run = load_run(Path(run_dir))
    sweep = run.config.sweep
    turns = run.turns or [
        TurnRecord(kind=t.kind, round=t.round, arms=list(t.names), started_at=run.started_at)
        for t in plan_turns(run.config)
    ]
    places = arm_places(turns)  # interleaved only: parallel arms share their turn
    print(
        "arm                   pos  level   round   n  TPOT p50 ms  TTFT p50 ms  E2E mean s  tok/s (span)  "
        "tok/s (Little)"
    )
    for arm in run.arms:
        cols = arm.columns
        for level in sorted(set(cols.levels())):
            load = sweep.levels[level].load if sweep else float("nan")
            for rnd in sorted(set(cols.rounds())):
                m = cols.select((cols.level == level) & (cols.round == rnd)).measured
                if not len(m):
                    continue
                tokens = m.output_token_count
                span_s = np.nanmax(m.end_s) - np.nanmin(m.actual_send_s)
                little = load * tokens.mean() / m.e2e_s.mean()
                print(
                    f"{arm.name:20s} {places.get(arm.name, {}).get(rnd, '-')!s:>4s} {level:6d} {rnd:7d} {len(m):4d} "
                    f"{np.median(m.tpot_s) * 1e3:12.3f} "
                    f"{np.median(m.ttft_s) * 1e3:12.1f} {m.e2e_s.mean():11.3f} {tokens.sum() / span_s:13.1f} "
                    f"{little:15.1f}"
                )


if __name__ == "__main__":
    main(sys.argv[1])
