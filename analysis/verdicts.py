"""A/B verdicts of one run: every arm against the baseline, with the run's own A/A noise.

A metric is *regressed* (or *improved*) only when the interval of log(B/A) at the family-wise
level lies wholly on the worse (better) side of zero and the effect is at least ``min_effect``.
The family is the comparison's metrics (Bonferroni), so an A/A comparison flags nothing in at
least 1 - alpha of runs. When the run has an A/A control arm, the part of the control's observed
discrepancy that its own sampling error does not explain is added to the variance: a difference
between two copies of the same arm is noise the request bootstrap cannot see (engine placement,
warm state), and a verdict must clear it. The minimum detectable effect is quoted from the same
standard error: (z_level + z_power) * se, as a relative change.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from analysis import stats
from analysis.samples import ArmSamples, arm_control_of, arm_samples
from analysis.steady_state import steady, warmup_slots
from experiment.slo import SloSpec
from result_format.run_result import RunResult

Verdict = Literal["improved", "regressed", "no detectable difference", "not measured"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnalysisSettings(_Strict):
    alpha: float = Field(0.05, gt=0, lt=1, description="Family-wise false-positive level of one comparison.")
    min_effect: float = Field(0.01, ge=0, description="Smallest relative change worth a verdict (0.01 = 1%).")
    power: float = Field(0.8, gt=0, lt=1, description="Power at which the minimum detectable effect is quoted.")
    min_tail_requests: int = Field(
        10, ge=1, description="A p-quantile gets a verdict only with this many requests beyond it in each arm."
    )
    bootstrap_resamples: int = Field(1000, ge=50, description="Bootstrap replicates per arm and scheme.")
    seed: int = Field(0, description="Seed of every bootstrap: same inputs, same report.")
    baseline_arm: str | None = Field(None, description="Arm B/A ratios divide by; null: the first baseline-flag arm.")
    slo: SloSpec | None = Field(None, description="Goodput SLOs; null: the run's config 'slo', else the defaults.")
    steady_state: Literal["mser5", "none"] = Field(
        "mser5", description="Exclude warm-up by the MSER-5 steady-state rule on TTFT ('none': keep every request)."
    )


class MetricVerdict(_Strict):
    metric: str = Field(description="Metric key, e.g. 'ttft_s_p90'.")
    label: str
    unit: str
    higher_is_better: bool
    a_value: float | None = Field(description="Metric of the baseline arm (A).")
    b_value: float | None = Field(description="Metric of the compared arm (B).")
    ratio: float | None = Field(description="B/A; null when either side is undefined or zero.")
    ci_requests: tuple[float, float] | None = Field(description="Interval of B/A, bootstrap over requests.")
    ci_rounds: tuple[float, float] | None = Field(
        description="Interval of B/A over rounds (request error + between-round variance); null with < 2 rounds."
    )
    ci_level: float = Field(description="Coverage of both intervals (Bonferroni-corrected).")
    mann_whitney_p: float | None = Field(description="Two-sided U-test p on per-request values; null for rates.")
    mde_rel: float | None = Field(description="Smallest relative change detectable at `power`, given A/A noise.")
    aa_noise_rel: float | None = Field(description="|A'/A - 1| of the A/A control arm; null without one.")
    verdict: Verdict
    note: str | None = Field(None, description="Why there is no verdict, when there is none.")


class ArmComparison(_Strict):
    a_arm: str = Field(description="Baseline arm (denominator).")
    b_arm: str = Field(description="Compared arm (numerator).")
    kind: Literal["ab", "aa"] = Field(description="'aa' when B is a control copy of A.")
    control_arm: str | None = Field(description="A/A control whose noise entered the verdicts; null without one.")
    n_a: int
    n_b: int
    shared_rounds: int = Field(description="Rounds both arms ran; the rounds bootstrap needs two or more.")
    metrics: list[MetricVerdict]

    def with_verdict(self, verdict: Verdict) -> list[MetricVerdict]:
        return [m for m in self.metrics if m.verdict == verdict]


class RunAnalysis(_Strict):
    run_id: str
    settings: AnalysisSettings
    slo: SloSpec
    baseline_arm: str | None = Field(description="Null when no arm succeeded.")
    comparisons: list[ArmComparison]
    skipped_arms: dict[str, str] = Field(description="Arm -> why it was not compared (failed, no requests).")
    warmup_excluded: dict[int, int] = Field(
        default_factory=dict, description="Round -> schedule slots before steady state, excluded from every arm."
    )

    @property
    def regressed(self) -> bool:
        return any(c.kind == "ab" and c.with_verdict("regressed") for c in self.comparisons)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _interval(log_ratio: float, se: float, z: float) -> tuple[float, float] | None:
    if not (math.isfinite(log_ratio) and math.isfinite(se)):
        return None
    return (math.exp(log_ratio - z * se), math.exp(log_ratio + z * se))


def compare_samples(
    a: ArmSamples,
    b: ArmSamples,
    settings: AnalysisSettings,
    kind: Literal["ab", "aa"] = "ab",
    control: ArmComparison | None = None,
    rng: np.random.Generator | None = None,
) -> ArmComparison:
    """Verdicts of every metric of B against A."""
    rng = rng or np.random.default_rng(settings.seed)
    m = len(stats.METRICS)
    per_metric_alpha = settings.alpha / m
    z = stats.z_two_sided(per_metric_alpha)
    z_power = stats.z_one_sided(settings.power)
    pa, pb = stats.point_values(a), stats.point_values(b)
    boot = stats.paired_bootstrap(a, b, settings.bootstrap_resamples, rng)
    nan = np.full(m, np.nan)
    se_req = boot.se_requests if boot is not None else nan
    se_rounds = boot.se_rounds() if boot is not None else nan
    noise = {mv.metric: mv for mv in control.metrics} if control is not None else {}
    verdicts = []
    for j, spec in enumerate(stats.METRICS):
        ok = pa[j] > 0 and pb[j] > 0 and math.isfinite(pa[j]) and math.isfinite(pb[j])
        lr = math.log(pb[j] / pa[j]) if ok else math.nan
        se_rounds_j = float(se_rounds[j])
        # A rate is one number per round (tokens over the round's span, set by its last request):
        # resampling requests cannot give its error, only replication over rounds can.
        se_req_j = math.nan if spec.quantile is None else float(se_req[j])
        se_boot = se_rounds_j if math.isfinite(se_rounds_j) else se_req_j
        aa = noise.get(spec.key)
        aa_log = abs(math.log(aa.ratio)) if aa is not None and aa.ratio else 0.0
        aa_se = 0.0
        aa_ci = (aa.ci_rounds or aa.ci_requests) if aa is not None else None
        if aa_ci is not None:
            aa_se = (math.log(aa_ci[1]) - math.log(aa_ci[0])) / (2 * z)
        # Engine-to-engine variance the request bootstrap cannot see: the A/A discrepancy beyond
        # what its own sampling error explains (a one-sample method-of-moments estimate).
        systematic_var = max(0.0, aa_log**2 - aa_se**2)
        se_decision = math.sqrt(se_boot**2 + systematic_var)
        decision = _interval(lr, se_decision, z)
        verdict: Verdict = "not measured"
        tail = min(a.n, b.n) * (1 - spec.quantile / 100) if spec.quantile is not None else math.inf
        note = None
        if tail < settings.min_tail_requests:
            note = f"too few requests for p{spec.quantile}: needs {settings.min_tail_requests} beyond it per arm"
            decision = None
        elif decision is None and spec.quantile is None:
            note = "a run-level rate: needs two or more shared rounds for an interval"
        elif decision is None:
            note = "undefined in an arm or in too many resamples"
        if decision is not None:
            lo, hi = decision
            better = lo > 1 if spec.higher_is_better else hi < 1
            worse = hi < 1 if spec.higher_is_better else lo > 1
            big = abs(math.exp(lr) - 1) >= settings.min_effect
            verdict = "improved" if better and big else "regressed" if worse and big else "no detectable difference"
        verdicts.append(
            MetricVerdict(
                metric=spec.key,
                label=spec.label,
                unit=spec.unit,
                higher_is_better=spec.higher_is_better,
                a_value=_finite(pa[j]),
                b_value=_finite(pb[j]),
                ratio=math.exp(lr) if math.isfinite(lr) else None,
                ci_requests=_interval(lr, se_req_j, z),
                ci_rounds=_interval(lr, se_rounds_j, z),
                ci_level=1 - per_metric_alpha,
                mann_whitney_p=stats.mann_whitney_p(
                    stats.per_request_series(a, spec.family), stats.per_request_series(b, spec.family)
                ),
                mde_rel=math.exp((z + z_power) * se_decision) - 1 if math.isfinite(se_decision) else None,
                aa_noise_rel=abs(aa.ratio - 1) if aa is not None and aa.ratio else None,
                verdict=verdict,
                note=note,
            )
        )
    shared = len(set(a.round_ids()) & set(b.round_ids()))
    return ArmComparison(
        a_arm=a.name,
        b_arm=b.name,
        kind=kind,
        control_arm=control.b_arm if control is not None else None,
        n_a=a.n,
        n_b=b.n,
        shared_rounds=shared,
        metrics=verdicts,
    )


def choose_baseline(result: RunResult, usable: list[str], wanted: str | None) -> str | None:
    if wanted is not None:
        if wanted not in [a.name for a in result.arms]:
            raise KeyError(f"baseline arm {wanted!r} is not in run {result.run_id}")
        return wanted
    plain = [a.name for a in result.arms if a.name in usable and a.flags.is_baseline() and not arm_control_of(a)]
    candidates = plain or [a.name for a in result.arms if a.name in usable and not arm_control_of(a)]
    return candidates[0] if candidates else None


def analyse_run(result: RunResult, settings: AnalysisSettings | None = None) -> RunAnalysis:
    """Every ok arm against the baseline; each A/A control against the arm it copies (first, for noise)."""
    settings = settings or AnalysisSettings()
    slo = settings.slo or result.config.slo
    samples: dict[str, ArmSamples] = {}
    skipped: dict[str, str] = {}
    ok_arms = [a.records for a in result.arms if a.status == "ok"]
    cuts = warmup_slots(ok_arms) if settings.steady_state == "mser5" else {}
    for arm in result.arms:
        s = arm_samples(arm.name, steady(arm.records, cuts), slo)
        if arm.status != "ok":
            skipped[arm.name] = f"arm {arm.status}: {arm.failure_reason or 'no reason recorded'}"
        elif s.n < 2:
            skipped[arm.name] = f"only {s.n} successful request(s)"
        else:
            samples[arm.name] = s
    base = choose_baseline(result, list(samples), settings.baseline_arm)
    rng = np.random.default_rng(settings.seed)
    controls: dict[str, ArmComparison] = {}
    comparisons: list[ArmComparison] = []
    for arm in result.arms:
        target = arm_control_of(arm)
        if target and arm.name in samples and target in samples:
            c = compare_samples(samples[target], samples[arm.name], settings, kind="aa", rng=rng)
            controls.setdefault(target, c)
            comparisons.append(c)
    if base is not None and base in samples:
        for arm in result.arms:
            if arm.name == base or arm.name not in samples or arm_control_of(arm):
                continue
            control = controls.get(base) or controls.get(arm.name)
            comparisons.append(
                compare_samples(samples[base], samples[arm.name], settings, kind="ab", control=control, rng=rng)
            )
    return RunAnalysis(
        run_id=result.run_id,
        settings=settings,
        slo=slo,
        baseline_arm=base,
        comparisons=comparisons,
        warmup_excluded={k: v for k, v in cuts.items() if v},
        skipped_arms=skipped,
    )
