"""``moeperf combine --levels c=1,...``: a sweep run cut to some of its levels, so that a round a hold lost
part-way still counts where every arm finished.

A GPU hold is often lost in the middle of a round (a late call, a turn cut on the calling side): the arms
that ran served every level, the arm that was cut served some. ``recover --whole_rounds`` must drop that
round, yet at the levels every arm did finish it is an engine pair like any other: each arm's engine of the
round served them, in the same round, under the same settings. Cut to those levels, every run pools with
the others by ``combine`` as usual, and the per-level verdicts there gain its engine pair.

The cut is the same for every run pooled (the configs must match), the records of other levels and of
rounds not finished at the kept levels leave the analysis, and the engines' step-time windows (which cover
whole rounds, every level) are left out, said in the arm's notes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cluster.orchestration.recover import level_plan, whole_rounds
from experiment.config import ConfigError
from result_format.run_result import INTERRUPTED, ArmResult, LevelResult, RunResult
from workloads.metrics import summarize_level
from workloads.record_columns import RecordColumns
from workloads.schedule_file import ScheduleFileError, read_schedule


def _cut_arm(
    arm: ArmResult, cols: RecordColumns, levels: list[LevelResult], rounds: list[int], per_round: int, note: str
) -> ArmResult:
    # An arm cut by the driver's end (moeperf recover) is whole at these levels and rounds; one that failed on
    # its own (its engine, its client) stays failed.
    cut_short = arm.status != "ok" and (arm.failure_reason or "").startswith(INTERRUPTED)
    return arm.with_columns(
        cols,
        status="ok" if cut_short else arm.status,
        failure_reason=None if cut_short else arm.failure_reason,
        requests_planned=per_round * len(rounds),
        requests_not_sent=0 if cut_short else arm.requests_not_sent,
        rounds=len(rounds),
        levels=levels,
        window_metrics={},
        window_metrics_by_round={},
        notes=[*arm.notes, note],
    )


def keep_levels(run: RunResult, run_dir: Path, labels: Sequence[str]) -> RunResult:
    """``run`` with only the sweep levels named ``labels`` (as the report names them: ``c=1``), renumbered in
    sweep order, and only the rounds every arm finished at them; ``ConfigError`` naming what is wrong."""
    cfg = run.config
    if cfg.sweep is None:
        raise ConfigError(f"{run_dir}: --levels needs a sweep run; this one has no sweep levels")
    names = [spec.label() for spec in cfg.sweep.levels]
    unknown = [lab for lab in labels if lab not in names]
    if unknown or not labels:
        raise ConfigError(f"{run_dir}: --levels {','.join(unknown) or '(none)'}: its levels are {', '.join(names)}")
    kept = sorted({names.index(lab) for lab in labels})
    try:
        plan = level_plan(read_schedule(run_dir))
    except (OSError, ScheduleFileError) as e:
        raise ConfigError(f"{run_dir}: --levels needs the run's saved schedule: {e}") from None
    per_round = sum(plan[i][0] for i in kept)
    renumber = np.full(len(names), -1, dtype=np.int64)
    renumber[kept] = np.arange(len(kept))
    at_levels = [a.columns.select(np.isin(a.columns.level, kept)) for a in run.arms]
    rounds = whole_rounds(cfg, per_round, at_levels)
    if not rounds:
        counts = ", ".join(f"{a.name} {len(c)}" for a, c in zip(run.arms, at_levels, strict=True))
        raise ConfigError(
            f"{run_dir}: no round in which every arm finished {', '.join(names[i] for i in kept)} ({per_round} "
            f"records per round; found {counts})"
        )
    sweep = cfg.sweep.model_copy(update={"levels": [cfg.sweep.levels[i] for i in kept]})
    new_cfg = cfg.model_copy(update={"sweep": sweep, "first_round": rounds[0], "rounds": len(rounds)})
    note = (
        f"cut to levels {', '.join(names[i] for i in kept)} and rounds {rounds[0]}-{rounds[-1]} (moeperf combine "
        "--levels); its engine step times cover whole rounds and are left out"
    )
    arms = []
    for arm, cols in zip(run.arms, at_levels, strict=True):
        cols = cols.select(np.isin(cols.round, rounds))
        cols = dataclasses.replace(cols, level=renumber[cols.level])
        levels = [
            LevelResult.of(j, cfg.sweep.levels[i], *plan[i], summarize_level(cols, j, cfg.slo))
            for j, i in enumerate(kept)
        ]
        arms.append(_cut_arm(arm, cols, levels, rounds, per_round, note))
    return run.model_copy(update={"config": new_cfg, "arms": arms, "notes": [*run.notes, note]})
