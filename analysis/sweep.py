"""The analysis of a load sweep: per level and arm, the throughput-interactivity frontier, capacity, B/A.

Per level, a view of the run holding only that level's measured requests (its warm-up share is
already marked, so no steady-state cut) goes through ``analyse_run`` unchanged: every metric of every
level gets the run's own verdict rules (engine-instance noise, the A/A noise floor, no verdict when
the design cannot estimate it), and nothing here can drift from them.

What a sweep adds needs more than one level at a time: the Pareto frontier of output throughput per
GPU against interactivity, B/A throughput at matched interactivity, and capacity (the highest load
meeting the SLO). Their within-engine error comes from one bootstrap: inside every (level, round)
the schedule slots are redrawn with replacement, the same draws for every arm (so the request mix
cancels in B/A, as in ``stats.slot_bootstrap``), every level point is recomputed from the drawn
requests and the frontier statistic from those points.

The engine-instance term of a B/A statistic comes from the design exactly as for every per-metric
verdict (``design``): the statistic is computed per engine pair (each round's requests alone when
interleaved) and for every A/A control, and the spread of those estimates beyond their bootstrap
error is tau^2, on their degrees of freedom. Borrowing the per-level *throughput* term instead would
miss half of it: an engine whose TPOT is 1% off moves its frontier along the interactivity axis, and
on a frontier that falls steeply that is a several-percent change of throughput at matched
interactivity. Without the term (one round, no A/A control) there is no verdict; an A/A control
against its target is the noise floor, never improved or regressed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from analysis import design, stats
from analysis.frontier import Censoring, Crossing, capacity_crossing, matched_grid, matched_logs, pareto_frontier
from analysis.samples import ArmSamples, arm_control_of
from analysis.steady_state import judged_arms
from analysis.verdicts import AnalysisSettings, RunAnalysis, Verdict, analyse_run, choose_baseline
from common.strict import StrictModel
from experiment.slo import SloSpec, slo_met
from result_format.run_result import RunResult
from workloads.metrics import RateEstimate, round_window
from workloads.record_columns import RecordColumns

CI_LEVEL = 0.95
"""Coverage of the per-arm intervals (level points, capacity): one arm's sampling error, no verdict on them."""
TABLE_LATENCIES = ("ttft_s_p50", "ttft_s_p90", "tpot_s_p50", "tpot_s_p90", "e2e_s_p90")

Interval = tuple[float, float]


class LatencyEstimate(StrictModel):
    metric: str = Field(description="Metric key as in the verdicts, e.g. 'ttft_s_p90'.")
    label: str = Field(description="Human label, e.g. 'TTFT p90'.")
    value_s: float | None = Field(description="The percentile over the level's measured requests, seconds.")
    ci_s: Interval | None = Field(description="Within-engine bootstrap interval at ci_level, seconds.")


class LevelArmPoint(StrictModel):
    """One arm at one level: its measured requests (warm-up share excluded) over every round."""

    arm: str = Field(description="Arm name.")
    level: int = Field(description="Position in sweep.levels.")
    label: str = Field(description="The level's label.")
    load: float = Field(description="The level's load, in the sweep's load_unit.")
    requests_measured: int = Field(description="Measured requests (warm-up excluded), failed ones included.")
    requests_succeeded: int = Field(description="Of which finished successfully.")
    slo_attainment: float | None = Field(description="Share of measured requests meeting the SLO; null: none.")
    slo_attainment_ci: Interval | None = Field(description="Bootstrap interval of slo_attainment at ci_level.")
    meets_slo: bool = Field(description="slo_attainment is at least the sweep's capacity_attainment.")
    output_tokens_per_s: RateEstimate | None = Field(
        description="Output tokens/s of the engine (all its GPUs), with the batch-means intervals of the Rates table."
    )
    output_tokens_per_s_per_gpu: float | None = Field(
        description="output_tokens_per_s / engine.tensor_parallel_size: the frontier's y."
    )
    output_tokens_per_s_per_gpu_ci: Interval | None = Field(
        description="Bootstrap interval (requests redrawn per level and round) of the per-GPU throughput: the band "
        "of the frontier chart."
    )
    interactivity_tokens_per_s_per_user: float | None = Field(
        description="1 / median TPOT of the measured requests: the token rate one user sees; the frontier's x."
    )
    interactivity_tokens_per_s_per_user_ci: Interval | None = Field(description="Its bootstrap interval.")
    requests_per_s: RateEstimate | None = Field(description="Successful requests per second, batch-means intervals.")
    goodput_rps: RateEstimate | None = Field(description="Requests meeting the SLO per second, batch-means intervals.")
    latencies: list[LatencyEstimate] = Field(description="TTFT, TPOT, ITL and E2E at p50, p90, p99.")

    def latency(self, key: str) -> LatencyEstimate | None:
        return next((x for x in self.latencies if x.metric == key), None)


