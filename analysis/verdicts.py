"""A/B verdicts of one run: every arm against the baseline, judged against engine-instance noise.

A metric is *regressed* (or *improved*) only when the interval of log(B/A) at the family-wise level
lies wholly on the worse (better) side of zero and the effect is at least ``min_effect``. The
family is the comparison's metrics (Bonferroni), so an A/A comparison flags nothing in at least
1 - alpha of runs, and the interval includes the difference between engine instances
(``analysis.design``): W = max(tau^2 / K + se_within^2, V / K) with Student's t on the engine term's
degrees of freedom, V the engine pairs' raw mean square. A design that cannot estimate that term
(one engine per arm, no A/A control) gives no verdict and says what to add. The A/A comparison
itself is the run's noise floor: its discrepancy and the smallest effect it lets a comparison
detect, never "improved" or "regressed".

``ci_within_engine`` is the interval one engine's requests alone give (what earlier versions
decided on): shown, never decided on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from analysis import design, stats
from analysis.compilation import compile_check
from analysis.compile_attribution import CompileAttributionSummary, attribute_run
from analysis.places import arm_places, place_note
from analysis.samples import ArmSamples, arm_control_of
from analysis.steady_state import SteadyStateRule, judged_arms
from analysis.ttft_over_time import TtftWindow, run_windows
from common.strict import StrictModel
from experiment.slo import SloSpec
from result_format.run_result import RunResult
from workloads.metrics import ArmRates, arm_rates

Verdict = Literal[
    "improved", "regressed", "no detectable difference", "not measured", "no verdict (design)", "noise floor"
]
DECIDED: tuple[Verdict, ...] = ("improved", "regressed")


class AnalysisSettings(StrictModel):
    alpha: float = Field(0.05, gt=0, lt=1, description="Family-wise false-positive level of one comparison.")
    min_effect: float = Field(0.01, ge=0, description="Smallest relative change worth a verdict (0.01 = 1%).")
    power: float = Field(0.8, gt=0, lt=1, description="Power at which the minimum detectable effect is quoted.")
    min_tail_requests: int = Field(
        10, ge=1, description="A p-quantile gets a verdict only with this many requests beyond it in each arm."
    )
    bootstrap_resamples: int = Field(1000, ge=50, description="Bootstrap replicates per comparison.")
    seed: int = Field(0, description="Seed of every bootstrap: same inputs, same report.")
    baseline_arm: str | None = Field(None, description="Arm B/A ratios divide by; null: the first baseline-flag arm.")
    slo: SloSpec | None = Field(None, description="Goodput SLOs; null: the run's config 'slo'.")
    steady_state: SteadyStateRule | None = Field(
        None,
        description="Exclude warm-up by the MSER-5 steady-state rule on TTFT ('mser5') or keep every request "
        "('none'); null: the run's config steady_state. analyse_run resolves it, so RunAnalysis.settings says "
        "which rule judged.",
    )


class MetricVerdict(StrictModel):
    metric: str = Field(description="Metric key, e.g. 'ttft_s_p90'.")
    label: str
    unit: str
    higher_is_better: bool
    a_value: float | None = Field(description="Metric of the baseline arm (A), over the shared rounds.")
    b_value: float | None = Field(description="Metric of the compared arm (B), over the shared rounds.")
    ratio: float | None = Field(description="B/A; null when either side is undefined or zero.")
    ci: tuple[float, float] | None = Field(
        description="Interval of B/A the verdict is decided on: within-engine error plus engine-instance variance, "
        "Student's t on `dof`. Null when the design cannot estimate the engine term, and for the A/A noise floor."
    )
    ci_within_engine: tuple[float, float] | None = Field(
        description="Interval from one engine's requests (bootstrap) or time blocks (rates) alone: blind to the "
        "difference between engine instances, so never decided on."
    )
    ci_level: float = Field(description="Coverage of both intervals (Bonferroni-corrected).")
    dof: int = Field(description="Degrees of freedom of the engine-instance variance (0: not estimable).")
    engine_sd_rel: float | None = Field(description="Estimated SD of one engine instance's offset, relative.")
    mann_whitney_p: float | None = Field(description="Two-sided U-test p on per-request values; null for rates.")
    mde_rel: float | None = Field(description="Smallest relative change detectable at `power` by this design.")
    aa_noise_rel: float | None = Field(description="|A'/A - 1| of the A/A control (largest of several); null without.")
    pairs_for_min_effect: int | None = Field(
        None,
        description="Engine pairs (interleaved rounds) at which a change of `min_effect` would be detectable at "
        "`power`, projected from this design's engine-instance and within-engine variance (normal quantiles: a "
        "lower bound while the pairs are few); null when the engine term is not estimable.",
    )
    verdict: Verdict
    note: str | None = Field(None, description="Why there is no verdict, when there is none.")


class ArmComparison(StrictModel):
    a_arm: str = Field(description="Baseline arm (denominator).")
    b_arm: str = Field(description="Compared arm (numerator).")
    kind: Literal["ab", "aa"] = Field(description="'aa' when B is a control copy of A: the noise floor.")
    controls: list[str] = Field(description="A/A control arms whose discrepancy entered the engine term.")
    n_a: int
    n_b: int
    shared_rounds: int = Field(description="Rounds both arms ran.")
    engine_pairs: int = Field(description="Independent engine pairs behind B/A (parallel: 1 whatever the rounds).")
    design: str = Field(description="What the engine-instance term rests on, in words.")
    design_advice: str | None = Field(None, description="What to add for verdicts, when the design gives none.")
    confounded_by_compilation: bool = Field(
        False, description="One side compiled Triton kernels inside its measured window and the other did not."
    )
    compiles_a: int | None = Field(None, description="Triton compiles in A's measured window; null: not exported.")
    compiles_b: int | None = Field(None, description="Triton compiles in B's measured window; null: not exported.")
    notes: list[str] = Field(default_factory=list)
    metrics: list[MetricVerdict]

    def with_verdict(self, verdict: Verdict) -> list[MetricVerdict]:
        return [m for m in self.metrics if m.verdict == verdict]

    def metric(self, key: str) -> MetricVerdict:
        return next(m for m in self.metrics if m.metric == key)


class RunAnalysis(StrictModel):
    run_id: str
    settings: AnalysisSettings
    slo: SloSpec
    placement: design.Placement = Field("interleaved", description="The run's placement (engines per round).")
    baseline_arm: str | None = Field(description="Null when no arm succeeded.")
    comparisons: list[ArmComparison]
    skipped_arms: dict[str, str] = Field(description="Arm -> why it was not compared (failed, no requests).")
    warmup_excluded: dict[int, int] = Field(
        default_factory=dict, description="Round -> schedule slots before steady state, excluded from every arm."
    )
    arm_rates: dict[str, ArmRates] = Field(
        default_factory=dict,
        description="Per arm, over all its measured requests: the rates the console table prints (ArmSummary).",
    )
    compile_attribution: dict[str, CompileAttributionSummary] = Field(
        default_factory=dict,
        description="Per arm that logged Triton compiles while serving: how many, and the TTFT of the measured "
        "requests that waited for one against the rest (analysis.compile_attribution).",
    )
    ttft_over_time: dict[str, list[TtftWindow]] = Field(
        default_factory=dict,
        description="Per arm, TTFT of its measured requests by send time since its round's first request, in fixed "
        "windows, rounds pooled, no steady-state cut (analysis.ttft_over_time); empty for a run with a sweep.",
    )

    @property
    def regressed(self) -> bool:
        return any(c.kind == "ab" and c.with_verdict("regressed") for c in self.comparisons)

    @property
    def noise_floor(self) -> list[ArmComparison]:
        return [c for c in self.comparisons if c.kind == "aa"]

    @property
    def in_report_order(self) -> list[ArmComparison]:
        """The A/B comparisons, then the A/A controls: the order every report section lists them in."""
        return [*(c for c in self.comparisons if c.kind == "ab"), *self.noise_floor]


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def log_interval(log_ratio: float, se: float, q: float) -> tuple[float, float] | None:
    """The ratio interval exp(log_ratio -/+ q se): ratios are judged on the log scale, where B/A and A/B are
    symmetric and engine offsets add. None when any input is not finite (an undefined side, no dof)."""
    if not (math.isfinite(log_ratio) and math.isfinite(se) and math.isfinite(q)):
        return None
    return (math.exp(log_ratio - q * se), math.exp(log_ratio + q * se))


def pairs_for_effect(
    effect_rel: float, tau2: float, se_within: float, pairs: int, alpha: float, power: float, floor: float = 0.0
) -> int | None:
    """How many engine pairs make a change of ``effect_rel`` detectable at ``power`` (two-sided ``alpha``).

    Why: an interval that is too wide says no verdict, not what would give one; a kernel team planning GPU time
    needs the count. One pair's log ratio varies by the engine-instance variance ``tau2`` plus its own
    within-engine error, ``pairs`` x ``se_within``^2 for a mean over ``pairs`` pairs; the mean over K pairs then
    has (tau2 + pairs se_within^2) / K. Normal quantiles stand in for Student's t, so with few pairs the count
    is a lower bound. At least 2: one pair estimates no engine term. ``floor``: the pairs' raw mean square V,
    below which the interval never goes (``design.EngineNoise.variance``)."""
    per_pair = max(tau2 + pairs * se_within**2, floor if math.isfinite(floor) else 0.0)
    if effect_rel <= 0 or pairs < 1 or not (math.isfinite(per_pair) and per_pair >= 0):
        return None
    z = stats.z_two_sided(alpha) + stats.z_one_sided(power)
    return max(2, math.ceil(per_pair * (z / math.log1p(effect_rel)) ** 2))


def compare_samples(
    a: ArmSamples,
    b: ArmSamples,
    settings: AnalysisSettings,
    kind: Literal["ab", "aa"] = "ab",
    controls: Sequence[tuple[str, stats.PairedEstimates]] = (),
    placement: design.Placement = "interleaved",
    rng: np.random.Generator | None = None,
    estimates: stats.PairedEstimates | None = None,
) -> ArmComparison:
    """Verdicts of every metric of B against A; ``controls`` are the run's A/A estimates (name, estimates)."""
    rng = rng or np.random.default_rng(settings.seed)
    m = len(stats.METRICS)
    alpha_j = settings.alpha / m
    shared = sorted(set(a.round_ids()) & set(b.round_ids()))
    pairs = design.engine_pairs(placement, shared)
    est = estimates or stats.paired_estimates(a, b, pairs, settings.bootstrap_resamples, rng)
    terms = [design.control_term(e) for _, e in controls]
    if kind == "ab":
        terms.append(design.own_term(est))
    noise = design.pool(terms, m)
    pa, pb = stats.point_values(a, shared), stats.point_values(b, shared)
    z = stats.z_two_sided(alpha_j)
    aa_rel = [np.abs(np.expm1(e.log_ratio)) for _, e in controls]
    aa_noise = np.full(m, np.nan)
    if aa_rel:  # a metric no control could measure (a p99 on few requests) stays NaN: no all-NaN warning
        stacked = np.stack(aa_rel)
        seen = ~np.all(np.isnan(stacked), axis=0)
        aa_noise[seen] = np.nanmax(stacked[:, seen], axis=0)
    k = est.pairs
    mwu: dict[str, float | None] = {}
    for spec in stats.METRICS:
        if spec.family not in mwu:
            series = (stats.per_request_series(a, spec.family), stats.per_request_series(b, spec.family))
            mwu[spec.family] = stats.mann_whitney_p(*series)
    verdicts = []
    for j, spec in enumerate(stats.METRICS):
        lr, se_w = float(est.log_ratio[j]), float(est.se_within[j])
        dof = int(noise.dof[j])
        w = noise.variance(j, k, se_w) if dof > 0 else math.nan
        q = stats.t_two_sided(alpha_j, dof) if dof > 0 else math.nan
        se = math.sqrt(w) if math.isfinite(w) else math.nan
        mde = math.expm1((q + stats.t_one_sided(settings.power, dof)) * se) if math.isfinite(se) else None
        needed = (
            pairs_for_effect(
                settings.min_effect, float(noise.tau2[j]), se_w, k, alpha_j, settings.power, noise.floor(j)
            )
            if dof > 0
            else None
        )
        decision = log_interval(lr, se, q)
        tail = min(a.n, b.n) * (1 - spec.quantile / 100) if spec.quantile is not None else math.inf
        note = None
        verdict: Verdict = "not measured"
        if tail < settings.min_tail_requests:
            note = f"too few requests for p{spec.quantile}: needs {settings.min_tail_requests} beyond it per arm"
            decision = None
        elif not math.isfinite(lr) or not math.isfinite(se_w):
            note = "undefined in an arm or in too many resamples"
            decision = None
        elif kind == "aa":
            verdict = "noise floor"
            decision = None
        elif dof == 0:
            verdict = "no verdict (design)"
            note = "engine-instance noise not estimable: one engine per arm and no A/A control"
        elif decision is not None:
            lo, hi = decision
            better = lo > 1 if spec.higher_is_better else hi < 1
            worse = hi < 1 if spec.higher_is_better else lo > 1
            big = abs(math.expm1(lr)) >= settings.min_effect
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
                ci=decision,
                ci_within_engine=log_interval(lr, se_w, z),
                ci_level=1 - alpha_j,
                dof=dof,
                engine_sd_rel=_finite(float(noise.engine_sd_rel[j])) if dof > 0 else None,
                mann_whitney_p=mwu[spec.family],
                mde_rel=mde if mde is not None and math.isfinite(mde) else None,
                aa_noise_rel=_finite(float(aa_noise[j])),
                pairs_for_min_effect=needed,
                verdict=verdict,
                note=note,
            )
        )
    names = [n for n, _ in controls]
    max_dof = int(noise.dof.max()) if noise.dof.size else 0
    return ArmComparison(
        a_arm=a.name,
        b_arm=b.name,
        kind=kind,
        controls=names,
        n_a=a.n,
        n_b=b.n,
        shared_rounds=len(shared),
        engine_pairs=k,
        design=design.describe(placement, k, names, max_dof),
        design_advice=design.design_advice(placement, a.name) if kind == "ab" and max_dof == 0 else None,
        metrics=verdicts,
    )


