"""What the nightly gate keeps of a night: everything it will ever ask of it as a past night, computed once.

The gate compares tonight with the median of the last N nights and re-judges the last K-1 nights
against their own past for the consecutive-nights rule. Re-reading every past night's records for
that (hundreds of thousands of requests a night, and since schema 3 not even inside ``result.json``)
is what this module removes: ``summarise_night`` judges a night once, as ``analysis.nightly`` would,
and keeps per gated arm its metric values, their within-night standard errors and a capped
per-request series for the rank test; per arm its sweep capacity; and the night's config, so that
comparability is decided with today's code on it, exactly as it was on the full result.

Values depend on the policy they were computed under (bootstrap replicates and seed, warm-up rule,
SLO); the summary records it and the gate says so when a past night's differs from tonight's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, PrivateAttr

from analysis import stats
from analysis.samples import FAMILIES
from analysis.steady_state import SteadyStateRule, judged_arms
from analysis.sweep import ArmCapacity, arm_capacities
from common.strict import StrictModel
from experiment.config import ExperimentConfig
from experiment.slo import SloSpec
from result_format.run_result import RunResult

if TYPE_CHECKING:
    from analysis.nightly import NightlyPolicy

SUMMARY_SUFFIX = ".summary.json"
SERIES_CAP = 2000
"""Per-request values kept per latency family and gated arm: enough for a rank test to see a shift of a
few percent, and a summary's size then stops growing with the night's requests."""
SERIES_SEED = 20_260_101
"""Seed of the series subsample, fixed and apart from the policy's seed: the subsample of a night never
depends on which policy summarised it, and drawing it never moves the bootstrap's random stream."""
LEVEL_SEP = " @ "


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
            arms.append(a.with_columns(a.columns.measured.at_level(i), name=name))
    return run.model_copy(update={"arms": arms}), names


class SummaryPolicy(StrictModel):
    """The policy fields a summary's numbers depend on, as they were when it was made."""

    bootstrap_resamples: int = Field(description="Bootstrap replicates of every log SE and capacity interval.")
    seed: int = Field(description="Seed of those bootstraps (the gate's: one generator per night, arm by arm).")
    steady_state: SteadyStateRule = Field(description="Warm-up rule the judged requests were cut by.")
    slo: SloSpec = Field(description="The SLO in effect: the policy's, else the night's config 'slo'.")
    metrics: list[str] | None = Field(
        description="The policy's gated metrics, for the record: every metric of stats.METRICS is summarised "
        "whatever it says, so a summary serves a policy gating other metrics unchanged."
    )


def summary_policy(policy: NightlyPolicy, config: ExperimentConfig) -> SummaryPolicy:
    return SummaryPolicy(
        bootstrap_resamples=policy.bootstrap_resamples,
        seed=policy.seed,
        steady_state=policy.steady_state or config.steady_state,
        slo=policy.slo or config.slo,
        metrics=policy.metrics,
    )


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _array(values: dict[str, float | None]) -> np.ndarray:
    """METRICS order, NaN where undefined or not summarised (a metric added since the night was stored)."""
    return np.array([math.nan if (v := values.get(k)) is None else v for k in stats.METRIC_KEYS])


class GatedArmSummary(StrictModel):
    """One gated arm of a night (an arm, or an arm at one sweep level) as the gate judges it."""

    name: str = Field(description="Gated name: the arm, or '{arm} @ {level label}' with a sweep.")
    arm: str = Field(description="The run's arm.")
    level: str | None = Field(description="Sweep level label; null without a sweep.")
    requests: int = Field(description="Judged requests (steady state; a level's measured ones with a sweep).")
    points: dict[str, float | None] = Field(
        description="stats.point_values per metric key; null where undefined (NaN or infinite)."
    )
    log_se: dict[str, float | None] = Field(
        description="Within-night SE of log(metric) per metric key (stats.arm_log_se: the request bootstrap for "
        "quantiles, batch means for rates); null where undefined."
    )
    series: dict[str, list[float]] = Field(
        description="Per latency family, the per-request values of the rank test (stats.per_request_series): all "
        f"of them up to the cap, else a fixed-seed random subsample of that many (default {SERIES_CAP}). A "
        "Mann-Whitney p against this night is then a p on the subsample."
    )
    series_requests: dict[str, int] = Field(description="Per latency family, values in the full series.")
    _points: np.ndarray | None = PrivateAttr(None)
    _log_se: np.ndarray | None = PrivateAttr(None)

    def point_array(self) -> np.ndarray:
        if self._points is None:
            self._points = _array(self.points)
        return self._points

    def log_se_array(self) -> np.ndarray:
        if self._log_se is None:
            self._log_se = _array(self.log_se)
        return self._log_se

    def series_array(self, family: str) -> np.ndarray | None:
        """The family's series as ``stats.per_request_series`` gives it; None for rate metrics."""
        values = self.series.get(family)
        return None if values is None else np.asarray(values, dtype=np.float64)