class FrontierPoint(StrictModel):
    level: int = Field(description="Position in sweep.levels.")
    label: str = Field(description="The level's label.")
    load: float = Field(description="The level's load, in load_unit.")
    interactivity_tokens_per_s_per_user: float = Field(description="x: 1 / median TPOT.")
    output_tokens_per_s_per_gpu: float = Field(description="y: output tokens/s per GPU.")
    output_tokens_per_s_per_gpu_ci: Interval | None = Field(description="Bootstrap interval of y at ci_level.")
    on_frontier: bool = Field(description="No other level of the arm has both more throughput and interactivity.")


class ArmFrontier(StrictModel):
    arm: str = Field(description="Arm name.")
    points: list[FrontierPoint] = Field(description="Every level with both coordinates, by interactivity ascending.")

    @property
    def frontier(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.on_frontier]


class ArmCapacity(StrictModel):
    arm: str = Field(description="Arm name.")
    load_unit: str = Field(description="Unit of every load here.")
    capacity_load: float | None = Field(
        description="Highest load meeting the SLO: linear in attainment between the last level that meets it and the "
        "first (by load) that does not; the top load when censored 'above'; null when censored 'below'."
    )
    censored: Censoring = Field(
        description="'above': every level meets the SLO (capacity is at least the top load); 'below': the lowest "
        "level already misses it; 'none': a crossing inside the sweep."
    )
    ci_load: Interval | None = Field(
        description="Bootstrap percentile interval at ci_level; resamples beyond the sweep count as its top or lowest "
        "load, so a bound at either end means 'at least' / 'at most'. Null when censored 'below'."
    )
    lower_level: str | None = Field(description="Label of the last level meeting the SLO before the crossing.")
    upper_level: str | None = Field(description="Label of the first level (by load) that misses it.")
    meets_again: bool = Field(description="A level above the first miss meets the SLO again (capacity stays there).")
    at_interactivity_tokens_per_s_per_user: float | None = Field(
        description="Where the capacity falls on the arm's level curve (interpolated like the load): x."
    )
    at_output_tokens_per_s_per_gpu: float | None = Field(description="The same point's y.")
    text: str = Field(description="For tables: '4.44 concurrency', 'at least 8 concurrency', 'below 1 concurrency'.")


SweepStatisticKey = Literal["throughput_at_matched_interactivity", "capacity"]


class SweepStatistic(StrictModel):
    statistic: SweepStatisticKey = Field(description="Which B/A statistic.")
    label: str = Field(description="Human label.")
    unit: str = Field(description="Unit of a_value and b_value.")
    a_value: float | None = Field(
        description="A's value: geometric mean of its frontier's throughput per GPU over the matched range, or its "
        "capacity load."
    )
    b_value: float | None = Field(description="B's value, the same way.")
    ratio: float | None = Field(description="B/A; null when either side is undefined or censored.")
    ci: Interval | None = Field(
        description="Interval of B/A the verdict is decided on: bootstrap variance plus the engine-instance term, t on "
        "dof, family-wise over the comparison's sweep statistics. Null without an engine term and for the noise floor."
    )
    ci_within_engine: Interval | None = Field(description="Bootstrap alone (normal, same level): never decided on.")
    ci_level: float = Field(description="Coverage of both intervals (Bonferroni-corrected).")
    dof: int = Field(description="Degrees of freedom of the engine-instance term (0: not estimable).")
    engine_sd_rel: float | None = Field(description="SD of one engine's throughput offset, relative (levels' mean).")
    verdict: Verdict = Field(description="As for every metric: improved/regressed only beyond min_effect.")
    note: str | None = Field(None, description="Why there is no verdict, when there is none.")


class LevelVerdicts(StrictModel):
    """One level of one comparison, from that level's ``analyse_run`` comparison."""

    level: int = Field(description="Position in sweep.levels.")
    label: str = Field(description="The level's label.")
    load: float = Field(description="The level's load, in load_unit.")
    output_tokens_per_s_ratio: float | None = Field(description="B/A output tokens/s (equal per GPU: one TP size).")
    output_tokens_per_s_ci: Interval | None = Field(description="Its decision interval.")
    output_tokens_per_s_verdict: Verdict = Field(description="Its verdict.")
    output_tokens_per_s_pairs_needed: int | None = Field(
        None, description="Engine pairs at which a change of min_effect in it would be detectable (a projection)."
    )
    interactivity_ratio: float | None = Field(description="B/A interactivity: 1 / (B/A median TPOT).")
    interactivity_ci: Interval | None = Field(description="The TPOT p50 decision interval, inverted.")
    interactivity_verdict: Verdict = Field(description="The TPOT p50 verdict (lower TPOT is higher interactivity).")
    improved: list[str] = Field(description="Labels of the level's metrics judged improved.")
    regressed: list[str] = Field(description="Labels of the level's metrics judged regressed.")
    note: str | None = Field(None, description="Why the level has no comparison, when it has none.")