def compare_arms(
    samples: Mapping[str, ArmSamples],
    control_of: Mapping[str, str | None],
    baseline: str | None,
    settings: AnalysisSettings,
    placement: design.Placement = "interleaved",
) -> list[ArmComparison]:
    """Each A/A control against the arm it copies (the noise floor), then every other arm against the
    baseline with every control's noise in its engine term. ``control_of`` lists the arms in run order."""
    rng = np.random.default_rng(settings.seed)
    controls: list[tuple[str, stats.PairedEstimates]] = []
    aa_pairs: list[tuple[ArmSamples, ArmSamples, stats.PairedEstimates]] = []
    for name, target in control_of.items():
        if target and name in samples and target in samples:
            a, b = samples[target], samples[name]
            pairs = design.engine_pairs(placement, sorted(set(a.round_ids()) & set(b.round_ids())))
            est = stats.paired_estimates(a, b, pairs, settings.bootstrap_resamples, rng)
            controls.append((name, est))
            aa_pairs.append((a, b, est))
    out = [compare_samples(a, b, settings, "aa", controls, placement, rng, estimates=est) for a, b, est in aa_pairs]
    if baseline is not None and baseline in samples:
        for name, target in control_of.items():
            if name == baseline or name not in samples or target:
                continue
            out.append(compare_samples(samples[baseline], samples[name], settings, "ab", controls, placement, rng))
    return out


