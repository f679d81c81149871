"""Engine-instance noise: what a run's design can say about the difference between two engines.

Two engines with identical settings differ: on an H200, 1-1.5% in latency and about 1% in
throughput between instances is normal (placement, clocks, memory layout, warm state). Resampling
one engine's requests never sees it, so a one-engine-per-arm comparison reads an engine offset as
an effect of the configuration. The model, per metric, on the log scale:

    d_k = delta + (u_Bk - u_Ak) + e_k,   u ~ N(0, sigma_e^2),   e_k ~ N(0, s_k^2)

d_k is log(B/A) of engine pair k, u the engine offsets, s_k the within-engine error (bootstrap /
batch means). tau^2 = 2 sigma_e^2 is the engine-pair variance. It is estimated from

* the comparison's own engine pairs (interleaved placement, one fresh engine per arm and round):
  SS = sum_k (d_k - mean d)^2 - (1 - 1/K) sum_k s_k^2, on K - 1 degrees of freedom;
* every A/A control (``control_of``), whose pairs have delta = 0 by construction:
  SS = sum_k c_k^2 - sum_k s_k^2, on K_c degrees of freedom;

pooled: tau^2 = max(0, sum SS / nu), nu = (K - 1) + sum K_c. The variance of the pooled log(B/A)
is W = max(tau^2 / K + se_within^2, V / K), and intervals use Student's t on nu degrees of freedom.
V = (sum_k (d_k - mean d)^2 + sum_k c_k^2) / nu is the pairs' raw mean square, what a plain t on the
engine pairs would use: W is never below it. Without that floor a source whose within-engine error
is overstated cancels the engine term another source shows, and a comparison whose own within-engine
error is understated is left with almost no variance. Measured on the H200 (claim 1's steady series,
2026-12-03): at c=4 every time block held the same count of completed requests in both arms, so the
paired batch-means error of the request rate was 0, the control's was 4%, tau^2 truncated to 0, and a
3% difference got an interval of zero width and "regressed". With placement ``parallel`` engines stay up across rounds:
the rounds are one engine pair (K = 1), and only an A/A control can supply nu. When nu = 0 the
design cannot estimate the engine term and the metric gets no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analysis.stats import PairedEstimates

Placement = Literal["interleaved", "parallel"]


def engine_pairs(placement: Placement, shared_rounds: Sequence[int]) -> list[tuple[int, ...]]:
    """Groups of shared rounds served by one engine of each arm: one per round when every round starts
    fresh engines (interleaved), all rounds together when the engines stay up (parallel)."""
    rounds = sorted(shared_rounds)
    if not rounds:
        return []
    if placement == "parallel":
        return [tuple(rounds)]
    return [(r,) for r in rounds]


@dataclass(frozen=True)
class NoiseTerm:
    """One source's evidence on tau^2, per metric: the sum of squares beyond within-engine error, the raw sum
    of squares (within-engine error included) and their dof."""

    excess_ss: np.ndarray  # (m,), NaN where the metric is undefined in this source
    dof: np.ndarray  # (m,) int
    raw_ss: np.ndarray  # (m,)


def own_term(est: PairedEstimates) -> NoiseTerm:
    """The spread of the comparison's own engine pairs around their mean."""
    k = est.pairs
    m = est.log_ratio.size
    if k < 2:
        return NoiseTerm(np.zeros(m), np.zeros(m, dtype=np.int64), np.zeros(m))
    d, s = est.pair_log_ratios, est.pair_se
    ok = np.all(np.isfinite(d), axis=0) & np.all(np.isfinite(s), axis=0)
    raw = np.sum((d - d.mean(axis=0)) ** 2, axis=0)
    ss = raw - (1 - 1 / k) * np.sum(s**2, axis=0)
    return NoiseTerm(np.where(ok, ss, np.nan), np.where(ok, k - 1, 0), np.where(ok, raw, np.nan))


def control_term(est: PairedEstimates) -> NoiseTerm:
    """An A/A control's engine pairs: their log ratios are pure noise (true value 0)."""
    d, s = est.pair_log_ratios, est.pair_se
    ok = np.all(np.isfinite(d), axis=0) & np.all(np.isfinite(s), axis=0)
    raw = np.sum(d**2, axis=0)
    ss = raw - np.sum(s**2, axis=0)
    return NoiseTerm(np.where(ok, ss, np.nan), np.where(ok, est.pairs, 0), np.where(ok, raw, np.nan))


@dataclass(frozen=True)
class EngineNoise:
    """Pooled engine-pair variance tau^2 per metric and its degrees of freedom."""

    tau2: np.ndarray  # (m,), NaN where dof == 0
    dof: np.ndarray  # (m,) int
    pair_ms: np.ndarray  # (m,) the pairs' raw mean square V, NaN where dof == 0

    @property
    def engine_sd_rel(self) -> np.ndarray:
        """The implied SD of one engine's offset, relative: exp(sqrt(tau^2 / 2)) - 1."""
        return np.expm1(np.sqrt(self.tau2 / 2))

    def floor(self, j: int) -> float:
        """V of metric ``j``: one pair's variance as the pairs themselves show it; NaN when no pair shows it."""
        return float(self.pair_ms[j])

    def variance(self, j: int, pairs: int, se_within: float) -> float:
        """W of metric ``j`` for a mean over ``pairs`` engine pairs: max(tau^2 / K + se_within^2, V / K)."""
        w = float(self.tau2[j]) / pairs + se_within**2
        floor = self.floor(j) / pairs
        return max(w, floor) if math.isfinite(floor) else w


def pool(terms: Sequence[NoiseTerm], m: int) -> EngineNoise:
    ss, raw, dof = np.zeros(m), np.zeros(m), np.zeros(m, dtype=np.int64)
    for t in terms:
        use = t.dof > 0
        ss = np.where(use, ss + np.nan_to_num(t.excess_ss), ss)
        raw = np.where(use, raw + np.nan_to_num(t.raw_ss), raw)
        dof = dof + np.where(use, t.dof, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau2 = np.where(dof > 0, np.maximum(ss, 0.0) / np.maximum(dof, 1), np.nan)
        pair_ms = np.where(dof > 0, raw / np.maximum(dof, 1), np.nan)
    return EngineNoise(tau2, dof, pair_ms)


def design_advice(placement: Placement, baseline: str) -> str:
    """What to add to the experiment so that its comparisons can be given verdicts."""
    control = f"an A/A control arm `control_of: {baseline}`"
    if placement == "parallel":
        return (
            f"add {control} (placement: parallel keeps the engines up across rounds, so rounds give no new "
            "engines), or use `placement: interleaved` with `rounds: 2` or more"
        )
    return f"add `rounds: 2` or more (interleaved: a fresh engine per round) or {control}"


def describe(placement: Placement, pairs: int, controls: Sequence[str], dof: int) -> str:
    """One sentence on what the engine term of a comparison rests on."""
    engines = f"{pairs} engine pair(s)" + (
        " (parallel: one engine per arm for all rounds)" if placement == "parallel" else ""
    )
    noise = f"A/A control(s) {', '.join(controls)}" if controls else "no A/A control"
    return f"{engines}, {noise}: engine-instance variance on {dof} degree(s) of freedom"
