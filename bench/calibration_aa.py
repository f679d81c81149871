"""Calibration of the A/B verdicts: false-flag rate and power per design, by seeded simulation.

    python -m bench.calibration_aa --out bench/results/calibration-aa.json

Every trial is one synthetic run (``analysis.calibration.simulate``): a schedule of Poisson arrivals
replayed by a baseline, a candidate and (for designs with one) an A/A control, with three levels of
noise sized to the H200 measurements: requests that differ from each other (the same in every arm),
a small within-engine jitter, and a log-normal offset per engine instance (SD 1.3% on latencies, 1%
on throughput). The arms go through ``analysis.verdicts.compare_arms``, the code ``analyse_run`` and
``moeperf report`` use. A/A trials (candidate identical to the baseline) measure the family-wise
false-flag rate, which must stay at or under alpha (5%); trials with a planted change measure power.
The rule used before engine-instance noise entered the verdicts is scored on the same A/A runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from analysis.calibration import Design, Effect, NoiseModel, Tally, designs, false_flag_rate, power, simulate
from analysis.verdicts import AnalysisSettings

FALSE_FLAG_DESIGNS = ("1r", "1r+aa", "2r", "4r", "4r+aa", "6r+aa", "p4r+aa")
"""'1r': one round, no control (the design of the measured H200 A/A run); '+aa': with an A/A control of the
baseline; 'Nr': interleaved, N rounds (a fresh engine per arm and round); 'p': parallel placement."""
POWER_DESIGNS = ("4r+aa", "6r+aa", "8r+aa")
EFFECTS = {
    "throughput +3%": (Effect(rate_scale=1.03), "output_tokens_per_s", "improved"),
    "TPOT +5%": (Effect(tpot_scale=1.05), "tpot_s_p50", "regressed"),
}
SENSITIVITY = {
    "within-engine jitter x13 (sigma 0.02)": {"within_sigma": 0.02},
    "engine-instance SD doubled (2.6% latency, 2% throughput)": {"engine_latency_sd": 0.026, "engine_rate_sd": 0.02},
}
H200_REFERENCE = {
    "what": "measured A/A (baseline vs its control on its own engine), one round, 400 requests, TTFT p90",
    "ratio": 0.987,
    "ci_within_engine": [0.982, 0.991],
    "level": "family-wise (Bonferroni over 14 metrics)",
}


def _chunks(trials: int, jobs: int) -> list[tuple[int, int]]:
    """(first seed, count) per task: seeds 0..trials-1 whatever the number of jobs, so results do not depend on it."""
    size = max(1, -(-trials // (4 * jobs)))
    return [(s, min(size, trials - s)) for s in range(0, trials, size)]


def _ff_task(args: tuple[Design, NoiseModel, int, int, AnalysisSettings]) -> tuple[int, int, list[str]]:
    design, noise, seed0, n, settings = args
    r = false_flag_rate(design, noise, n, settings, seed0)
    return r.tally.hits, r.legacy.hits, r.verdicts


def _power_task(args: tuple[Design, NoiseModel, Effect, str, str, int, int, AnalysisSettings]) -> tuple[int, int]:
    design, noise, effect, metric, direction, seed0, n, settings = args
    hits, wrong = power(design, noise, effect, metric, direction, n, settings, seed0)  # type: ignore[arg-type]
    return hits.hits, wrong.hits


def _rate(t: Tally) -> dict[str, Any]:
    lo, hi = t.interval()
    return {"trials": t.trials, "hits": t.hits, "rate": round(t.rate, 4), "ci95": [round(lo, 4), round(hi, 4)]}


def within_engine_halfwidth(noise: NoiseModel, settings: AnalysisSettings, runs: int = 20) -> dict[str, float]:
    """Median family-level half-width of the within-engine B/A interval in one-round runs without engine
    offsets: what the noise model's within-engine noise looks like next to the H200's."""
    quiet = NoiseModel(**{**noise.as_dict(), "engine_latency_sd": 0.0, "engine_rate_sd": 0.0})
    widths: dict[str, list[float]] = {}
    for seed in range(runs):
        ab, _ = simulate(Design("1r"), quiet, Effect(), 10_000 + seed, settings)
        for key in ("ttft_s_p50", "ttft_s_p90", "tpot_s_p50", "e2e_s_p90", "output_tokens_per_s"):
            ci = ab.metric(key).ci_within_engine
            if ci is not None:
                widths.setdefault(key, []).append((ci[1] - ci[0]) / 2)
    return {k: round(float(np.median(v)), 5) for k, v in widths.items()}


def run(
    trials: int, power_trials: int, sensitivity_trials: int, settings: AnalysisSettings, noise: NoiseModel, jobs: int
) -> dict[str, Any]:
    started = time.time()
    pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    mapper: Callable[..., Any] = pool.map if pool is not None else map

    def false_flags(design: Design, model: NoiseModel, n: int) -> dict[str, Any]:
        t0 = time.time()
        parts = list(mapper(_ff_task, [(design, model, s, c, settings) for s, c in _chunks(n, jobs)]))
        now = Tally(n, sum(p[0] for p in parts))
        old = Tally(n, sum(p[1] for p in parts))
        seen = sorted({v for p in parts for v in p[2]})
        return {
            "design": design.name,
            **{k: v for k, v in asdict(design).items() if k != "name"},
            "false_flag": _rate(now),
            # The old rule had a between-round term of its own; it is reproduced for one-round designs only.
            "old_rule_false_flag": _rate(old) if design.rounds == 1 else None,
            "verdicts_seen": seen,
            "at_or_under_alpha": now.rate <= settings.alpha,
            "seconds": round(time.time() - t0, 1),
        }

    def progress(what: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {what}", file=sys.stderr, flush=True)

    try:
        ff = []
        for d in designs(FALSE_FLAG_DESIGNS):
            progress(f"false flags: {d.name}, {trials} A/A runs")
            ff.append(false_flags(d, noise, trials))
        pw = []
        for d in designs(POWER_DESIGNS):
            for label, (effect, metric, direction) in EFFECTS.items():
                progress(f"power: {d.name}, {label}, {power_trials} runs")
                t0 = time.time()
                tasks = [(d, noise, effect, metric, direction, s, c, settings) for s, c in _chunks(power_trials, jobs)]
                parts = list(mapper(_power_task, tasks))
                hits, wrong = (
                    Tally(power_trials, sum(p[0] for p in parts)),
                    Tally(power_trials, sum(p[1] for p in parts)),
                )
                pw.append({
                    "design": d.name, **{k: v for k, v in asdict(d).items() if k != "name"}, "effect": label,
                    "effect_scales": asdict(effect), "metric": metric, "verdict_counted": direction,
                    "power": _rate(hits), "wrong_direction_any_metric": _rate(wrong),
                    "seconds": round(time.time() - t0, 1),
                })  # fmt: skip
        sens = []
        for label, change in SENSITIVITY.items():
            progress(f"sensitivity: {label}, {sensitivity_trials} A/A runs")
            model = NoiseModel(**{**noise.as_dict(), **change})
            sens.append(
                {"noise": label, "changed": change, **false_flags(designs(["4r+aa"])[0], model, sensitivity_trials)}
            )
    finally:
        if pool is not None:
            pool.shutdown()
    useful = [p for p in pw if p["power"]["rate"] >= 0.8]
    by_design: dict[str, list[str]] = {}
    for p in useful:
        by_design.setdefault(p["design"], []).append(p["effect"])
    reaches = [d for d, effs in by_design.items() if len(effs) == len(EFFECTS)]
    return {
        "false_flag_rate": ff,
        "power": pw,
        "sensitivity": sens,
        "within_engine_ci_halfwidth_family_level": within_engine_halfwidth(noise, settings),
        "h200_reference": H200_REFERENCE,
        "summary": {
            "max_false_flag_rate": max(f["false_flag"]["rate"] for f in ff + sens),
            "all_at_or_under_alpha": all(f["at_or_under_alpha"] for f in ff + sens),
            "first_design_with_power_0.8_for_every_effect": reaches[0] if reaches else None,
        },
        "runtime_s": round(time.time() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibration_aa", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write, e.g. bench/results/calibration-aa.json.")
    p.add_argument("--trials", type=int, default=1000, help="A/A runs per design (false-flag rate).")
    p.add_argument("--power-trials", type=int, default=300, help="Runs per design and planted effect.")
    p.add_argument("--sensitivity-trials", type=int, default=400, help="A/A runs per sensitivity noise model.")
    p.add_argument("--resamples", type=int, default=50, help="Bootstrap resamples per comparison (reports: 1000).")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="Worker processes.")
    ns = p.parse_args(argv)
    settings = AnalysisSettings(bootstrap_resamples=ns.resamples)
    noise = NoiseModel()
    body = run(ns.trials, ns.power_trials, ns.sensitivity_trials, settings, noise, ns.jobs)
    out = {
        "benchmark": "calibration-aa",
        "command": "python -m bench.calibration_aa " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "jobs": ns.jobs},
        "parameters": {
            "noise_model": noise.as_dict(),
            "analysis": settings.model_dump(
                mode="json", include={"alpha", "min_effect", "power", "min_tail_requests", "bootstrap_resamples"}
            ),  # fmt: skip
            "trials_per_design": ns.trials,
            "power_trials": ns.power_trials,
            "sensitivity_trials": ns.sensitivity_trials,
            "arrivals": "Poisson at noise_model.rate_rps; output 8-32 tokens; seeds 0..trials-1 per design",
            "false_flag": "a run whose candidate-vs-baseline comparison has any improved/regressed verdict",
            "old_rule": "within-engine interval (normal, Bonferroni z) plus the A/A discrepancy as a known variance; "
            "rates of one round had no interval; scored on one-round designs only",
        },
        **body,
    }
    path = Path(ns.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    s = out["summary"]
    print(f"wrote {path}: max false-flag rate {s['max_false_flag_rate']:.3f}, "
          f"useful power at {s['first_design_with_power_0.8_for_every_effect']}, {out['runtime_s']} s")  # fmt: skip
    for f in out["false_flag_rate"]:
        legacy = f["old_rule_false_flag"]
        old = f" (old rule {legacy['rate']:.3f})" if legacy else ""
        print(f"  {f['design']:8s} false flags {f['false_flag']['rate']:.3f}{old}")
    for q in out["power"]:
        print(f"  {q['design']:8s} {q['effect']:15s} power {q['power']['rate']:.3f}")
    return 0 if s["all_at_or_under_alpha"] else 1


if __name__ == "__main__":
    sys.exit(main())