def choose_baseline(result: RunResult, usable: list[str], wanted: str | None) -> str | None:
    if wanted is not None:
        if wanted not in [a.name for a in result.arms]:
            raise KeyError(f"baseline arm {wanted!r} is not in run {result.run_id}")
        return wanted
    plain = [a.name for a in result.arms if a.name in usable and a.flags.is_baseline() and not arm_control_of(a)]
    candidates = plain or [a.name for a in result.arms if a.name in usable and not arm_control_of(a)]
    return candidates[0] if candidates else None


def _pooled_levels_note(result: RunResult) -> str | None:
    """For a sweep run whose records span several levels: what its whole-run comparison is."""
    if result.config.sweep is None:
        return None
    levels = {lv for a in result.arms for lv in a.columns.measured.levels()}
    if len(levels) < 2:
        return None  # one level's view (the sweep analysis judges each level so)
    return (
        f"sweep run: these whole-run numbers pool all {len(levels)} load levels (each level's warm-up share "
        "excluded, no steady-state cut; requests paired by level and index); the per-level verdicts and the "
        "frontier are in the sweep section"
    )


def analyse_run(result: RunResult, settings: AnalysisSettings | None = None) -> RunAnalysis:
    """Every ok arm against the baseline; each A/A control against the arm it copies (the noise floor)."""
    settings = settings or AnalysisSettings()
    rule = settings.steady_state or result.config.steady_state
    settings = settings.model_copy(update={"steady_state": rule})
    slo = settings.slo or result.config.slo
    judged = judged_arms(result, slo, rule)
    base = choose_baseline(result, list(judged.samples), settings.baseline_arm)
    placement = result.config.placement
    comparisons = compare_arms(
        judged.samples, {a.name: arm_control_of(a) for a in result.arms}, base, settings, placement
    )
    pooled = _pooled_levels_note(result)
    placed = arm_places(result.turns)
    checked = []
    for c in comparisons:
        chk = compile_check(result.arm(c.a_arm), result.arm(c.b_arm))
        place = place_note(placed, [c.a_arm, c.b_arm, *(n for n in c.controls if n != c.b_arm)])
        notes = [chk.note, place, pooled]
        checked.append(
            c.model_copy(
                update={
                    "confounded_by_compilation": chk.confounded,
                    "compiles_a": chk.compiles_a,
                    "compiles_b": chk.compiles_b,
                    "notes": c.notes + [n for n in notes if n],
                }
            )
        )
    return RunAnalysis(
        run_id=result.run_id,
        settings=settings,
        slo=slo,
        placement=placement,
        baseline_arm=base,
        comparisons=checked,
        warmup_excluded={k: v for k, v in judged.cuts.items() if v},
        skipped_arms=judged.skipped,
        arm_rates={a.name: arm_rates(a.columns.measured, slo) for a in result.arms if len(a.columns.measured)},
        compile_attribution={x.arm: x.summary for x in attribute_run(result.arms)},
        ttft_over_time=run_windows(result),
    )