class SweepComparison(StrictModel):
    a_arm: str = Field(description="Baseline arm (denominator).")
    b_arm: str = Field(description="Compared arm (numerator).")
    kind: Literal["ab", "aa"] = Field(description="'aa' when B is a control copy of A: the noise floor.")
    controls: list[str] = Field(description="A/A controls whose discrepancy entered the engine term.")
    engine_pairs: int = Field(description="Independent engine pairs behind B/A.")
    design: str = Field(description="What the engine-instance term rests on, in words.")
    design_advice: str | None = Field(None, description="What to add for verdicts, when the design gives none.")
    matched_interactivity_tokens_per_s_per_user: Interval | None = Field(
        description="The interactivity range both frontiers cover, where throughput is compared; null: none."
    )
    throughput_at_matched_interactivity: SweepStatistic = Field(
        description="B/A output tokens/s per GPU at equal interactivity: the frontiers interpolated linearly on a grid "
        "even in log interactivity over the shared range, geometric mean of the ratio."
    )
    capacity: SweepStatistic = Field(description="B/A capacity load.")
    levels: list[LevelVerdicts] = Field(description="Per level, in sweep order.")


class SweepLevel(StrictModel):
    index: int = Field(description="Position in sweep.levels.")
    label: str = Field(description="The level's label.")
    load: float = Field(description="The level's load, in load_unit.")
    analysis: RunAnalysis = Field(description="analyse_run on this level's measured requests alone.")


class SweepAnalysis(StrictModel):
    run_id: str = Field(description="The run.")
    settings: AnalysisSettings = Field(description="The settings (each level's analysis ran with steady_state none).")
    slo: SloSpec = Field(description="The SLO goodput, attainment and capacity are judged against.")
    level_kind: str = Field(description="Kind of every level: concurrency, rate or trace_speed.")
    load_unit: str = Field(description="Unit of the load axis.")
    capacity_attainment: float = Field(description="Share of measured requests meeting the SLO for a level to meet it.")
    tensor_parallel_size: int = Field(description="GPUs per engine: the per-GPU divisor.")
    placement: design.Placement = Field(description="The run's placement.")
    baseline_arm: str | None = Field(description="Arm every B/A divides by; null when no arm is usable.")
    ci_level: float = Field(CI_LEVEL, description="Coverage of the per-arm intervals (points, capacity).")
    levels: list[SweepLevel] = Field(description="Per level, in sweep order.")
    points: list[LevelArmPoint] = Field(description="Per arm (run order) and level (sweep order).")
    frontiers: list[ArmFrontier] = Field(description="Per arm with level points.")
    capacities: list[ArmCapacity] = Field(description="Per arm with level points.")
    comparisons: list[SweepComparison] = Field(description="A/A controls first, then every arm against the baseline.")
    skipped_arms: dict[str, str] = Field(description="Arm -> why it has no sweep analysis.")
    notes: list[str] = Field(default_factory=list, description="What the reader should know about these numbers.")

    def point(self, arm: str, level: int) -> LevelArmPoint:
        return next(p for p in self.points if p.arm == arm and p.level == level)

    def frontier(self, arm: str) -> ArmFrontier:
        return next(f for f in self.frontiers if f.arm == arm)

    def capacity(self, arm: str) -> ArmCapacity:
        return next(c for c in self.capacities if c.arm == arm)

    def comparison(self, b_arm: str, a_arm: str | None = None) -> SweepComparison:
        return next(c for c in self.comparisons if c.b_arm == b_arm and (a_arm is None or c.a_arm == a_arm))


# --- views and the bootstrap -------------------------------------------------------------------------


def level_view(result: RunResult, level: int) -> RunResult:
    """The run as if it had served only level ``level``: every arm's measured requests of that level."""
    arms = [a.with_columns(a.columns.measured.at_level(level)) for a in result.arms]
    return result.model_copy(update={"arms": arms})


def _tokens(records: RecordColumns) -> np.ndarray:
    """Output tokens of each request as the rates count them (``workloads.metrics.token_events``), 0 if failed."""
    return np.where(records.ok, records.output_token_count, 0).astype(np.float64)


Rounds = tuple[int, ...] | None
"""A group of rounds (one engine pair), or None for all of them."""


@dataclass(frozen=True)
class _Values:
    """A level point in every bootstrap replicate; row 0 is the estimate itself (every request once)."""

    throughput_per_gpu: np.ndarray  # (B + 1,)
    interactivity: np.ndarray  # (B + 1,)
    attainment: np.ndarray  # (B + 1,)


