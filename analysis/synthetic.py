"""Synthetic result files with known effects: the ground truth the statistics are tested against.

Latencies are lognormal (the usual shape of serving latencies); an arm's ``scale`` multiplies its
TTFT and time per output token, so ``scale=1.05`` plants a 5% regression. Used by the tests and by
anyone checking what a given run size can detect before paying for GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_opt.flags import OptimizationFlags
from result_format.run_result import ArmResult, RunResult, ScheduleInfo
from workloads.records import RequestRecord


@dataclass(frozen=True)
class SyntheticArm:
    name: str
    ttft_scale: float = 1.0
    tpot_scale: float = 1.0
    control_of: str | None = None
    flags: OptimizationFlags = OptimizationFlags()


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
) -> list[RequestRecord]:
    """``n_requests`` per round at 10 req/s. Output lengths come from ``schedule_seed``, so arms built
    with the same one replay the same requests, as real arms do; latencies come from ``rng``."""
    lengths = np.random.default_rng(schedule_seed).integers(8, 33, n_requests)
    out = []
    for rnd in range(rounds):
        for i in range(n_requests):
            send = i * 0.1
            ttft = float(rng.lognormal(np.log(ttft_median_s), sigma)) * ttft_scale
            tpot = float(rng.lognormal(np.log(tpot_median_s), sigma)) * tpot_scale
            n_out = int(lengths[i])
            first = send + ttft
            times = [first + k * tpot for k in range(n_out)]
            out.append(
                RequestRecord(
                    index=i,
                    arm=arm,
                    round=rnd,
                    intended_send_s=send,
                    actual_send_s=send,
                    first_token_s=first,
                    token_times_s=times,
                    end_s=times[-1],
                    prompt_tokens_requested=64,
                    output_tokens_requested=n_out,
                    prompt_tokens=64,
                    output_tokens=n_out,
                )
            )
    return out


def synthetic_run(
    run_id: str,
    started_at: str,
    arms: list[SyntheticArm],
    n_requests: int = 200,
    seed: int = 0,
    rounds: int = 1,
    experiment: str = "nightly",
    status: str = "ok",
) -> RunResult:
    rng = np.random.default_rng(seed)
    arm_results = []
    for a in arms:
        records = synthetic_records(a.name, n_requests, rng, a.ttft_scale, a.tpot_scale, rounds, schedule_seed=seed)
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
        config={"name": experiment},
        environment={"synthetic": True, "seed": seed},
        schedule=ScheduleInfo(requests=n_requests, duration_s=n_requests * 0.1, clipped_input=0, clipped_output=0),
        arms=arm_results,
    )