class ArmCapacitySummary(StrictModel):
    arm: str = Field(description="The run's arm.")
    capacity: ArmCapacity = Field(description="Its capacity at the SLO (sweep.arm_capacities, the policy's bootstrap).")
    measured_requests: int = Field(description="Measured requests of the arm over every level (warm-up share out).")


class NightSummary(StrictModel):
    """One night as the nightly gate needs it, past or present: small, and never the records."""

    summary_version: Literal[1] = Field(1, description="Version of this file's format.")
    run_id: str = Field(description="The run's id.")
    experiment: str = Field(description="The run's experiment name.")
    started_at: str = Field(description="UTC, ISO 8601: nights are ordered by it.")
    status: Literal["ok", "failed", "interrupted"] = Field(
        description="The run's status; a night not ok is never history, and is summarised without statistics."
    )
    config: ExperimentConfig = Field(
        description="The run's config: comparability (analysis.nightly's comparable sections, the sweep) is "
        "decided on it with the code of the night that reads it, as it was on the full result."
    )
    policy: SummaryPolicy = Field(description="What the numbers below were computed under.")
    gated: list[GatedArmSummary] = Field(
        description="Gated arms with at least two judged requests, in gated_view order (arm by arm, level by level)."
    )
    skipped: dict[str, str] = Field(description="Gated arms without statistics, and why.")
    warmup_excluded: dict[int, int] = Field(
        description="Round -> schedule slots cut as warm-up (MSER-5, as in the report); rounds without a cut left out."
    )
    capacities: list[ArmCapacitySummary] = Field(
        description="Per arm with a usable sweep, its capacity at the SLO, in arm order; empty without a sweep."
    )
    _by_name: dict[str, GatedArmSummary] | None = PrivateAttr(None)

    def gated_arm(self, name: str) -> GatedArmSummary | None:
        if self._by_name is None:
            self._by_name = {g.name: g for g in self.gated}
        return self._by_name.get(name)

    @property
    def n_gated(self) -> int:
        """Gated arms of the night, with statistics or not."""
        return len(self.gated) + len(self.skipped)

    def policy_differences(self, policy: NightlyPolicy) -> list[str]:
        """The value-changing policy fields this summary was made under differently from ``policy``."""
        now = summary_policy(policy, self.config)
        return [
            k
            for k in ("bootstrap_resamples", "seed", "steady_state", "slo")
            if getattr(self.policy, k) != getattr(now, k)
        ]


def _capped(series: np.ndarray, cap: int | None) -> np.ndarray:
    if cap is None or series.size <= cap:
        return series
    rng = np.random.default_rng(SERIES_SEED)
    return series[np.sort(rng.choice(series.size, cap, replace=False))]


def summarise_night(result: RunResult, policy: NightlyPolicy, series_cap: int | None = SERIES_CAP) -> NightSummary:
    """Judge ``result`` once as the gate does and keep what the gate needs of it (module docstring).

    The log SEs are drawn from one generator seeded with ``policy.seed``, arm after arm in gated_view
    order, exactly as the gate always drew them when it judged the night from its records: a night's
    verdict is the same from its summary. A night not ok gets no statistics: it is never history.
    """
    slo = policy.slo or result.config.slo
    gated: list[GatedArmSummary] = []
    skipped: dict[str, str] = {}
    cuts: dict[int, int] = {}
    capacities: list[ArmCapacitySummary] = []
    if result.status == "ok":
        view, names = gated_view(result)
        judged = judged_arms(view, slo, policy.steady_state or result.config.steady_state)
        skipped = dict(judged.skipped)
        cuts = {k: v for k, v in judged.cuts.items() if v}
        rng = np.random.default_rng(policy.seed)
        for name, (arm, level) in names.items():
            s = judged.samples.get(name)
            if s is None:
                continue
            points = stats.point_values(s)
            se = stats.arm_log_se(s, policy.bootstrap_resamples, rng)
            series: dict[str, list[float]] = {}
            total: dict[str, int] = {}
            for family in FAMILIES:
                full = stats.per_request_series(s, family)
                assert full is not None
                series[family] = _capped(full, series_cap).tolist()
                total[family] = int(full.size)
            gated.append(
                GatedArmSummary(
                    name=name,
                    arm=arm,
                    level=level,
                    requests=s.n,
                    points={k: _finite(v) for k, v in zip(stats.METRIC_KEYS, points, strict=True)},
                    log_se={k: _finite(v) for k, v in zip(stats.METRIC_KEYS, se, strict=True)},
                    series=series,
                    series_requests=total,
                )
            )
        caps = arm_capacities(result, policy.bootstrap_resamples, policy.seed, policy.slo)
        capacities = [
            ArmCapacitySummary(arm=a.name, capacity=caps[a.name], measured_requests=len(a.columns.measured))
            for a in result.arms
            if a.name in caps
        ]
    return NightSummary(
        run_id=result.run_id,
        experiment=result.experiment,
        started_at=result.started_at,
        status=result.status,
        config=result.config,
        policy=summary_policy(policy, result.config),
        gated=gated,
        skipped=skipped,
        warmup_excluded=cuts,
        capacities=capacities,
    )
