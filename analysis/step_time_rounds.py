"""The engines' own step times round by round: each comparison's B/A per round and phase, and over engine pairs.

Why: the verdicts pool an arm's rounds, and so does ``window_metrics``. With interleaved placement every round
starts a fresh engine per arm, so one round's B/A is one engine pair's, and pooling hides which pair, and which
engine, was off (hold 6 on the H200: the control's steps that carried a prefill took 15% longer than its
target's, in the middle place of both rounds). The engines' step timers measure the model step alone, without
the client, the schedule or the queue: ``moeperf_gpu_step_seconds`` between CUDA events around each step (where a
kernel change shows), ``moeperf_rank_step_seconds`` the host's share. Per comparison the report makes (A/A
controls included) and per phase: each arm's mean step per round from ``ArmResult.window_metrics_by_round``,
B/A per round, and the geometric mean of B/A over the engine pairs (``design.engine_pairs``) with a Student-t
interval on the log scale across them; one pair (placement parallel, or one round) gives no interval. That
interval is the pairs' own spread: no A/A term pooled in, no Bonferroni over phases, so a diagnostic beside
the verdicts, never one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analysis import design, fmt, stats
from analysis.verdicts import RunAnalysis, log_interval
from moe_opt.plugin.metrics import GPU_STEP_SECONDS, RANK_STEP_SECONDS
from result_format.run_result import ArmResult, RunResult, parse_series_key

PHASES = ("decode", "mixed", "prefill")
CI_LEVEL = 0.95
_FIELDS = {
    f"{GPU_STEP_SECONDS}_count": "gpu_steps",
    f"{GPU_STEP_SECONDS}_sum": "gpu_step_s",
    f"{RANK_STEP_SECONDS}_count": "host_steps",
    f"{RANK_STEP_SECONDS}_sum": "host_step_s",
}


def _mean_ms(total_s: float, steps: float) -> float | None:
    return 1e3 * total_s / steps if steps > 0 else None


def _ratio(b: float | None, a: float | None) -> float | None:
    return b / a if a is not None and b is not None and a > 0 and b > 0 else None


@dataclass(frozen=True)
class StepTotals:
    """One arm's steps of one phase over some rounds, every rank's together (at TP > 1 the ranks run the same
    steps, so the mean is the mean rank's step)."""

    gpu_steps: float = 0.0
    gpu_step_s: float = 0.0
    host_steps: float = 0.0
    host_step_s: float = 0.0

    def __add__(self, other: StepTotals) -> StepTotals:
        return StepTotals(
            self.gpu_steps + other.gpu_steps,
            self.gpu_step_s + other.gpu_step_s,
            self.host_steps + other.host_steps,
            self.host_step_s + other.host_step_s,
        )

    @property
    def gpu_step_mean_ms(self) -> float | None:
        return _mean_ms(self.gpu_step_s, self.gpu_steps)

    @property
    def host_step_mean_ms(self) -> float | None:
        return _mean_ms(self.host_step_s, self.host_steps)


NO_STEPS = StepTotals()


@dataclass(frozen=True)
class RoundStepTimes:
    """One round of one phase: both arms' engines of that round."""

    round: int
    a: StepTotals
    b: StepTotals

    @property
    def gpu_ratio(self) -> float | None:
        return _ratio(self.b.gpu_step_mean_ms, self.a.gpu_step_mean_ms)

    @property
    def host_ratio(self) -> float | None:
        return _ratio(self.b.host_step_mean_ms, self.a.host_step_mean_ms)


@dataclass(frozen=True)
class PooledRatio:
    """B/A over engine pairs: the geometric mean of the pairs' ratios and its interval (None from one pair)."""

    ratio: float | None
    ci: tuple[float, float] | None
    engine_pairs: int


@dataclass(frozen=True)
class PhaseStepTimes:
    phase: str
    rounds: tuple[RoundStepTimes, ...]
    gpu: PooledRatio
    host: PooledRatio


@dataclass(frozen=True)
class ComparisonStepTimes:
    a_arm: str
    b_arm: str
    kind: Literal["ab", "aa"]
    phases: tuple[PhaseStepTimes, ...]

    def phase(self, name: str) -> PhaseStepTimes | None:
        return next((p for p in self.phases if p.phase == name), None)


def round_steps(arm: ArmResult) -> dict[int, dict[str, StepTotals]]:
    """Round -> phase -> the arm's step totals in that round's window (every rank summed)."""
    out: dict[int, dict[str, StepTotals]] = {}
    for rnd, window in arm.window_metrics_by_round.items():
        acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for key, value in window.items():
            name, labels = parse_series_key(key)
            if name in _FIELDS and "phase" in labels:
                acc[labels["phase"]][_FIELDS[name]] += value
        out[rnd] = {phase: StepTotals(**fields) for phase, fields in acc.items()}
    return out


def geometric_mean(log_ratios: Sequence[float], level: float = CI_LEVEL) -> PooledRatio:
    """exp(mean log ratio) with exp(mean -/+ t sd / sqrt(K)) on K - 1 degrees of freedom; no interval for K < 2."""
    k = len(log_ratios)
    if not k:
        return PooledRatio(None, None, 0)
    d = np.asarray(log_ratios, dtype=float)
    mean = float(d.mean())
    ci = None
    if k >= 2:
        ci = log_interval(mean, float(d.std(ddof=1)) / math.sqrt(k), stats.t_two_sided(1 - level, k - 1))
    return PooledRatio(math.exp(mean), ci, k)


def _pooled(pairs: Sequence[tuple[StepTotals, StepTotals]], gpu: bool, level: float) -> PooledRatio:
    logs = []
    for a, b in pairs:
        r = _ratio(b.gpu_step_mean_ms, a.gpu_step_mean_ms) if gpu else _ratio(b.host_step_mean_ms, a.host_step_mean_ms)
        if r is not None:
            logs.append(math.log(r))
    return geometric_mean(logs, level)


def _phase_order(phase: str) -> tuple[int, str]:
    return (PHASES.index(phase) if phase in PHASES else len(PHASES), phase)


def compare_rounds(
    a: ArmResult,
    b: ArmResult,
    kind: Literal["ab", "aa"],
    placement: design.Placement,
    level: float = CI_LEVEL,
) -> ComparisonStepTimes:
    """B against A over the rounds both have step times for; a phase only where either arm ran a step of it."""
    ra, rb = round_steps(a), round_steps(b)
    shared = sorted(set(ra) & set(rb))
    groups = design.engine_pairs(placement, shared)
    phases = sorted({p for r in shared for p in (*ra[r], *rb[r])}, key=_phase_order)
    out = []
    for phase in phases:
        rows = tuple(RoundStepTimes(r, ra[r].get(phase, NO_STEPS), rb[r].get(phase, NO_STEPS)) for r in shared)
        by_round = {row.round: row for row in rows}
        pairs = []
        for group in groups:  # an engine pair's rounds, their steps together (several only with parallel engines)
            members = [by_round[r] for r in group]
            pairs.append((sum((m.a for m in members), NO_STEPS), sum((m.b for m in members), NO_STEPS)))
        out.append(PhaseStepTimes(phase, rows, _pooled(pairs, True, level), _pooled(pairs, False, level)))
    return ComparisonStepTimes(a.name, b.name, kind, tuple(out))


def step_time_rounds(result: RunResult, analysis: RunAnalysis, level: float = CI_LEVEL) -> list[ComparisonStepTimes]:
    """Every comparison of ``analysis`` (A/B first, then the A/A controls, as the reports list them) that has
    step times in a round of both arms; empty for results written before ``window_metrics_by_round``."""
    if not any(a.window_metrics_by_round for a in result.arms):
        return []
    out = []
    for c in analysis.in_report_order:
        x = compare_rounds(result.arm(c.a_arm), result.arm(c.b_arm), c.kind, analysis.placement, level)
        if x.phases:
            out.append(x)
    return out


# --- the reports' table (shared by the Markdown and the HTML) --------------------------------------------------

SECTION_TITLE = "Engine step times, round by round"
SECTION_INTRO = (
    "Each arm's mean model step per round and phase, from its engine's own timers: GPU time between CUDA events "
    "around each step, and the host's share of it (with asynchronous scheduling the host returns before the GPU "
    "ends). With interleaved placement each round is a fresh engine per arm, so a round's B/A is one engine "
    "pair's, and a round out of line names the engine that was off; A'/A is the A/A control's ratio in the same "
    "round. The last row of each phase is the geometric mean over the engine pairs with a "
    f"{CI_LEVEL:.0%} Student-t interval across them on the log scale (none from one pair). It rests on the pairs' "
    "own spread only: a diagnostic beside the verdicts, not one."
)
HEADERS = ["B vs A", "phase", "round", "A GPU step (ms)", "B GPU step (ms)", "GPU B/A", "A host step (ms)",
           "B host step (ms)", "host B/A"]  # fmt: skip
CONTROL_HEADERS = ["A'/A GPU", "A'/A host"]


def headers(comparisons: Sequence[ComparisonStepTimes]) -> list[str]:
    """The A/A columns only where the run has an A/A control."""
    return HEADERS + (CONTROL_HEADERS if any(c.kind == "aa" for c in comparisons) else [])


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _pooled_cell(p: PooledRatio) -> str:
    return fmt.ratio(p.ratio) + (f" {fmt.ratio_interval(p.ci)}" if p.ci is not None else "")


def _control_cells(controls: Sequence[ComparisonStepTimes], phase: str, rnd: int | None) -> list[str]:
    """A'/A of the controls of the comparison's A arm in one round (``rnd`` None: over their engine pairs)."""
    gpu, host = [], []
    for c in controls:
        p = c.phase(phase)
        if p is None:
            continue
        if rnd is None:
            gpu.append(_pooled_cell(p.gpu))
            host.append(_pooled_cell(p.host))
            continue
        row = next((r for r in p.rounds if r.round == rnd), None)
        if row is not None:
            gpu.append(fmt.ratio(row.gpu_ratio))
            host.append(fmt.ratio(row.host_ratio))
    return [", ".join(gpu) or "-", ", ".join(host) or "-"]


def table_rows(comparisons: Sequence[ComparisonStepTimes]) -> list[list[str]]:
    """Rows for ``headers(comparisons)``: per comparison and phase one per round, then the pooled one."""
    with_controls = any(c.kind == "aa" for c in comparisons)
    rows = []
    for c in comparisons:
        name = f"{c.b_arm} vs {c.a_arm}" + (" (A/A)" if c.kind == "aa" else "")
        controls = [x for x in comparisons if x.kind == "aa" and x.a_arm == c.a_arm] if c.kind == "ab" else []
        for p in c.phases:
            for r in p.rounds:
                cells = [name, p.phase, str(r.round), _ms(r.a.gpu_step_mean_ms), _ms(r.b.gpu_step_mean_ms),
                         fmt.ratio(r.gpu_ratio), _ms(r.a.host_step_mean_ms), _ms(r.b.host_step_mean_ms),
                         fmt.ratio(r.host_ratio)]  # fmt: skip
                rows.append(cells + (_control_cells(controls, p.phase, r.round) if with_controls else []))
            pairs = max(p.gpu.engine_pairs, p.host.engine_pairs)
            pooled = [name, p.phase, f"geo. mean, {pairs} engine pair(s)", "", "", _pooled_cell(p.gpu), "", "",
                      _pooled_cell(p.host)]  # fmt: skip
            rows.append(pooled + (_control_cells(controls, p.phase, None) if with_controls else []))
    return rows
