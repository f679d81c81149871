"""Synthetic sweep runs with a known truth: what the sweep analysis is tested against.

Every level is its own replay (clock from 0) of its own schedule: evenly spaced sends at the level's
rate, 8-32 output tokens, a per-request size factor shared by every arm (``request_sigma``) and a
jitter of its own on each engine (``sigma``). Throughput rises with the level's rate and TPOT with
its load, so the levels trace a throughput-interactivity trade-off. An arm's ``rate_scale`` shrinks
every level's time axis (the engine delivers that many times the tokens per second at the same
latency); its latency scales multiply TTFT and TPOT. Each engine (one per arm and round when
interleaved, one per arm when parallel) has a log-normal offset on rate and latencies, the same at
every level it serves.

A level's warm-up share is planted 5x slower, so any analysis that measured it would be visibly off.
``ttft_miss_share`` plants exactly that share of a level's measured requests (in every arm and round)
at 1.5x the SLO's TTFT limit, so the level's SLO attainment is known exactly. The default SLO's TTFT
limit is 0.5 s (TTFT is about 50 ms here), so a planted miss ends well inside its level's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis.design import Placement
from analysis.synthetic import EngineOffset, draw_offset, timed_records
from experiment.config import ArmSpec, EngineSpec, ExperimentConfig
from experiment.slo import SloSpec
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, LevelResult, RunResult, ScheduleInfo
from workloads.levels import ConcurrencyLevel
from workloads.metrics import summarize
from workloads.records import RequestRecord
from workloads.sweep import SweepSpec

WARMUP_SLOWDOWN = 5.0


@dataclass(frozen=True)
class SweepLevelTruth:
    concurrency: int
    rate_rps: float
    tpot_median_s: float
    ttft_median_s: float = 0.05
    ttft_miss_share: float = 0.0


@dataclass(frozen=True)
class SweepArmTruth:
    name: str
    rate_scale: float = 1.0
    tpot_scale: float = 1.0
    ttft_scale: float = 1.0
    control_of: str | None = None
    flags: OptimizationFlags = field(default_factory=OptimizationFlags)


DEFAULT_LEVELS = (
    SweepLevelTruth(1, 2.0, 0.010),
    SweepLevelTruth(2, 4.0, 0.014),
    SweepLevelTruth(4, 8.0, 0.020),
    SweepLevelTruth(8, 16.0, 0.028),
)


@dataclass(frozen=True)
class _LevelSchedule:
    send_s: np.ndarray
    tokens: np.ndarray
    ttft_factor: np.ndarray
    tpot_factor: np.ndarray
    misses: np.ndarray  # bool: planted beyond the TTFT limit


def _schedule(
    truth: SweepLevelTruth, level: int, n: int, warmup: int, seed: int, request_sigma: float
) -> _LevelSchedule:
    rng = np.random.default_rng([seed, level])
    tokens = rng.integers(8, 33, n)
    f_ttft, f_tpot = np.exp(rng.normal(0.0, request_sigma, (2, n)))
    measured = n - warmup
    k = int(round(truth.ttft_miss_share * measured))
    misses = np.zeros(n, dtype=bool)
    if k:
        # In the first half of the measured requests, so a planted slow request never ends the window.
        misses[rng.choice(np.arange(warmup, warmup + max(k, measured // 2)), k, replace=False)] = True
    return _LevelSchedule(np.arange(n) / truth.rate_rps, tokens, f_ttft, f_tpot, misses)


def _level_records(
    arm: SweepArmTruth,
    level: int,
    truth: SweepLevelTruth,
    sched: _LevelSchedule,
    warmup: int,
    rnd: int,
    off: EngineOffset,
    rng: np.random.Generator,
    sigma: float,
    slo: SloSpec,
) -> list[RequestRecord]:
    n = sched.send_s.size
    send = sched.send_s / (arm.rate_scale * off.rate)
    slow = np.where(np.arange(n) < warmup, WARMUP_SLOWDOWN, 1.0)
    ttft = truth.ttft_median_s * sched.ttft_factor * rng.lognormal(0.0, sigma, n) * arm.ttft_scale * off.ttft * slow
    tpot = truth.tpot_median_s * sched.tpot_factor * rng.lognormal(0.0, sigma, n) * arm.tpot_scale * off.tpot * slow
    if slo.ttft_s is not None:
        ttft = np.where(sched.misses, 1.5 * slo.ttft_s, ttft)
    return timed_records(arm.name, rnd, send, ttft, tpot, sched.tokens, level=level, warmup=warmup)


def synthetic_sweep_run(
    run_id: str,
    arms: Sequence[SweepArmTruth],
    levels: Sequence[SweepLevelTruth] = DEFAULT_LEVELS,
    requests_per_level: int = 120,
    warmup_per_level: int = 12,
    rounds: int = 2,
    seed: int = 0,
    placement: Placement = "interleaved",
    tensor_parallel_size: int = 1,
    engine_sd: float = 0.003,
    engine_rate_sd: float = 0.003,
    sigma: float = 0.01,
    request_sigma: float = 0.3,
    slo: SloSpec | None = None,
    started_at: str = "2026-11-01T02:00:00+00:00",
) -> RunResult:
    """A sweep result: ``requests_per_level`` measured requests (after ``warmup_per_level`` warm-up ones) per
    arm, level and round; every arm replays the same schedules (from ``seed``), latencies from ``seed`` too."""
    slo = slo or SloSpec(ttft_s=0.5)
    n = requests_per_level + warmup_per_level
    rng = np.random.default_rng(seed + 1)
    schedules = [_schedule(t, i, n, warmup_per_level, seed, request_sigma) for i, t in enumerate(levels)]
    sweep = SweepSpec(
        levels=[ConcurrencyLevel(concurrency=t.concurrency, requests=n) for t in levels],
        warmup_fraction=warmup_per_level / n,
    )
    arm_results = []
    for a in arms:
        if placement == "parallel":
            offsets = [draw_offset(rng, engine_sd, engine_rate_sd)] * rounds
        else:
            offsets = [draw_offset(rng, engine_sd, engine_rate_sd) for _ in range(rounds)]
        records: list[RequestRecord] = []
        level_results = []
        for i, (truth, sched) in enumerate(zip(levels, schedules, strict=True)):
            mine: list[RequestRecord] = []
            for rnd, off in enumerate(offsets):
                mine += _level_records(a, i, truth, sched, warmup_per_level, rnd, off, rng, sigma, slo)
            records += mine
            lv = sweep.levels[i]
            summary = summarize([r for r in mine if not r.warmup], slo)
            level_results.append(LevelResult.of(i, lv, n, warmup_per_level, summary))
        total = n * len(levels) * rounds
        arm_results.append(
            ArmResult(
                name=a.name,
                control_of=a.control_of,
                flags=a.flags,
                flags_applied=True,
                status="ok",
                requests_planned=total,
                requests_sent=total,
                requests_succeeded=total,
                requests_failed=0,
                requests_not_sent=0,
                rounds=rounds,
                records_file=f"records/{a.name}.jsonl",
                levels=level_results,
                records=records,
            )
        )
    config = ExperimentConfig(
        name="sweep",
        placement=placement,
        rounds=rounds,
        engine=EngineSpec(tensor_parallel_size=tensor_parallel_size, enforce_eager=True, cache_state="cold_per_arm"),
        arms=[ArmSpec(name=a.name, control_of=a.control_of, flags=a.flags) for a in arms],
        sweep=sweep,
        slo=slo,
    )
    return RunResult(
        run_id=run_id,
        experiment="sweep",
        status="ok",
        started_at=started_at,
        finished_at=started_at,
        command=["synthetic"],
        config=config,
        environment={"synthetic": True, "seed": seed},
        schedule=ScheduleInfo(
            requests=n * len(levels),
            duration_s=float(sum(s.send_s[-1] for s in schedules)),
            clipped_input=0,
            clipped_output=0,
        ),  # fmt: skip
        arms=arm_results,
    )
