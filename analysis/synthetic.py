"""Synthetic runs with known effects and known noise: the ground truth the statistics are tested against.

Latencies are lognormal (the usual shape of serving latencies). Three levels of noise, as a real
run has them:

* request: each request of the schedule has its own size (``request_sigma``), the same in every
  arm and round because every arm replays the same schedule;
* within engine: a request's own jitter on one engine (``sigma``), independent between arms;
* engine instance: a multiplicative offset per engine (``EngineOffset``), one per arm and round when
  every round starts fresh engines (interleaved), one per arm for all rounds when they stay up
  (parallel). On an H200 an SD of about 1.3% on latencies and 1% on throughput is normal.

An arm's ``ttft_scale`` / ``tpot_scale`` multiply its latencies (``tpot_scale=1.05`` plants a 5%
regression); ``rate_scale`` (and the engine's rate offset) shrinks the replay's time axis, as an
engine that paces a saturated replay would: the span shrinks and every rate grows by that factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.samples import ArmSamples, from_arrays
from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, RunResult, ScheduleInfo
from workloads.record_columns import NO_INT, RecordColumns
from workloads.records import RequestRecord


@dataclass(frozen=True)
class EngineOffset:
    """Multiplicative offsets of one engine instance against the ideal engine of its settings."""

    ttft: float = 1.0
    tpot: float = 1.0
    rate: float = 1.0


def draw_offset(rng: np.random.Generator, latency_sd: float, rate_sd: float) -> EngineOffset:
    """Log-normal offsets: TTFT and TPOT independent (sd ``latency_sd``), rate sd ``rate_sd``."""
    ttft, tpot, rate = np.exp(rng.normal(0.0, [latency_sd, latency_sd, rate_sd]))
    return EngineOffset(float(ttft), float(tpot), float(rate))


@dataclass(frozen=True)
class Schedule:
    """What every arm replays: send times, output lengths and each request's own latency factors."""

    send_s: np.ndarray
    output_tokens: np.ndarray
    ttft_factor: np.ndarray
    tpot_factor: np.ndarray


def make_schedule(
    n_requests: int, schedule_seed: int, request_sigma: float = 0.0, rate_rps: float = 10.0, poisson: bool = False
) -> Schedule:
    """``n_requests`` at ``rate_rps`` (evenly spaced, or Poisson arrivals); lengths 8-32 tokens."""
    rng = np.random.default_rng(schedule_seed)
    lengths = rng.integers(8, 33, n_requests)
    if poisson:
        send = np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate_rps, n_requests - 1))))
    else:
        send = np.arange(n_requests) / rate_rps
    f_ttft = np.exp(rng.normal(0.0, request_sigma, n_requests)) if request_sigma > 0 else np.ones(n_requests)
    f_tpot = np.exp(rng.normal(0.0, request_sigma, n_requests)) if request_sigma > 0 else np.ones(n_requests)
    return Schedule(send, lengths, f_ttft, f_tpot)


def _round_arrays(
    schedule: Schedule,
    rng: np.random.Generator,
    offset: EngineOffset,
    ttft_scale: float,
    tpot_scale: float,
    rate_scale: float,
    ttft_median_s: float,
    tpot_median_s: float,
    sigma: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send, ttft, tpot) of one round on one engine."""
    n = schedule.send_s.size
    ttft = ttft_median_s * schedule.ttft_factor * rng.lognormal(0.0, sigma, n) * ttft_scale * offset.ttft
    tpot = tpot_median_s * schedule.tpot_factor * rng.lognormal(0.0, sigma, n) * tpot_scale * offset.tpot
    return schedule.send_s / (rate_scale * offset.rate), ttft, tpot


def synthetic_samples(
    name: str,
    schedule: Schedule,
    rng: np.random.Generator,
    offsets: Sequence[EngineOffset],
    ttft_scale: float = 1.0,
    tpot_scale: float = 1.0,
    rate_scale: float = 1.0,
    ttft_median_s: float = 0.05,
    tpot_median_s: float = 0.01,
    sigma: float = 0.25,
) -> ArmSamples:
    """One arm's samples straight from arrays (no records): one round per entry of ``offsets``."""
    parts = [
        _round_arrays(schedule, rng, off, ttft_scale, tpot_scale, rate_scale, ttft_median_s, tpot_median_s, sigma)
        for off in offsets
    ]
    r = len(parts)
    n = schedule.send_s.size
    return from_arrays(
        name,
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
        np.tile(schedule.output_tokens, r),
        np.concatenate([p[0] for p in parts]),
        rounds=np.repeat(np.arange(r), n),
        slots=np.tile(np.arange(n), r),
    )


def synthetic_records(
    arm: str,
    n_requests: int,
    rng: np.random.Generator,
    ttft_scale: float = 1.0,
    tpot_scale: float = 1.0,
    rounds: int = 1,
    ttft_median_s: float = 0.05,
    tpot_median_s: float = 0.01,
    sigma: float = 0.25,
    schedule_seed: int = 0,
    request_sigma: float = 0.0,
    offsets: Sequence[EngineOffset] | None = None,
    rate_scale: float = 1.0,
    poisson: bool = False,
) -> list[RequestRecord]:
    """``n_requests`` per round at 10 req/s. The schedule (lengths, send times, request factors) comes
    from ``schedule_seed``, so arms built with the same one replay the same requests, as real arms do;
    latencies come from ``rng``. ``offsets``: one engine offset per round (default none)."""
    schedule = make_schedule(n_requests, schedule_seed, request_sigma, poisson=poisson)
    offs = list(offsets) if offsets is not None else [EngineOffset()] * rounds
    out = []
    for rnd, off in enumerate(offs):
        send, ttft, tpot = _round_arrays(
            schedule, rng, off, ttft_scale, tpot_scale, rate_scale, ttft_median_s, tpot_median_s, sigma
        )
        out += timed_records(arm, rnd, send, ttft, tpot, schedule.output_tokens)
    return out


