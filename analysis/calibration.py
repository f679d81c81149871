"""Calibration by simulation: false-flag rate and power of a design, through the real verdict code.

Each trial builds the arms of one synthetic run (``analysis.synthetic``: request, within-engine and
engine-instance noise at the sizes measured on an H200) and judges it with
``analysis.verdicts.compare_arms``, the function ``analyse_run`` uses after reading a result file.
A trial is a *false flag* when the A/B comparison of two arms with identical settings gets any
"improved" or "regressed" verdict: the share of such trials is the family-wise false-positive rate
of the design, which must stay at or under alpha. With a planted effect, the share of trials that
flag the planted metric in the right direction is the power.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from analysis import stats, synthetic
from analysis.design import Placement
from analysis.samples import ArmSamples
from analysis.verdicts import DECIDED, AnalysisSettings, ArmComparison, compare_arms


@dataclass(frozen=True)
class Design:
    """How a run is laid out: what decides how many engine instances a comparison rests on."""

    name: str
    rounds: int = 1
    control: bool = False
    placement: Placement = "interleaved"


@dataclass(frozen=True)
class NoiseModel:
    """The noise of a simulated run; defaults are the sizes measured on an H200."""

    requests: int = 400
    rate_rps: float = 10.0
    request_sigma: float = 0.5  # request-to-request spread, shared by every arm (same schedule)
    within_sigma: float = 0.0015  # a request's own jitter on one engine (H200: TTFT p90 A/A interval +-0.45%)
    engine_latency_sd: float = 0.013  # log SD of one engine's latency offset (TTFT and TPOT, independent)
    engine_rate_sd: float = 0.010  # log SD of one engine's throughput offset

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class Effect:
    """What the candidate arm B changes (1.0: nothing)."""

    tpot_scale: float = 1.0
    ttft_scale: float = 1.0
    rate_scale: float = 1.0


def _offsets(rng: np.random.Generator, design: Design, noise: NoiseModel) -> list[synthetic.EngineOffset]:
    if design.placement == "parallel":
        return [synthetic.draw_offset(rng, noise.engine_latency_sd, noise.engine_rate_sd)] * design.rounds
    return [synthetic.draw_offset(rng, noise.engine_latency_sd, noise.engine_rate_sd) for _ in range(design.rounds)]


def simulate(
    design: Design, noise: NoiseModel, effect: Effect, seed: int, settings: AnalysisSettings
) -> tuple[ArmComparison, ArmComparison | None]:
    """One run: baseline, candidate (with ``effect``), and an A/A control when the design has one; returns
    (candidate vs baseline, the A/A noise floor or None) as the run's analysis judges them."""
    rng = np.random.default_rng(seed)
    schedule = synthetic.make_schedule(noise.requests, seed, noise.request_sigma, noise.rate_rps, poisson=True)

    def arm(name: str, e: Effect) -> ArmSamples:
        return synthetic.synthetic_samples(
            name, schedule, rng, _offsets(rng, design, noise), e.ttft_scale, e.tpot_scale, e.rate_scale,
            sigma=noise.within_sigma,
        )  # fmt: skip

    samples = {"baseline": arm("baseline", Effect()), "candidate": arm("candidate", effect)}
    control_of: dict[str, str | None] = {"baseline": None, "candidate": None}
    if design.control:
        samples["baseline-aa"] = arm("baseline-aa", Effect())
        control_of = {"baseline": None, "baseline-aa": "baseline", "candidate": None}
    seeded = settings.model_copy(update={"seed": seed})
    comparisons = compare_arms(samples, control_of, "baseline", seeded, design.placement)
    ab = next(c for c in comparisons if c.kind == "ab")
    return ab, next((c for c in comparisons if c.kind == "aa"), None)


def legacy_flags(ab: ArmComparison, aa: ArmComparison | None, settings: AnalysisSettings) -> bool:
    """Whether the rule before engine-instance noise would have flagged this comparison (for the benchmark).

    That rule decided on the within-engine interval (normal, Bonferroni z), widened only by the A/A
    control's discrepancy beyond its own error plugged in as a known variance; rates of a one-round
    run had no interval, so no verdict.
    """
    z = stats.z_two_sided(settings.alpha / len(ab.metrics))
    for m in ab.metrics:
        if m.verdict == "not measured" or m.ci_within_engine is None or m.ratio is None:
            continue
        if m.unit != "s" and ab.shared_rounds < 2:
            continue
        se = math.log(m.ci_within_engine[1] / m.ci_within_engine[0]) / (2 * z)
        var = se**2
        floor = aa.metric(m.metric) if aa is not None else None
        if floor is not None and floor.ratio and floor.ci_within_engine is not None:
            aa_se = math.log(floor.ci_within_engine[1] / floor.ci_within_engine[0]) / (2 * z)
            var += max(0.0, math.log(floor.ratio) ** 2 - aa_se**2)
        if abs(math.log(m.ratio)) > z * math.sqrt(var) and abs(m.ratio - 1) >= settings.min_effect:
            return True
    return False


def flagged(c: ArmComparison) -> bool:
    return any(m.verdict in DECIDED for m in c.metrics)


@dataclass(frozen=True)
class Tally:
    trials: int
    hits: int

    @property
    def rate(self) -> float:
        return self.hits / self.trials if self.trials else float("nan")

    def interval(self) -> tuple[float, float]:
        """95% Wilson interval of the rate."""
        n, p, z = self.trials, self.rate, 1.959964
        if n == 0:
            return (float("nan"), float("nan"))
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))


@dataclass(frozen=True)
class FalseFlags:
    tally: Tally  # runs with any verdict, the method here
    legacy: Tally  # runs the rule before engine-instance noise would have flagged
    verdicts: list[str]  # every verdict seen


def false_flag_rate(
    design: Design, noise: NoiseModel, trials: int, settings: AnalysisSettings, seed0: int = 0
) -> FalseFlags:
    """Share of A/A runs (candidate identical to baseline) with any verdict, now and under the old rule."""
    hits = old = 0
    seen: set[str] = set()
    for t in range(trials):
        ab, aa = simulate(design, noise, Effect(), seed0 + t, settings)
        hits += flagged(ab)
        old += legacy_flags(ab, aa, settings)
        seen |= {m.verdict for m in ab.metrics}
    return FalseFlags(Tally(trials, hits), Tally(trials, old), sorted(seen))


def power(
    design: Design,
    noise: NoiseModel,
    effect: Effect,
    metric: str,
    direction: Literal["improved", "regressed"],
    trials: int,
    settings: AnalysisSettings,
    seed0: int = 0,
) -> tuple[Tally, Tally]:
    """(share of runs giving ``metric`` the right verdict, share with any wrong-direction verdict)."""
    hits = wrong = 0
    other: str = "regressed" if direction == "improved" else "improved"
    for t in range(trials):
        ab, _ = simulate(design, noise, effect, seed0 + t, settings)
        hits += ab.metric(metric).verdict == direction
        wrong += any(m.verdict == other for m in ab.metrics)
    return Tally(trials, hits), Tally(trials, wrong)


def designs(names: Sequence[str]) -> list[Design]:
    """Designs by name: '1r', '1r+aa', '4r', '6r+aa', 'p4r+aa' (parallel) ..."""
    out = []
    for name in names:
        placement: Placement = "parallel" if name.startswith("p") else "interleaved"
        body = name.lstrip("p")
        control = body.endswith("+aa")
        rounds = int(body.removesuffix("+aa").removesuffix("r"))
        out.append(Design(name, rounds, control, placement))
    return out