@dataclass(frozen=True)
class _Cell:
    """One arm at one level: its measured requests as arrays and how often each replicate drew each."""

    arm: str
    level: int
    records: RecordColumns
    counts: np.ndarray  # (B + 1, n)
    tp: int
    tokens: np.ndarray  # output tokens per request, 0 for a failed one
    met: np.ndarray  # 1.0 where the request meets the SLO
    tpot_s: np.ndarray  # NaN where a request has none
    rounds: np.ndarray
    cache: dict[Rounds, _Values] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, arm: str, level: int, records: RecordColumns, counts: np.ndarray, slo: SloSpec, tp: int) -> _Cell:
        return cls(
            arm,
            level,
            records,
            counts,
            tp,
            _tokens(records),
            slo_met(records, slo).astype(np.float64),
            np.where(records.ok, records.tpot_s, np.nan),
            records.round.astype(np.int64),
        )

    def values(self, rounds: Rounds = None) -> _Values:
        """The point from the requests of ``rounds`` (None: all): tokens over the rounds' summed windows
        (as ``workloads.metrics`` counts a rate), 1 / median TPOT, the share meeting the SLO."""
        if rounds in self.cache:
            return self.cache[rounds]
        rows = self.counts.shape[0]
        keep = np.flatnonzero(np.isin(self.rounds, rounds) if rounds is not None else np.ones(len(self.records), bool))
        span = 0.0
        for rnd in np.unique(self.rounds[keep]):
            start, end = round_window(self.records, keep[self.rounds[keep] == rnd])
            span += max(end - start, 0.0)
        counts, tpot = np.take(self.counts, keep, axis=1), self.tpot_s[keep]  # take: C-ordered, row passes are fast
        drawn = counts.sum(axis=1)
        nan = np.full(rows, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            thr = counts @ self.tokens[keep] / span / self.tp if span > 0 and keep.size else nan
            att = np.where(drawn > 0, counts @ self.met[keep] / np.maximum(drawn, 1), np.nan) if keep.size else nan
            has = np.flatnonzero(np.isfinite(tpot))
            inter = nan
            if has.size:
                order = has[np.argsort(tpot[has], kind="stable")]
                med = stats.weighted_percentiles_batch(tpot[order], np.take(counts, order, axis=1), (50,))[:, 0]
                inter = np.where(med > 0, 1.0 / med, np.nan)
        out = _Values(thr, inter, att)
        self.cache[rounds] = out
        return out


def _level_counts(by_arm: dict[str, RecordColumns], resamples: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per arm, (resamples + 1, n) draw counts of its records: row 0 all ones, then slots redrawn inside each
    round with the same draws for every arm (a slot an arm does not have is skipped in that arm), as
    ``stats.slot_bootstrap`` does, failed requests included (they count against attainment)."""
    counts = {arm: np.zeros((resamples, len(recs)), dtype=np.int64) for arm, recs in by_arm.items()}
    rounds = sorted({rnd for recs in by_arm.values() for rnd in recs.rounds()})
    for rnd in rounds:
        slots = np.unique(np.concatenate([recs.index[recs.round == rnd] for recs in by_arm.values()]))
        drawn = slots[rng.integers(0, slots.size, (resamples, slots.size))]
        rows = np.repeat(np.arange(resamples), slots.size)
        for arm, recs in by_arm.items():
            at = np.flatnonzero(recs.round == rnd)
            mine = np.stack([at, recs.index[at]], axis=1)
            if mine.size == 0:
                continue
            lookup = np.full(int(slots.max()) + 1, -1, dtype=np.int64)
            lookup[mine[:, 1]] = mine[:, 0]
            pos = lookup[drawn].ravel()
            keep = pos >= 0
            np.add.at(counts[arm], (rows[keep], pos[keep]), 1)
    return {arm: np.vstack([np.ones((1, c.shape[1]), dtype=np.int64), c]) for arm, c in counts.items()}


def _percentile_ci(reps: np.ndarray, level: float = CI_LEVEL) -> Interval | None:
    finite = reps[np.isfinite(reps)]
    if finite.size < max(10, int(0.95 * reps.size)):
        return None
    lo, hi = np.percentile(finite, [50 * (1 - level), 50 * (1 + level)])
    return (float(lo), float(hi))


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# --- per arm: points, frontier, capacity ---------------------------------------------------------------

_QUANTILE_SPECS = stats.METRICS[: stats.N_QUANTILE]


def _no_latencies() -> list[LatencyEstimate]:
    return [LatencyEstimate(metric=m.key, label=m.label, value_s=None, ci_s=None) for m in _QUANTILE_SPECS]


def _latencies(
    samples: ArmSamples | None, settings: AnalysisSettings, rng: np.random.Generator
) -> list[LatencyEstimate]:
    """Every latency percentile of one arm at one level with its within-engine bootstrap interval
    (``stats.arm_log_se``, the nightly gate's per-arm error)."""
    if samples is None:
        return _no_latencies()
    values = stats.point_values(samples)
    se = stats.arm_log_se(samples, settings.bootstrap_resamples, rng)
    z = stats.z_two_sided(1 - CI_LEVEL)
    out = []
    for j, m in enumerate(_QUANTILE_SPECS):
        v, s = float(values[j]), float(se[j])
        ci = (v * math.exp(-z * s), v * math.exp(z * s)) if math.isfinite(v) and v > 0 and math.isfinite(s) else None
        out.append(LatencyEstimate(metric=m.key, label=m.label, value_s=_finite(v), ci_s=ci))
    return out


def _point(
    cell: _Cell | None,
    arm: str,
    level: SweepLevel,
    samples: ArmSamples | None,
    settings: AnalysisSettings,
    rng: np.random.Generator,
    threshold: float,
) -> LevelArmPoint:
    records = cell.records if cell is not None else RecordColumns.empty()
    rates = level.analysis.arm_rates.get(arm)
    v = cell.values() if cell is not None else None
    att = _finite(float(v.attainment[0])) if v is not None else None
    return LevelArmPoint(
        arm=arm,
        level=level.index,
        label=level.label,
        load=level.load,
        requests_measured=len(records),
        requests_succeeded=int(records.ok.sum()),
        slo_attainment=att,
        slo_attainment_ci=_percentile_ci(v.attainment[1:]) if v is not None else None,
        meets_slo=att is not None and att >= threshold,
        output_tokens_per_s=rates.output_tokens_per_s if rates else None,
        output_tokens_per_s_per_gpu=_finite(float(v.throughput_per_gpu[0])) if v is not None else None,
        output_tokens_per_s_per_gpu_ci=_percentile_ci(v.throughput_per_gpu[1:]) if v is not None else None,
        interactivity_tokens_per_s_per_user=_finite(float(v.interactivity[0])) if v is not None else None,
        interactivity_tokens_per_s_per_user_ci=_percentile_ci(v.interactivity[1:]) if v is not None else None,
        requests_per_s=rates.requests_per_s if rates else None,
        goodput_rps=rates.goodput_rps if rates else None,
        latencies=_latencies(samples, settings, rng),
    )


@dataclass(frozen=True)
class _ArmLevels:
    """One arm's cells at every level in load order (an empty cell where it has no measured request)."""

    arm: str
    cells: list[_Cell]
    loads: list[float]
    labels: list[str]
    rows: int
    threshold: float  # the sweep's capacity_attainment

    def stack(self, rounds: Rounds, what: str) -> np.ndarray:
        cols = [getattr(c.values(rounds), what) if len(c.records) else np.full(self.rows, np.nan) for c in self.cells]
        return np.stack(cols, axis=1)

    def curves(self, rounds: Rounds = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per replicate row, the arm's Pareto frontier as (x ascending, y) arrays."""
        xs, ys = self.stack(rounds, "interactivity"), self.stack(rounds, "throughput_per_gpu")
        out = []
        for x, y in zip(xs, ys, strict=True):
            idx = pareto_frontier(list(x), list(y))
            out.append((x[idx], y[idx]))
        return out

    def crossings(self, rounds: Rounds = None) -> list[Crossing]:
        """Per replicate row, where attainment first falls below the threshold."""
        return [capacity_crossing(self.loads, row, self.threshold) for row in self.stack(rounds, "attainment")]

    def rounds(self) -> set[int]:
        return {rnd for c in self.cells for rnd in c.records.rounds()}


def _frontier(al: _ArmLevels) -> ArmFrontier:
    xs, ys = al.stack(None, "interactivity"), al.stack(None, "throughput_per_gpu")
    on = set(pareto_frontier(list(xs[0]), list(ys[0])))
    pts = [
        FrontierPoint(
            level=c.level,
            label=al.labels[k],
            load=al.loads[k],
            interactivity_tokens_per_s_per_user=float(xs[0, k]),
            output_tokens_per_s_per_gpu=float(ys[0, k]),
            output_tokens_per_s_per_gpu_ci=_percentile_ci(ys[1:, k]),
            on_frontier=k in on,
        )
        for k, c in enumerate(al.cells)
        if math.isfinite(xs[0, k]) and math.isfinite(ys[0, k])
    ]
    return ArmFrontier(arm=al.arm, points=sorted(pts, key=lambda p: p.interactivity_tokens_per_s_per_user))


def _capacity(al: _ArmLevels, unit: str) -> ArmCapacity:
    crossings = al.crossings()
    point, loads = crossings[0], al.loads
    clipped = np.array([loads[0] if c.censored == "below" else c.load for c in crossings[1:]])
    at_x = at_y = None
    xs, ys = al.stack(None, "interactivity")[0], al.stack(None, "throughput_per_gpu")[0]
    if point.censored == "none" and point.lower is not None and point.upper is not None:
        i, j, f = point.lower, point.upper, point.fraction
        at_x, at_y = _finite(xs[i] + f * (xs[j] - xs[i])), _finite(ys[i] + f * (ys[j] - ys[i]))
    elif point.censored == "above":
        at_x, at_y = _finite(xs[-1]), _finite(ys[-1])
    if point.censored == "above":
        text = f"at least {loads[-1]:g} {unit}"
    elif point.censored == "below":
        text = f"below {loads[0]:g} {unit}"
    else:
        text = f"{point.load:.3g} {unit}"
    return ArmCapacity(
        arm=al.arm,
        load_unit=unit,
        capacity_load=_finite(point.load),
        censored=point.censored,
        ci_load=_percentile_ci(clipped) if point.censored != "below" else None,
        lower_level=al.labels[point.lower] if point.lower is not None else None,
        upper_level=al.labels[point.upper] if point.upper is not None else None,
        meets_again=point.meets_again,
        at_interactivity_tokens_per_s_per_user=at_x,
        at_output_tokens_per_s_per_gpu=at_y,
        text=text,
    )


# --- B/A statistics ---------------------------------------------------------------------------------------

STATISTIC_KEYS: tuple[SweepStatisticKey, ...] = ("throughput_at_matched_interactivity", "capacity")


def _pair_logs(a: _ArmLevels, b: _ArmLevels, rounds: Rounds) -> np.ndarray:
    """(B + 1, 2) log(B/A) of both statistics from the requests of ``rounds``; NaN where undefined (no shared
    interactivity; a capacity the sweep does not bracket)."""
    ca, cb = a.curves(rounds), b.curves(rounds)
    matched = np.array([matched_logs(*x, *y)[2] for x, y in zip(ca, cb, strict=True)])
    ka, kb = a.crossings(rounds), b.crossings(rounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.array(
            [
                math.log(y.load / x.load) if x.censored == y.censored == "none" and x.load > 0 else math.nan
                for x, y in zip(ka, kb, strict=True)
            ]
        )
    return np.stack([matched, cap], axis=1)


def _paired_estimates(a: _ArmLevels, b: _ArmLevels, placement: design.Placement) -> stats.PairedEstimates:
    """Both B/A statistics per engine pair and their mean, in the form ``design`` reads, so the sweep's
    statistics get their engine-instance term exactly as every per-metric verdict does: an engine offset
    moves the frontier in throughput *and* in interactivity, and only the statistic's own spread over
    engine pairs (and A/A controls) sees both."""
    pairs = design.engine_pairs(placement, sorted(a.rounds() & b.rounds()))
    d, s = [], []
    for group in pairs:
        logs = _pair_logs(a, b, tuple(group))
        d.append(logs[0])
        s.append(stats.log_se(logs[1:]))
    if not d:
        nan = np.full(len(STATISTIC_KEYS), np.nan)
        return stats.PairedEstimates(nan, nan, np.empty((0, len(nan))), np.empty((0, len(nan))))
    dk, sk = np.stack(d), np.stack(s)
    return stats.PairedEstimates(dk.mean(axis=0), np.sqrt(np.sum(sk**2, axis=0)) / len(pairs), dk, sk)


def _statistic(
    j: int,
    label: str,
    unit: str,
    a_value: float | None,
    b_value: float | None,
    est: stats.PairedEstimates,
    noise: design.EngineNoise,
    kind: Literal["ab", "aa"],
    settings: AnalysisSettings,
    missing: str | None,
) -> SweepStatistic:
    """One B/A statistic judged by the rule of ``verdicts.compare_samples``: W = max(tau^2 / K + se_within^2,
    V / K), t on the engine term's dof, Bonferroni over the comparison's sweep statistics, min_effect."""
    alpha_j = settings.alpha / len(STATISTIC_KEYS)
    lr, se_w = float(est.log_ratio[j]), float(est.se_within[j])
    dof = int(noise.dof[j])
    z = stats.z_two_sided(alpha_j)
    ratio = math.exp(lr) if math.isfinite(lr) else None
    within = (math.exp(lr - z * se_w), math.exp(lr + z * se_w)) if ratio is not None and math.isfinite(se_w) else None
    ci: Interval | None = None
    note: str | None = None
    verdict: Verdict = "not measured"
    if missing is not None or ratio is None:
        ratio, within = None, None
        note = missing or "undefined in an engine pair (no shared interactivity, or capacity not bracketed)"
    elif not math.isfinite(se_w):
        note = "undefined in too many bootstrap resamples"
    elif kind == "aa":
        verdict = "noise floor"
    elif dof == 0:
        verdict = "no verdict (design)"
        note = "engine-instance noise not estimable: one engine per arm and no A/A control"
    else:
        se = math.sqrt(noise.variance(j, est.pairs, se_w))
        q = stats.t_two_sided(alpha_j, dof)
        lo, hi = math.exp(lr - q * se), math.exp(lr + q * se)
        ci = (lo, hi)
        big = abs(math.expm1(lr)) >= settings.min_effect
        verdict = "improved" if lo > 1 and big else "regressed" if hi < 1 and big else "no detectable difference"
    return SweepStatistic(
        statistic=STATISTIC_KEYS[j],
        label=label,
        unit=unit,
        a_value=a_value,
        b_value=b_value,
        ratio=ratio,
        ci=ci,
        ci_within_engine=within,
        ci_level=1 - alpha_j,
        dof=dof,
        engine_sd_rel=_finite(float(noise.engine_sd_rel[j])) if dof > 0 else None,
        verdict=verdict,
        note=note,
    )


def _level_verdicts(level: SweepLevel, a: str, b: str) -> LevelVerdicts:
    c = next((x for x in level.analysis.comparisons if x.a_arm == a and x.b_arm == b), None)
    if c is None:
        why = level.analysis.skipped_arms.get(b) or level.analysis.skipped_arms.get(a) or "arm not usable here"
        return LevelVerdicts(
            level=level.index,
            label=level.label,
            load=level.load,
            output_tokens_per_s_ratio=None,
            output_tokens_per_s_ci=None,
            output_tokens_per_s_verdict="not measured",
            interactivity_ratio=None,
            interactivity_ci=None,
            interactivity_verdict="not measured",
            improved=[],
            regressed=[],
            note=f"not compared at this level: {why}",
        )
    thr, tpot = c.metric("output_tokens_per_s"), c.metric("tpot_s_p50")
    return LevelVerdicts(
        level=level.index,
        label=level.label,
        load=level.load,
        output_tokens_per_s_ratio=thr.ratio,
        output_tokens_per_s_ci=thr.ci,
        output_tokens_per_s_verdict=thr.verdict,
        output_tokens_per_s_pairs_needed=thr.pairs_for_min_effect,
        interactivity_ratio=1 / tpot.ratio if tpot.ratio else None,
        interactivity_ci=(1 / tpot.ci[1], 1 / tpot.ci[0]) if tpot.ci else None,
        interactivity_verdict=tpot.verdict,
        improved=[m.label for m in c.with_verdict("improved")],
        regressed=[m.label for m in c.with_verdict("regressed")],
    )


def _pairs(
    result: RunResult, usable: Sequence[str], baseline: str | None
) -> list[tuple[str, str, Literal["ab", "aa"]]]:
    """(A, B, kind) in the order ``compare_arms`` lists them: controls first, then arms against the baseline."""
    out: list[tuple[str, str, Literal["ab", "aa"]]] = []
    for a in result.arms:
        target = arm_control_of(a)
        if target and a.name in usable and target in usable:
            out.append((target, a.name, "aa"))
    if baseline is not None:
        for a in result.arms:
            if a.name != baseline and a.name in usable and not arm_control_of(a):
                out.append((baseline, a.name, "ab"))
    return out


def _compare(
    a: _ArmLevels,
    b: _ArmLevels,
    kind: Literal["ab", "aa"],
    est: stats.PairedEstimates,
    controls: Sequence[tuple[str, stats.PairedEstimates]],
    levels: Sequence[SweepLevel],
    capacities: dict[str, ArmCapacity],
    placement: design.Placement,
    unit: str,
    settings: AnalysisSettings,
) -> SweepComparison:
    terms = [design.control_term(e) for _, e in controls]
    if kind == "ab":
        terms.append(design.own_term(est))
    noise = design.pool(terms, len(STATISTIC_KEYS))
    (ax, ay), (bx, by) = a.curves()[0], b.curves()[0]
    grid = matched_grid(ax, bx)
    la, lb, _ = matched_logs(ax, ay, bx, by)
    matched = _statistic(
        0,
        "output tokens/s per GPU at matched interactivity",
        "tok/s/GPU",
        _finite(math.exp(la)) if math.isfinite(la) else None,
        _finite(math.exp(lb)) if math.isfinite(lb) else None,
        est,
        noise,
        kind,
        settings,
        None if grid is not None else "the two frontiers share no interactivity range",
    )
    cap_a, cap_b = capacities[a.arm], capacities[b.arm]
    censored = [c for c in (cap_a, cap_b) if c.censored != "none"]
    missing = "; ".join(f"capacity of {c.arm} is {c.text}: the sweep does not bracket it" for c in censored)
    capacity = _statistic(
        1,
        "capacity (highest load meeting the SLO)",
        unit,
        cap_a.capacity_load if cap_a.censored == "none" else None,
        cap_b.capacity_load if cap_b.censored == "none" else None,
        est,
        noise,
        kind,
        settings,
        missing or None,
    )
    names = [n for n, _ in controls]
    max_dof = int(noise.dof.max()) if noise.dof.size else 0
    return SweepComparison(
        a_arm=a.arm,
        b_arm=b.arm,
        kind=kind,
        controls=names,
        engine_pairs=est.pairs,
        design=design.describe(placement, est.pairs, names, max_dof),
        # Advice only where the design lacks engines: with two pairs or a control, a dof of 0 is a statistic
        # with nothing to measure (one level: no frontier to match), which more rounds would not change.
        design_advice=(
            design.design_advice(placement, a.arm)
            if kind == "ab" and max_dof == 0 and est.pairs < 2 and not names
            else None
        ),
        matched_interactivity_tokens_per_s_per_user=(float(grid[0]), float(grid[-1])) if grid is not None else None,
        throughput_at_matched_interactivity=matched,
        capacity=capacity,
        levels=[_level_verdicts(lv, a.arm, b.arm) for lv in levels],
    )


# --- the entry point -----------------------------------------------------------------------------------


def analyse_sweep(result: RunResult, settings: AnalysisSettings | None = None) -> SweepAnalysis | None:
    """Per level and arm, frontiers, capacities and B/A of a sweep run; None for a run without a sweep."""
    sweep = result.config.sweep
    if sweep is None:
        return None
    settings = settings or AnalysisSettings()
    slo = settings.slo or result.config.slo
    level_settings = settings.model_copy(update={"steady_state": "none"})
    tp = result.config.engine.tensor_parallel_size
    placement = result.config.placement
    rng = np.random.default_rng(settings.seed)
    rows = settings.bootstrap_resamples + 1
    labels = [lv.label() for lv in sweep.levels]
    loads = [lv.load for lv in sweep.levels]
    by_load = sorted(range(len(loads)), key=lambda i: (loads[i], i))
    skipped = {a.name: f"arm {a.status}: {a.failure_reason or 'no reason recorded'}" for a in result.arms
               if a.status != "ok"}  # fmt: skip
    ok_arms = [a.name for a in result.arms if a.status == "ok"]

    levels: list[SweepLevel] = []
    cells: dict[tuple[str, int], _Cell] = {}
    points: list[LevelArmPoint] = []
    for i in range(len(sweep.levels)):
        view = level_view(result, i)
        level = SweepLevel(index=i, label=labels[i], load=loads[i], analysis=analyse_run(view, level_settings))
        levels.append(level)
        by_arm = {a.name: a.columns for a in view.arms if a.status == "ok" and len(a.columns)}
        counts = _level_counts(by_arm, settings.bootstrap_resamples, rng) if by_arm else {}
        for arm, recs in by_arm.items():
            cells[(arm, i)] = _Cell.of(arm, i, recs, counts[arm], slo, tp)
        samples = judged_arms(view, slo, "none").samples
        points += [_point(cells.get((arm, i)), arm, level, samples.get(arm), settings, rng, sweep.capacity_attainment)
                   for arm in ok_arms]  # fmt: skip

    usable = [arm for arm in ok_arms if any((arm, i) in cells for i in range(len(labels)))]
    skipped.update({arm: "no measured request at any level" for arm in ok_arms if arm not in usable})
    arm_levels: dict[str, _ArmLevels] = {}
    for arm in usable:
        none = np.ones((rows, 0), dtype=np.int64)
        arm_cells = [cells.get((arm, i)) or _Cell.of(arm, i, RecordColumns.empty(), none, slo, tp) for i in by_load]
        arm_levels[arm] = _ArmLevels(arm, arm_cells, [loads[i] for i in by_load], [labels[i] for i in by_load], rows,
                                     sweep.capacity_attainment)  # fmt: skip
    capacities = {arm: _capacity(al, sweep.load_unit) for arm, al in arm_levels.items()}

    baseline = choose_baseline(result, usable, settings.baseline_arm)
    pairs = _pairs(result, usable, baseline)
    estimates = {(a, b): _paired_estimates(arm_levels[a], arm_levels[b], placement) for a, b, _ in pairs}
    controls = [(b, estimates[(a, b)]) for a, b, kind in pairs if kind == "aa"]
    comparisons = [
        _compare(arm_levels[a], arm_levels[b], kind, estimates[(a, b)], controls, levels, capacities, placement,
                 sweep.load_unit, settings)
        for a, b, kind in pairs
    ]  # fmt: skip
    notes = [
        "Interactivity is 1 / median TPOT of a level's measured requests (tokens/s one user sees); throughput per "
        f"GPU is the engine's output tokens/s over tensor_parallel_size ({tp}).",
        f"A level meets the SLO when at least {sweep.capacity_attainment:.0%} of its measured requests meet "
        f"{slo.describe()}; capacity is interpolated between the last level meeting it and the first (by load) "
        "that does not.",
        "Each level's verdicts come from its measured requests alone (warm-up share excluded, no steady-state cut); "
        "each level is its own Bonferroni family, so across many levels one chance flag is more likely than in one.",
    ]
    return SweepAnalysis(
        run_id=result.run_id,
        settings=settings,
        slo=slo,
        level_kind=sweep.levels[0].kind,
        load_unit=sweep.load_unit,
        capacity_attainment=sweep.capacity_attainment,
        tensor_parallel_size=tp,
        placement=placement,
        baseline_arm=baseline,
        levels=levels,
        points=points,
        frontiers=[_frontier(al) for al in arm_levels.values()],
        capacities=list(capacities.values()),
        comparisons=comparisons,
        skipped_arms=skipped,
        notes=notes,
    )


def arm_capacities(
    result: RunResult, resamples: int, seed: int = 0, slo: SloSpec | None = None
) -> dict[str, ArmCapacity]:
    """Capacity of every usable arm as ``analyse_sweep`` computes it (the same level cells, the same slot
    bootstrap inside every level and round, ``resamples`` replicates from ``seed``), without the per-level
    analyses: what the nightly gate needs of every night. The estimate is ``analyse_sweep``'s; the interval
    comes from draws of its own. Empty for a run without a sweep."""
    sweep = result.config.sweep
    if sweep is None:
        return {}
    slo = slo or result.config.slo
    tp = result.config.engine.tensor_parallel_size
    rng = np.random.default_rng(seed)
    labels = [lv.label() for lv in sweep.levels]
    loads = [lv.load for lv in sweep.levels]
    by_load = sorted(range(len(loads)), key=lambda i: (loads[i], i))
    ok_arms = [a for a in result.arms if a.status == "ok"]
    cells: dict[tuple[str, int], _Cell] = {}
    for i in range(len(sweep.levels)):
        by_arm = {a.name: recs for a in ok_arms if len(recs := a.columns.measured.at_level(i))}
        counts = _level_counts(by_arm, resamples, rng) if by_arm else {}
        for arm, recs in by_arm.items():
            cells[(arm, i)] = _Cell.of(arm, i, recs, counts[arm], slo, tp)
    out: dict[str, ArmCapacity] = {}
    for a in ok_arms:
        if not any((a.name, i) in cells for i in by_load):
            continue
        empty = np.ones((resamples + 1, 0), dtype=np.int64)
        arm_cells = [
            cells.get((a.name, i)) or _Cell.of(a.name, i, RecordColumns.empty(), empty, slo, tp) for i in by_load
        ]
        al = _ArmLevels(a.name, arm_cells, [loads[i] for i in by_load], [labels[i] for i in by_load], resamples + 1,
                        sweep.capacity_attainment)  # fmt: skip
        out[a.name] = _capacity(al, sweep.load_unit)
    return out
