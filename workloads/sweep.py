"""A load sweep: the levels every arm runs, each a separate replay of the workload at one load.

Planned before any engine starts, like the schedule: every arm gets byte-for-byte the same levels.
One engine per arm and round serves every level in turn: in the listed order in even rounds and in
reverse in odd rounds (so a drift over the engine's life does not line up with the load), draining
to idle between levels. Each level has prompts of its own (``level_prompt_seed``), so the engine's
prefix cache cannot carry one level's prompts into another: a level sees only the sharing its own
requests have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import Field, model_validator

from common.strict import FrozenStrictModel
from workloads.arrivals.closed_loop import ClosedLoopArrivalSpec
from workloads.levels import AnyLoadLevel, LoadLevel
from workloads.schedule_columns import ScheduleColumns
from workloads.traces import TraceFormatError
from workloads.workload import Schedule, WorkloadSpec, build_schedule


class SweepSpec(FrozenStrictModel):
    levels: list[LoadLevel] = Field(
        min_length=1,
        description="The load levels (by `kind`: concurrency, rate, trace_speed), all of one kind, run in this "
        "order (reversed on odd rounds) on the same engine.",
    )
    warmup_fraction: float = Field(
        0.1, ge=0, lt=1, description="Default share of each level's first requests sent but not measured."
    )
    drain_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Wait at most this long for the engine to have no request running or waiting "
        "between levels; an engine that does not drain fails its arm.",
    )
    capacity_attainment: float = Field(
        0.9,
        gt=0,
        le=1,
        description="A level meets the SLO when at least this share of its measured requests succeed within "
        "every `slo` limit; capacity is the highest load that does (interpolated between levels).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SweepSpec:
        kinds = sorted({lv.kind for lv in self.levels})
        if len(kinds) > 1:
            raise ValueError(f"levels: one kind per sweep (one load axis), found {kinds}")
        labels = [lv.label() for lv in self.levels]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"levels: two levels named {dupes}; give them distinct loads or names")
        return self

    @property
    def load_unit(self) -> str:
        return self.levels[0].load_unit

    def order(self, round_index: int) -> list[int]:
        """Level positions in the order a round runs them: as listed, reversed on odd rounds."""
        idx = list(range(len(self.levels)))
        return idx if round_index % 2 == 0 else idx[::-1]


@dataclass(frozen=True)
class LevelPlan:
    """One replay of a round: the requests of one level (or of the whole workload when there is no sweep)."""

    index: int | None  # position in sweep.levels; None: no sweep
    label: str
    requests: ScheduleColumns
    schedule: Schedule | None = None  # what building it clipped and skipped (a sweep level's own schedule)

    @property
    def warmup_requests(self) -> int:
        return int(self.requests.warmup.sum())


def level_workload(level: AnyLoadLevel, workload: WorkloadSpec) -> WorkloadSpec:
    """The workload a level replays: the level's arrivals, clock and request count; the workload's lengths."""
    update: dict[str, object] = {
        "arrival": level.arrival(),
        "speedup": level.replay_speedup(),
        "first_requests": level.request_count(),
    }
    if (end := level.window_end_s()) is not None:
        update["window_end_s"] = (workload.window_start_s or 0.0) + end
    return workload.model_copy(update=update)


def level_prompt_seed(seed: int, round_index: int, level: int | None) -> int:
    """The prompt seed of one level of one round: the same in every arm, different for every other level and
    round, so no prompt (nor shared block) of one can be a cached prefix in the next. That is how rounds and
    levels are isolated on an engine that serves several: its prefix cache is never reset (that would need
    vLLM's unauthenticated development routes). Round 0 of a run without a sweep keeps the workload's seed."""
    slot = 0 if level is None else 1 + level
    return seed + 0x9E3779B1 * (slot + 4096 * round_index)


def plan_level(
    level: AnyLoadLevel, index: int, sweep: SweepSpec, workload: WorkloadSpec, base_dir: Path | None
) -> LevelPlan:
    """One level's requests, its warm-up share marked; raises TraceFormatError naming the level."""
    where = f"sweep.levels.{index}"
    try:
        schedule = build_schedule(level_workload(level, workload), base_dir)
    except TraceFormatError as e:
        raise TraceFormatError(where, str(e)) from None
    wanted = level.request_count()
    if wanted is not None and len(schedule.requests) < wanted:
        raise TraceFormatError(
            where,
            f"asks for {wanted} requests but the workload has only {len(schedule.requests)}; lower the level's "
            "requests/duration_s or give the workload more (e.g. workload.trace.num_requests)",
        )
    k = level.warmup_count(len(schedule.requests), sweep.warmup_fraction)
    requests = schedule.requests.with_warmup(schedule.requests.warmup | (schedule.requests.index < k))
    return LevelPlan(index=index, label=level.label(), requests=requests, schedule=schedule)


def plan_levels(sweep: SweepSpec, workload: WorkloadSpec, base_dir: Path | None) -> list[LevelPlan]:
    """The replays of one round of a sweep, in listed order."""
    return [plan_level(lv, i, sweep, workload, base_dir) for i, lv in enumerate(sweep.levels)]


def sweep_schedule(levels: list[LevelPlan]) -> Schedule:
    """One schedule standing for a sweep's levels (stored as schedule.parquet): every level's requests in sweep
    order, each request's ``index`` its position in its level, and what the levels clipped and skipped, summed."""
    skipped: dict[str, int] = {}
    for lv in levels:
        for k, v in (lv.schedule.skipped if lv.schedule else {}).items():
            skipped[k] = skipped.get(k, 0) + v
    return Schedule(
        requests=ScheduleColumns.concat([lv.requests for lv in levels]),
        clipped_input=sum(lv.schedule.clipped_input for lv in levels if lv.schedule),
        clipped_output=sum(lv.schedule.clipped_output for lv in levels if lv.schedule),
        clipped_context=sum(lv.schedule.clipped_context for lv in levels if lv.schedule),
        skipped=skipped,
    )


def warmup_pass_levels(
    levels: list[LevelPlan], sweep: SweepSpec | None, workload: WorkloadSpec, fraction: float
) -> list[LevelPlan]:
    """The replays of a shared_warm warm-up pass: the first ``fraction`` of each level's requests.

    The pass exists to compile every kernel the measured arms will need. Those kernels depend on the batch
    shapes a level produces, not on how long it runs. So a prefix is enough, as long as it reaches the
    replay's closed-loop concurrency (a sweep level's, or the workload's without a sweep). A full pass per
    setting made a 48-layer hold on one H200 (2026-12-03) spend 8 of its 30 minutes before the first
    measured arm.
    """
    if fraction >= 1.0:
        return levels
    out = []
    for lv in levels:
        n = len(lv.requests)
        arrival = sweep.levels[lv.index].arrival() if sweep is not None and lv.index is not None else workload.arrival
        floor = arrival.concurrency if isinstance(arrival, ClosedLoopArrivalSpec) else 1
        out.append(replace(lv, requests=lv.requests[: min(n, max(math.ceil(fraction * n), floor))]))
    return out
