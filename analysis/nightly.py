"""The nightly regression gate: tonight's run against the median of the last N nights.

A metric of an arm is *flagged* tonight when log(tonight / baseline) is on the worse side of zero by
more than z standard errors, where the error combines tonight's own bootstrap error (over requests
and rounds) with the night-to-night spread of the baseline nights (robust: 1.4826 x MAD of their
logs). z is Bonferroni-corrected over every (arm, metric) checked. Tonight's requests are the
ones the report judges: both take them from ``analysis.steady_state.judged_arms`` with the same
rule (MSER-5 warm-up cut by default), so the gate and the report can never judge different
requests of the same night. As in PyTorch's HUD, a flag
becomes a *regression* only when the same arm and metric were flagged on K consecutive nights,
each judged against its own preceding nights: one noisy night never fails the build.

A sweep night is gated per (arm, level): every level's measured requests (its warm-up share
excluded, no steady-state cut) against the same level of earlier nights, levels matched by label
(nights whose sweep differs are not compared at all: ``sweep`` is part of the comparable config),
plus one check per arm on its capacity at the SLO (higher is better), tonight's against the median
of the history nights', its error from tonight's capacity bootstrap interval and the night-to-night
spread combined as for every other check. A capacity the sweep does not bracket (every level meets
the SLO, or none does) is reported and never flagged. Every check, capacity included, is one member
of the night's Bonferroni family.

Past nights are judged from their summaries only (``analysis.night_summary``: values, within-night
errors, capacities and capped per-request series, made once when the night was judged), never from
their records: the night-to-night comparison costs the same whatever the nights' size, and nights
stored since request records moved out of ``result.json`` can still be judged.

Exit codes: 1 regression, 0 otherwise (also with too little history), 2 the run itself failed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from analysis import stats
from analysis.night_summary import LEVEL_SEP, ArmCapacitySummary, NightSummary, summarise_night
from analysis.night_summary import gated_view as gated_view
from analysis.steady_state import SteadyStateRule
from analysis.sweep import CI_LEVEL, ArmCapacity
from analysis.verdicts import AnalysisSettings, RunAnalysis, analyse_run
from common.strict import StrictModel
from experiment.config import ExperimentConfig
from experiment.slo import SloSpec
from result_format.run_result import RunResult

EXIT_OK, EXIT_REGRESSION, EXIT_RUN_FAILED = 0, 1, 2
MAD_TO_SD = 1.4826


class NightlyPolicy(StrictModel):
    baseline_nights: int = Field(7, ge=1, description="N: the baseline is the median of the last N ok nights.")
    min_history_nights: int = Field(3, ge=2, description="Fewer ok nights than this: no verdict (exit 0).")
    consecutive_nights: int = Field(2, ge=1, description="K: nights in a row a flag must hold to fail.")
    alpha: float = Field(0.05, gt=0, lt=1, description="Family-wise false-flag level of one night.")
    min_effect: float = Field(0.02, ge=0, description="Smallest relative change vs baseline that can flag.")
    min_tail_requests: int = Field(10, ge=1, description="Gate a p-quantile only with this many requests beyond it.")
    bootstrap_resamples: int = Field(400, ge=50, description="Bootstrap replicates for tonight's error.")
    seed: int = Field(0, description="Seed of every bootstrap.")
    metrics: list[str] | None = Field(
        None,
        description="Metric keys to gate on; null: all of stats.METRICS. A sweep night's capacity is always gated.",
    )
    slo: SloSpec | None = Field(None, description="Goodput SLOs; null: the run's config 'slo'.")
    steady_state: SteadyStateRule | None = Field(
        None,
        description="Warm-up rule, the report's: 'mser5' cuts it by MSER-5 on TTFT, 'none' keeps all; null: the "
        "night's config steady_state, as the report decides it.",
    )


class MetricTrend(StrictModel):
    arm: str
    level: str | None = Field(
        None, description="Label of the sweep level this check is on; null: the whole arm (no sweep, or capacity)."
    )
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    tonight: float | None = Field(description="Tonight's value.")
    requests: int = Field(description="Tonight's requests judged (steady state, the report's).")
    baseline: float | None = Field(description="Median of the baseline nights' values.")
    baseline_nights: int = Field(description="Nights the baseline median is over.")
    ratio: float | None = Field(description="tonight / baseline.")
    ci: tuple[float, float] | None = Field(description="Interval of the ratio at the Bonferroni level.")
    night_to_night_rel: float | None = Field(description="Robust SD of the baseline nights, relative.")
    mann_whitney_p: float | None = Field(
        description="U test of tonight vs the median baseline night on their summaries' series (beyond "
        "night_summary.SERIES_CAP requests, a fixed-seed subsample of each); null for rates."
    )
    flagged: bool = Field(description="Worse than baseline tonight beyond noise and min_effect.")
    consecutive_flagged: int = Field(description="Nights in a row, tonight included, this check was flagged.")
    regression: bool = Field(description="flagged on at least K consecutive nights.")
    note: str | None = Field(None, description="Why the check cannot flag tonight, when it cannot (censored capacity).")

    @property
    def name(self) -> str:
        """Arm, level and metric, for one line: 'B @ c=4 TPOT p50'."""
        return (
            f"{self.arm}{LEVEL_SEP}{self.level} {self.label}" if self.level is not None else f"{self.arm} {self.label}"
        )


class NightlyVerdict(StrictModel):
    status: Literal["regression", "ok", "insufficient_history", "run_failed"]
    exit_code: int = Field(description="1 regression, 0 ok or insufficient history, 2 run failed.")
    reason: str = Field(description="One line a CI log can show.")
    run_id: str | None
    experiment: str | None
    policy: NightlyPolicy
    history_runs: list[str] = Field(description="Run ids of the ok history nights considered, oldest first.")
    checks: list[MetricTrend]
    analysis: RunAnalysis | None = Field(description="Tonight's own A/B verdicts (informative, not gating).")
    warmup_excluded: dict[int, int] = Field(
        default_factory=dict, description="Round -> schedule slots excluded as warm-up tonight (as in the report)."
    )
    notes: list[str] = Field(default_factory=list)

    @property
    def regressions(self) -> list[MetricTrend]:
        return [c for c in self.checks if c.regression]


def run_failed_verdict(reason: str, policy: NightlyPolicy, result: RunResult | None = None) -> NightlyVerdict:
    """Verdict for a night whose run did not complete: exit 2, and nothing compared."""
    return NightlyVerdict(
        status="run_failed",
        exit_code=EXIT_RUN_FAILED,
        reason=reason,
        run_id=result.run_id if result else None,
        experiment=result.experiment if result else None,
        policy=policy,
        history_runs=[],
        checks=[],
        analysis=None,
    )


CAPACITY_KEY = "capacity"


def _metric_indices(policy: NightlyPolicy) -> list[int]:
    if policy.metrics is None:
        return list(range(len(stats.METRICS)))
    unknown = sorted(set(policy.metrics) - set(stats.METRIC_KEYS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {list(stats.METRIC_KEYS)}")
    return [stats.METRIC_KEYS.index(k) for k in policy.metrics]


def _check_night(
    night: NightSummary, previous: list[NightSummary], policy: NightlyPolicy, z: float
) -> dict[tuple[str, str], MetricTrend]:
    """Flags of one night against the median of its own last N previous nights, all from their summaries."""
    window = previous[-policy.baseline_nights :]
    out: dict[tuple[str, str], MetricTrend] = {}
    for tonight in night.gated:
        gated = tonight.name
        past = [(r, g.point_array()) for r in window if (g := r.gated_arm(gated)) is not None]
        point = tonight.point_array()
        # Within-night error (the bootstrap for quantiles, batch means for rates); the engine-to-
        # engine part is in the night-to-night spread, every night having its own engines.
        se_night = tonight.log_se_array()
        for j in _metric_indices(policy):
            spec = stats.METRICS[j]
            logs = np.array([math.log(p[j]) for _, p in past if p[j] > 0 and math.isfinite(p[j])])
            ratio = ci = spread = mw = None
            baseline = None
            flagged = False
            if logs.size >= 1 and point[j] > 0 and math.isfinite(point[j]):
                baseline = float(np.exp(np.median(logs)))
                ratio = point[j] / baseline
            tail_ok = spec.quantile is None or tonight.requests * (1 - spec.quantile / 100) >= policy.min_tail_requests
            if ratio is not None and tail_ok and logs.size >= policy.min_history_nights and math.isfinite(se_night[j]):
                mad_sd = MAD_TO_SD * float(np.median(np.abs(logs - np.median(logs))))
                spread = math.exp(mad_sd) - 1
                se = math.sqrt(se_night[j] ** 2 + mad_sd**2 * (1 + math.pi / (2 * logs.size)))
                lr = math.log(ratio)
                ci = (math.exp(lr - z * se), math.exp(lr + z * se))
                worse = ci[1] < 1 if spec.higher_is_better else ci[0] > 1
                flagged = worse and abs(ratio - 1) >= policy.min_effect
                median_run = min(past, key=lambda rp: abs(math.log(max(rp[1][j], 1e-300)) - float(np.median(logs))))[0]
                ref = median_run.gated_arm(gated)
                if ref is not None:
                    # On the summaries' series: a subsample of either night beyond SERIES_CAP requests.
                    mw = stats.mann_whitney_p(ref.series_array(spec.family), tonight.series_array(spec.family))
            out[(gated, spec.key)] = MetricTrend(
                arm=tonight.arm,
                level=tonight.level,
                metric=spec.key,
                label=spec.label,
                unit=spec.unit,
                higher_is_better=spec.higher_is_better,
                tonight=float(point[j]) if math.isfinite(point[j]) else None,
                requests=tonight.requests,
                baseline=baseline,
                baseline_nights=int(logs.size),
                ratio=ratio,
                ci=ci,
                night_to_night_rel=spread,
                mann_whitney_p=mw,
                flagged=flagged,
                consecutive_flagged=1 if flagged else 0,
                regression=False,
            )
    if night.config.sweep is not None:
        for cap in night.capacities:
            trend = _capacity_check(night, cap, window, policy, z)
            if trend is not None:
                out[(cap.arm, CAPACITY_KEY)] = trend
    return out


def _capacity_of(night: NightSummary, arm: str) -> ArmCapacity | None:
    return next((c.capacity for c in night.capacities if c.arm == arm), None)


def _capacity_check(
    night: NightSummary, arm_cap: ArmCapacitySummary, window: list[NightSummary], policy: NightlyPolicy, z: float
) -> MetricTrend | None:
    """Tonight's capacity of ``arm`` against the median of the window's bracketed capacities.

    Its within-night error is the log width of tonight's bootstrap interval (``ci_load``, at the sweep
    analysis' ``CI_LEVEL``) read as a normal one; the night-to-night spread is the history's, as for
    every metric. Censored tonight: reported, never flagged; censored nights are not in the baseline.
    """
    cap, arm = arm_cap.capacity, arm_cap.arm
    sweep = night.config.sweep
    if sweep is None:
        return None
    past = [c.capacity_load for r in window if (c := _capacity_of(r, arm)) is not None and c.censored == "none"]
    logs = np.array([math.log(v) for v in past if v is not None and v > 0])
    tonight = cap.capacity_load
    baseline = float(np.exp(np.median(logs))) if logs.size else None
    ratio = ci = spread = None
    note = None
    flagged = False
    if cap.censored != "none":
        note = f"capacity {cap.text}: the sweep does not bracket it, reported, never flagged"
    elif tonight is not None and tonight > 0 and baseline is not None:
        ratio = tonight / baseline
        lo_hi = cap.ci_load
        se_night = math.nan
        if lo_hi is not None and lo_hi[0] > 0:
            se_night = math.log(lo_hi[1] / lo_hi[0]) / (2 * stats.z_two_sided(1 - CI_LEVEL))
        if logs.size >= policy.min_history_nights and math.isfinite(se_night):
            mad_sd = MAD_TO_SD * float(np.median(np.abs(logs - np.median(logs))))
            spread = math.exp(mad_sd) - 1
            se = math.sqrt(se_night**2 + mad_sd**2 * (1 + math.pi / (2 * logs.size)))
            lr = math.log(ratio)
            ci = (math.exp(lr - z * se), math.exp(lr + z * se))
            flagged = ci[1] < 1 and abs(ratio - 1) >= policy.min_effect
    return MetricTrend(
        arm=arm,
        metric=CAPACITY_KEY,
        label="capacity at SLO",
        unit=sweep.load_unit,
        higher_is_better=True,
        tonight=tonight,
        requests=arm_cap.measured_requests,
        baseline=baseline,
        baseline_nights=int(logs.size),
        ratio=ratio,
        ci=ci,
        night_to_night_rel=spread,
        mann_whitney_p=None,
        flagged=flagged,
        consecutive_flagged=1 if flagged else 0,
        regression=False,
        note=note,
    )


COMPARABLE_CONFIG_KEYS = ("model", "engine", "client", "workload", "placement", "rounds", "sweep")
"""Config sections that must match for two nights to be compared (a changed workload is not a regression;
nor are other sweep levels: a level is compared with the same level of nights with the same sweep)."""


def _comparable_config(config: ExperimentConfig) -> dict[str, object]:
    dumped = config.model_dump(mode="json")
    out = {k: dumped.get(k) for k in COMPARABLE_CONFIG_KEYS}
    model = out.get("model")
    if isinstance(model, dict):
        out["model"] = {k: v for k, v in model.items() if k != "served_name"}
    return out


def _sweep_text(run: RunResult | NightSummary) -> str:
    sweep = run.config.sweep
    return "no sweep" if sweep is None else "levels " + ", ".join(lv.label() for lv in sweep.levels)


def judge_night(
    result: RunResult,
    history: Sequence[NightSummary | RunResult],
    policy: NightlyPolicy | None = None,
    tonight: NightSummary | None = None,
) -> NightlyVerdict:
    """Compare tonight's ``result`` with ``history`` (earlier nights, any order; later ones are ignored).

    History nights are judged from their summaries only (``analysis.night_summary``); a RunResult in
    ``history`` is summarised here, and only when the gate looks at it. ``tonight``: tonight's summary
    when the caller already made it (under ``policy``), so it is stored without judging the night twice.
    """
    policy = policy or NightlyPolicy()
    if result.status != "ok":
        failed = [f"{a.name}: {a.failure_reason}" for a in result.arms if a.status != "ok"]
        return run_failed_verdict(f"run {result.status}: " + ("; ".join(failed) or "see result"), policy, result)
    if tonight is None:
        tonight = summarise_night(result, policy)
    elif tonight.run_id != result.run_id or tonight.policy_differences(policy):
        raise ValueError(f"tonight's summary is of {tonight.run_id} or under another policy than {result.run_id}'s")
    before = [
        r for r in history if r.status == "ok" and r.run_id != result.run_id and r.started_at <= result.started_at
    ]
    mine = _comparable_config(result.config)
    earlier = sorted(
        (r for r in before if _comparable_config(r.config) == mine), key=lambda r: (r.started_at, r.run_id)
    )
    changed = len(before) - len(earlier)
    other_sweep = [r for r in before if r.config.sweep != result.config.sweep]
    # The only nights ever looked at: tonight's window and those of the K-1 nights re-judged before it.
    recent = [
        r if isinstance(r, NightSummary) else summarise_night(r, policy)
        for r in earlier[-(policy.baseline_nights + policy.consecutive_nights - 1) :]
    ]
    n_capacity = len(result.arms) if result.config.sweep is not None else 0
    n_checks = max(1, tonight.n_gated * len(_metric_indices(policy)) + n_capacity)
    z = stats.z_one_sided(1 - policy.alpha / n_checks)
    checks = _check_night(tonight, recent, policy, z)
    # Walk back night by night while the flags keep holding: each judged against its own past.
    still = {k for k, c in checks.items() if c.flagged}
    streak = dict.fromkeys(still, 1)
    for back in range(1, policy.consecutive_nights):
        if not still or back > len(recent):
            break
        night = recent[-back]
        past = _check_night(night, recent[: len(recent) - back], policy, z)
        still = {k for k in still if k in past and past[k].flagged}
        for k in still:
            streak[k] += 1
    trends = []
    for k, c in checks.items():
        n = streak.get(k, 0)
        trends.append(c.model_copy(update={"consecutive_flagged": n, "regression": n >= policy.consecutive_nights}))
    analysis = analyse_run(
        result,
        AnalysisSettings(
            alpha=policy.alpha,
            bootstrap_resamples=policy.bootstrap_resamples,
            seed=policy.seed,
            slo=policy.slo,
            steady_state=policy.steady_state,
        ),
    )
    history_ids = [r.run_id for r in earlier[-policy.baseline_nights :]]
    regressions = [t for t in trends if t.regression]
    flagged = [t for t in trends if t.flagged]
    notes = []
    other_policy = [(r.run_id, d) for r in recent if (d := r.policy_differences(policy))]
    if other_policy:
        fields = sorted({f for _, d in other_policy for f in d})
        notes.append(
            f"{len(other_policy)} history night(s) ({', '.join(i for i, _ in other_policy[:4])}) were summarised "
            f"under another {'/'.join(fields)} than tonight's policy: their stored values are used as they are"
        )
    if changed:
        notes.append(f"{changed} earlier night(s) ran a different model/engine/workload config: not in the baseline")
    if other_sweep:
        notes.append(
            f"{len(other_sweep)} of them ran a different sweep ({_sweep_text(other_sweep[-1])} instead of "
            f"{_sweep_text(result)}): a level is only compared with the same level of the same sweep"
        )
    if result.config.sweep is not None:
        notes.append(
            f"sweep: each arm gated per level ({len(result.config.sweep.levels)} levels, on each level's measured "
            "requests, warm-up share excluded, no steady-state cut) and on its capacity at the SLO; "
            f"{n_checks} checks in tonight's Bonferroni family"
        )
    for comp in analysis.noise_floor:
        beyond = [
            m.label
            for m in comp.metrics
            if m.aa_noise_rel is not None and m.aa_noise_rel >= policy.min_effect and m.verdict != "not measured"
        ]
        if beyond:
            notes.append(
                f"A/A control {comp.b_arm} differs from {comp.a_arm} by {policy.min_effect:.0%} or more in "
                f"{len(beyond)} metric(s) ({', '.join(beyond[:4])}): engine-instance noise tonight"
            )
    notes += [f"{c.b_arm} vs {c.a_arm}: {n}" for c in analysis.comparisons for n in c.notes]
    if regressions:
        status: Literal["regression", "ok", "insufficient_history"] = "regression"
        worst = sorted(regressions, key=lambda t: -abs(math.log(t.ratio or 1.0)))
        listed = ", ".join(f"{t.name} x{t.ratio:.3f}" for t in worst[:4] if t.ratio is not None)
        more = f" and {len(worst) - 4} more" if len(worst) > 4 else ""
        reason = f"regression on {policy.consecutive_nights} consecutive nights: {listed}{more}"
    elif len(earlier) < policy.min_history_nights:
        status = "insufficient_history"
        reason = f"{len(earlier)} ok night(s) in history, {policy.min_history_nights} needed: no verdict"
    else:
        status = "ok"
        reason = (
            f"no regression ({len(flagged)} check(s) flagged tonight, waiting for {policy.consecutive_nights} nights)"
            if flagged
            else "no regression"
        )
    return NightlyVerdict(
        status=status,
        exit_code=EXIT_REGRESSION if status == "regression" else EXIT_OK,
        reason=reason,
        run_id=result.run_id,
        experiment=result.experiment,
        policy=policy,
        history_runs=history_ids,
        checks=trends,
        analysis=analysis,
        warmup_excluded=dict(tonight.warmup_excluded),
        notes=notes,
    )
