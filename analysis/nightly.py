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

Exit codes: 1 regression, 0 otherwise (also with too little history), 2 the run itself failed.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from analysis import stats
from analysis.samples import ArmSamples
from analysis.steady_state import JudgedArms, SteadyStateRule, judged_arms, measured
from analysis.sweep import CI_LEVEL, ArmCapacity, arm_capacities
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
    steady_state: SteadyStateRule = Field(
        "mser5", description="Warm-up rule, the report's: 'mser5' cuts it by MSER-5 on TTFT, 'none' keeps all."
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
    mann_whitney_p: float | None = Field(description="U test of tonight vs the median baseline night; null for rates.")
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


LEVEL_SEP = " @ "
CAPACITY_KEY = "capacity"


def gated_view(run: RunResult) -> tuple[RunResult, dict[str, tuple[str, str | None]]]:
    """The run as the gate judges it, and per gated arm its (arm, level label).

    Without a sweep, the run itself. With one, one arm per (arm, level), named '{arm} @ {label}', holding
    that level's measured requests: each is then judged as an arm of its own (no steady-state cut, a
    sweep run never gets one), so the same level of two nights meets under the same name.
    """
    sweep = run.config.sweep
    if sweep is None:
        return run, {a.name: (a.name, None) for a in run.arms}
    names: dict[str, tuple[str, str | None]] = {}
    arms = []
    for a in run.arms:
        for i, level in enumerate(sweep.levels):
            name = f"{a.name}{LEVEL_SEP}{level.label()}"
            names[name] = (a.name, level.label())
            arms.append(
                a.model_copy(update={"name": name, "records": [r for r in measured(a.records) if r.level == i]})
            )
    return run.model_copy(update={"arms": arms}), names


class _NightCache:
    """Judged samples, point values and capacities per (run, arm), computed once however many nights look
    at them. A run is judged as ``gated_view`` lays it out."""

    def __init__(self, policy: NightlyPolicy) -> None:
        self._policy = policy
        self._judged: dict[str, JudgedArms] = {}
        self._names: dict[str, dict[str, tuple[str, str | None]]] = {}
        self._points: dict[tuple[str, str], np.ndarray | None] = {}
        self._capacities: dict[str, dict[str, ArmCapacity]] = {}

    def judged(self, run: RunResult) -> JudgedArms:
        if run.run_id not in self._judged:
            slo = self._policy.slo or run.config.slo
            view, self._names[run.run_id] = gated_view(run)
            self._judged[run.run_id] = judged_arms(view, slo, self._policy.steady_state)
        return self._judged[run.run_id]

    def names(self, run: RunResult) -> dict[str, tuple[str, str | None]]:
        """Gated arm -> (arm, level label), in run order (arm by arm, level by level)."""
        self.judged(run)
        return self._names[run.run_id]

    def capacity(self, run: RunResult, arm: str) -> ArmCapacity | None:
        """The arm's capacity at the SLO (``sweep.arm_capacities``); None without a sweep or a usable arm."""
        if run.run_id not in self._capacities:
            p = self._policy
            self._capacities[run.run_id] = arm_capacities(run, p.bootstrap_resamples, p.seed, p.slo)
        return self._capacities[run.run_id].get(arm)

    def samples(self, run: RunResult, arm: str) -> ArmSamples | None:
        return self.judged(run).samples.get(arm)

    def points(self, run: RunResult, arm: str) -> np.ndarray | None:
        key = (run.run_id, arm)
        if key not in self._points:
            s = self.samples(run, arm)
            self._points[key] = stats.point_values(s) if s is not None else None
        return self._points[key]


def _metric_indices(policy: NightlyPolicy) -> list[int]:
    if policy.metrics is None:
        return list(range(len(stats.METRICS)))
    unknown = sorted(set(policy.metrics) - set(stats.METRIC_KEYS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {list(stats.METRIC_KEYS)}")
    return [stats.METRIC_KEYS.index(k) for k in policy.metrics]


def _check_night(
    night: RunResult, previous: list[RunResult], policy: NightlyPolicy, cache: _NightCache, z: float
) -> dict[tuple[str, str], MetricTrend]:
    """Flags of one night against the median of its own last N previous nights."""
    window = previous[-policy.baseline_nights :]
    rng = np.random.default_rng(policy.seed)
    out: dict[tuple[str, str], MetricTrend] = {}
    for gated, (arm_name, level) in cache.names(night).items():
        tonight = cache.samples(night, gated)
        if tonight is None:
            continue
        past = [(r, p) for r in window if (p := cache.points(r, gated)) is not None]
        point = cache.points(night, gated)
        assert point is not None
        # Within-night error (the bootstrap for quantiles, batch means for rates); the engine-to-
        # engine part is in the night-to-night spread, every night having its own engines.
        se_night = stats.arm_log_se(tonight, policy.bootstrap_resamples, rng)
        for j in _metric_indices(policy):
            spec = stats.METRICS[j]
            logs = np.array([math.log(p[j]) for _, p in past if p[j] > 0 and math.isfinite(p[j])])
            ratio = ci = spread = mw = None
            baseline = None
            flagged = False
            if logs.size >= 1 and point[j] > 0 and math.isfinite(point[j]):
                baseline = float(np.exp(np.median(logs)))
                ratio = point[j] / baseline
            tail_ok = spec.quantile is None or tonight.n * (1 - spec.quantile / 100) >= policy.min_tail_requests
            if ratio is not None and tail_ok and logs.size >= policy.min_history_nights and math.isfinite(se_night[j]):
                mad_sd = MAD_TO_SD * float(np.median(np.abs(logs - np.median(logs))))
                spread = math.exp(mad_sd) - 1
                se = math.sqrt(se_night[j] ** 2 + mad_sd**2 * (1 + math.pi / (2 * logs.size)))
                lr = math.log(ratio)
                ci = (math.exp(lr - z * se), math.exp(lr + z * se))
                worse = ci[1] < 1 if spec.higher_is_better else ci[0] > 1
                flagged = worse and abs(ratio - 1) >= policy.min_effect
                median_run = min(past, key=lambda rp: abs(math.log(max(rp[1][j], 1e-300)) - float(np.median(logs))))[0]
                ref = cache.samples(median_run, gated)
                if ref is not None:
                    mw = stats.mann_whitney_p(
                        stats.per_request_series(ref, spec.family), stats.per_request_series(tonight, spec.family)
                    )
            out[(gated, spec.key)] = MetricTrend(
                arm=arm_name,
                level=level,
                metric=spec.key,
                label=spec.label,
                unit=spec.unit,
                higher_is_better=spec.higher_is_better,
                tonight=float(point[j]) if math.isfinite(point[j]) else None,
                requests=tonight.n,
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
        for arm in night.arms:
            trend = _capacity_check(night, arm.name, window, cache, policy, z)
            if trend is not None:
                out[(arm.name, CAPACITY_KEY)] = trend
    return out


def _capacity_check(
    night: RunResult, arm: str, window: list[RunResult], cache: _NightCache, policy: NightlyPolicy, z: float
) -> MetricTrend | None:
    """Tonight's capacity of ``arm`` against the median of the window's bracketed capacities.

    Its within-night error is the log width of tonight's bootstrap interval (``ci_load``, at the sweep
    analysis' ``CI_LEVEL``) read as a normal one; the night-to-night spread is the history's, as for
    every metric. Censored tonight: reported, never flagged; censored nights are not in the baseline.
    """
    cap = cache.capacity(night, arm)
    sweep = night.config.sweep
    if cap is None or sweep is None:
        return None
    past = [c.capacity_load for r in window if (c := cache.capacity(r, arm)) is not None and c.censored == "none"]
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
        requests=sum(1 for r in measured(night.arm(arm).records)),
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


def _sweep_text(run: RunResult) -> str:
    sweep = run.config.sweep
    return "no sweep" if sweep is None else "levels " + ", ".join(lv.label() for lv in sweep.levels)


def judge_night(result: RunResult, history: list[RunResult], policy: NightlyPolicy | None = None) -> NightlyVerdict:
    """Compare tonight's ``result`` with ``history`` (earlier ok runs, any order; later ones are ignored)."""
    policy = policy or NightlyPolicy()
    if result.status != "ok":
        failed = [f"{a.name}: {a.failure_reason}" for a in result.arms if a.status != "ok"]
        return run_failed_verdict(f"run {result.status}: " + ("; ".join(failed) or "see result"), policy, result)
    before = [
        r for r in history if r.status == "ok" and r.run_id != result.run_id and r.started_at <= result.started_at
    ]
    mine = _comparable_config(result.config)
    earlier = sorted(
        (r for r in before if _comparable_config(r.config) == mine), key=lambda r: (r.started_at, r.run_id)
    )
    changed = len(before) - len(earlier)
    other_sweep = [r for r in before if r.config.sweep != result.config.sweep]
    cache = _NightCache(policy)
    n_capacity = len(result.arms) if result.config.sweep is not None else 0
    n_checks = max(1, len(cache.names(result)) * len(_metric_indices(policy)) + n_capacity)
    z = stats.z_one_sided(1 - policy.alpha / n_checks)
    checks = _check_night(result, earlier, policy, cache, z)
    # Walk back night by night while the flags keep holding: each judged against its own past.
    still = {k for k, c in checks.items() if c.flagged}
    streak = dict.fromkeys(still, 1)
    for back in range(1, policy.consecutive_nights):
        if not still or back > len(earlier):
            break
        night = earlier[-back]
        past = _check_night(night, earlier[: len(earlier) - back], policy, cache, z)
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
        warmup_excluded={k: v for k, v in cache.judged(result).cuts.items() if v},
        notes=notes,
    )