def timed_records(
    arm: str,
    rnd: int,
    send: np.ndarray,
    ttft: np.ndarray,
    tpot: np.ndarray,
    output_tokens: np.ndarray,
    level: int | None = None,
    warmup: int = 0,
) -> list[RequestRecord]:
    """One round's records (64-token prompts, sent on time) from per-request send time, TTFT, TPOT and output
    length, tokens evenly spaced; the first ``warmup`` of them are the level's warm-up share."""
    return timed_columns(arm, rnd, send, ttft, tpot, output_tokens, level, warmup).to_records()


def timed_columns(
    arm: str,
    rnd: int,
    send: np.ndarray,
    ttft: np.ndarray,
    tpot: np.ndarray,
    output_tokens: np.ndarray,
    level: int | None = None,
    warmup: int = 0,
) -> RecordColumns:
    """``timed_records`` as columns, built without one object per request: what a million-request arm takes."""
    n = send.size
    counts = output_tokens.astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    owner = np.repeat(np.arange(n), counts)
    step = np.arange(int(offsets[-1])) - offsets[owner]
    first = send + ttft
    times = first[owner] + step * tpot[owner]
    ints = np.arange(n, dtype=np.int64)
    cols: dict[str, object] = {
        "index": ints,
        "round": np.full(n, rnd),
        "client": np.zeros(n, dtype=np.int64),
        "level": np.full(n, NO_INT if level is None else level),
        "prompt_tokens_requested": np.full(n, 64),
        "output_tokens_requested": counts,
        "prompt_tokens": np.full(n, 64),
        "output_tokens": counts,
        "http_status": np.full(n, NO_INT),
        "intended_send_s": send,
        "actual_send_s": send,
        "cap_wait_s": np.zeros(n),
        "first_token_s": first,
        "end_s": times[offsets[1:] - 1],
        "warmup": ints < warmup,
        "tokens_exact": np.ones(n, dtype=bool),
        "arm": [arm] * n,
        "error_kind": [None] * n,
        "error": [None] * n,
    }
    return RecordColumns.from_arrays(cols, times, offsets)


@dataclass(frozen=True)
class SyntheticArm:
    name: str
    ttft_scale: float = 1.0
    tpot_scale: float = 1.0
    control_of: str | None = None
    flags: OptimizationFlags = OptimizationFlags()
    rate_scale: float = 1.0
    compiles_in_window: int | None = None


def synthetic_run(
    run_id: str,
    started_at: str,
    arms: list[SyntheticArm],
    n_requests: int = 200,
    seed: int = 0,
    rounds: int = 1,
    experiment: str = "nightly",
    status: str = "ok",
    placement: str = "interleaved",
    engine_sd: float = 0.0,
    engine_rate_sd: float = 0.0,
    request_sigma: float = 0.0,
    sigma: float = 0.25,
) -> RunResult:
    """A result file; with ``engine_sd`` > 0 every engine instance gets its own log-normal offset (per arm
    and round when interleaved, per arm when parallel)."""
    rng = np.random.default_rng(seed)
    arm_results = []
    for a in arms:
        if placement == "parallel":
            one = draw_offset(rng, engine_sd, engine_rate_sd)
            offsets = [one] * rounds
        else:
            offsets = [draw_offset(rng, engine_sd, engine_rate_sd) for _ in range(rounds)]
        records = synthetic_records(
            a.name,
            n_requests,
            rng,
            a.ttft_scale,
            a.tpot_scale,
            rounds,
            sigma=sigma,
            schedule_seed=seed,
            request_sigma=request_sigma,
            offsets=offsets,
            rate_scale=a.rate_scale,
        )
        failed = status != "ok" and a is arms[-1]
        arm_results.append(
            ArmResult(
                name=a.name,
                control_of=a.control_of,
                flags=a.flags,
                flags_applied=True,
                status="failed" if failed else "ok",
                failure_reason="engine died (synthetic)" if failed else None,
                requests_planned=n_requests * rounds,
                requests_sent=n_requests * rounds,
                requests_succeeded=0 if failed else n_requests * rounds,
                requests_failed=n_requests * rounds if failed else 0,
                requests_not_sent=0,
                rounds=rounds,
                triton_compiles_in_window=a.compiles_in_window,
                records_file=f"records/{a.name}.jsonl",
                records=[] if failed else records,
            )
        )
    return RunResult(
        run_id=run_id,
        experiment=experiment,
        status="failed" if status != "ok" else "ok",
        started_at=started_at,
        finished_at=started_at,
        command=["synthetic"],
        config={"name": experiment, "placement": placement, "rounds": rounds},
        environment={"synthetic": True, "seed": seed},
        schedule=ScheduleInfo(requests=n_requests, duration_s=n_requests * 0.1, clipped_input=0, clipped_output=0),
        arms=arm_results,
    )
