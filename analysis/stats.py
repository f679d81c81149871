"""The statistics behind a verdict: per-arm metric values, two bootstraps and Mann-Whitney U.

Every metric is a statistic of a *set of requests* (a quantile, or a rate over the rounds' time
spans), so one resampling scheme serves them all:

* over requests: schedule slots (request i of the replayed schedule, the same request in both
  arms) are redrawn with replacement inside each round, the same draws for both arms;
* over rounds: each round shared by both arms (interleaved A B B A: pairing by round cancels
  drift) gives its own ratio and bootstrap error; the between-round variance their spread implies
  is added (random effects), so rounds that disagree widen the interval. With a handful of rounds
  this is far steadier than redrawing the rounds themselves.

Intervals are normal intervals on the log ratio with the bootstrap standard error: stable at the
small tail levels a Bonferroni-corrected family needs, where percentile intervals would need many
more resamples. Everything is driven by an explicit seed, so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from analysis.samples import ArmSamples

QUANTILES = (50, 90, 99)
LATENCY_FAMILIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"))


@dataclass(frozen=True)
class MetricSpec:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    family: str
    quantile: int | None = None


METRICS: tuple[MetricSpec, ...] = tuple(
    MetricSpec(f"{fam}_p{q}", f"{label} p{q}", "s", False, fam, q) for fam, label in LATENCY_FAMILIES for q in QUANTILES
) + (
    MetricSpec("output_tokens_per_s", "output tokens/s", "tok/s", True, "output_tokens_per_s"),
    MetricSpec("goodput_rps", "goodput (SLO-met requests/s)", "req/s", True, "goodput_rps"),
)
METRIC_KEYS = tuple(m.key for m in METRICS)

Groups = Sequence[np.ndarray]
"""Request indices per (drawn) round; repeats allowed. Rates divide by the sum of the groups' spans."""


def weighted_percentiles(sorted_values: np.ndarray, weights: np.ndarray, qs: Sequence[int]) -> list[float]:
    """numpy's default (linear) percentiles of the sample in which value i appears weights[i] times."""
    cw = np.cumsum(weights)
    total = int(cw[-1]) if cw.size else 0
    if total == 0:
        return [np.nan] * len(qs)
    out = []
    for q in qs:
        h = (total - 1) * q / 100.0
        lo = int(np.floor(h))
        i_lo = int(np.searchsorted(cw, lo, side="right"))
        i_hi = int(np.searchsorted(cw, min(lo + 1, total - 1), side="right"))
        v_lo, v_hi = sorted_values[i_lo], sorted_values[i_hi]
        out.append(float(v_lo + (h - lo) * (v_hi - v_lo)))
    return out


def metric_values(arm: ArmSamples, groups: Groups) -> np.ndarray:
    """All METRICS of the requests ``groups`` of ``arm``, in METRICS order (NaN when undefined)."""
    idx = np.concatenate(groups) if len(groups) else np.empty(0, dtype=np.int64)
    counts = np.bincount(idx, minlength=arm.n)
    out: list[float] = []
    for family, _ in LATENCY_FAMILIES:
        values, owners = arm.sorted_by_family[family]
        out += weighted_percentiles(values, counts[owners], QUANTILES)
    span = 0.0
    for g in groups:
        if g.size:
            span += float(arm.end_s[g].max() - arm.start_s[g].min())
    out.append(float(counts @ arm.output_tokens) / span if span > 0 else np.nan)
    out.append(float(counts @ arm.slo_met) / span if span > 0 else np.nan)
    return np.asarray(out)


def round_groups(arm: ArmSamples) -> dict[int, np.ndarray]:
    return {r: np.flatnonzero(arm.rounds == r) for r in arm.round_ids()}


def point_values(arm: ArmSamples) -> np.ndarray:
    return metric_values(arm, list(round_groups(arm).values()))


def _resample_within(groups: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    return [g[rng.integers(0, g.size, g.size)] if g.size else g for g in groups]


def bootstrap_requests(arm: ArmSamples, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, len(METRICS)) metric values with requests redrawn inside each round."""
    groups = list(round_groups(arm).values())
    return np.stack([metric_values(arm, _resample_within(groups, rng)) for _ in range(resamples)])


class _SlotPairing:
    """Both arms replay the same schedule: resampling schedule slots (not each arm's requests on
    its own) keeps request i's lengths in both arms of a replicate, so the request mix cancels in
    B/A exactly as it does in the real comparison. A slot an arm lost (failed request) is skipped."""

    def __init__(self, a: ArmSamples, b: ArmSamples, rounds: Sequence[int]) -> None:
        self.lookup: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.slots: dict[int, np.ndarray] = {}
        for r in rounds:
            in_a, in_b = a.slots[a.rounds == r], b.slots[b.rounds == r]
            size = int(max(in_a.max(initial=-1), in_b.max(initial=-1))) + 1
            self.lookup[r] = (a.slot_lookup(r, size), b.slot_lookup(r, size))
            self.slots[r] = np.union1d(in_a, in_b)

    def draw(self, rounds: Sequence[int], rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
        ga, gb = [], []
        for r in rounds:
            slots = self.slots[r]
            drawn = slots[rng.integers(0, slots.size, slots.size)]
            pa, pb = self.lookup[r][0][drawn], self.lookup[r][1][drawn]
            ga.append(pa[pa >= 0])
            gb.append(pb[pb >= 0])
        return ga, gb


@dataclass(frozen=True)
class PairedBootstrap:
    """What the paired slot bootstrap of B against A learned, per metric (METRICS order)."""

    se_requests: np.ndarray  # (m,) SE of log(B/A) over all rounds, slots redrawn inside each round
    round_log_ratios: np.ndarray  # (k, m) log(B/A) of each shared round on its own
    round_se: np.ndarray  # (k, m) within-round bootstrap SE of each round's log ratio

    def se_rounds(self) -> np.ndarray:
        """SE of log(B/A) over rounds; NaN with fewer than two shared rounds.

        Quantiles: the request SE plus the between-round variance tau^2 / k, tau^2 estimated
        from how much the rounds' own ratios disagree beyond their sampling error (DerSimonian-
        Laird), so a round-to-round drift that pairing did not cancel widens the interval.
        Rates (one number per round): the spread of the per-round ratios alone, sd / sqrt(k).
        """
        k, m = self.round_log_ratios.shape
        out = np.full(m, np.nan)
        if k < 2:
            return out
        for j, spec in enumerate(METRICS):
            lr, se = self.round_log_ratios[:, j], self.round_se[:, j]
            if not np.all(np.isfinite(lr)):
                continue
            if spec.quantile is None:
                out[j] = float(np.std(lr, ddof=1) / np.sqrt(k))
                continue
            if not (np.all(np.isfinite(se)) and np.all(se > 0)) or not np.isfinite(self.se_requests[j]):
                continue
            w = 1.0 / se**2
            mean = float(np.sum(w * lr) / np.sum(w))
            q = float(np.sum(w * (lr - mean) ** 2))
            tau2 = max(0.0, (q - (k - 1)) / float(np.sum(w) - np.sum(w**2) / np.sum(w)))
            out[j] = float(np.sqrt(self.se_requests[j] ** 2 + tau2 / k))
        return out


def paired_bootstrap(a: ArmSamples, b: ArmSamples, resamples: int, rng: np.random.Generator) -> PairedBootstrap | None:
    """Both arms on the same resampled schedule slots, inside every round they share; None if none."""
    shared = sorted(set(a.round_ids()) & set(b.round_ids()))
    if not shared:
        return None
    pairing = _SlotPairing(a, b, shared)
    all_a, all_b, per_a, per_b = [], [], [], []
    for _ in range(resamples):
        ga, gb = pairing.draw(shared, rng)
        all_a.append(metric_values(a, ga))
        all_b.append(metric_values(b, gb))
        if len(shared) > 1:
            per_a.append([metric_values(a, [g]) for g in ga])
            per_b.append([metric_values(b, [g]) for g in gb])
    k, m = len(shared), len(METRICS)
    ga0, gb0 = round_groups(a), round_groups(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        round_lr = np.array([np.log(metric_values(b, [gb0[r]])) - np.log(metric_values(a, [ga0[r]])) for r in shared])
    round_se = np.full((k, m), np.nan)
    if per_a:
        pa, pb = np.array(per_a), np.array(per_b)  # (resamples, k, m)
        for i in range(k):
            round_se[i] = log_ratio_se(pa[:, i, :], pb[:, i, :])
    return PairedBootstrap(log_ratio_se(np.stack(all_a), np.stack(all_b)), round_lr, round_se)


def log_ratio_se(boot_a: np.ndarray, boot_b: np.ndarray) -> np.ndarray:
    """Bootstrap standard error of log(B/A) per metric; NaN where too many replicates are undefined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log(boot_b) - np.log(boot_a)
    finite = np.isfinite(lr)
    se = np.full(lr.shape[1], np.nan)
    for j in range(lr.shape[1]):
        col = lr[finite[:, j], j]
        if col.size >= max(10, int(0.95 * lr.shape[0])):
            se[j] = float(np.std(col, ddof=1))
    return se


def log_value_se(boot: np.ndarray) -> np.ndarray:
    """Bootstrap standard error of log(metric) per metric, for comparing one arm with its history."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lv = np.log(boot)
    se = np.full(lv.shape[1], np.nan)
    for j in range(lv.shape[1]):
        col = lv[np.isfinite(lv[:, j]), j]
        if col.size >= max(10, int(0.95 * lv.shape[0])):
            se[j] = float(np.std(col, ddof=1))
    return se


def per_request_series(arm: ArmSamples, family: str) -> np.ndarray | None:
    """The per-request values a rank test compares for a latency family; None for rate metrics."""
    if family == "itl_s":
        series = arm.itl_median_per_request()
    elif family in ("ttft_s", "tpot_s", "e2e_s"):
        series = getattr(arm, family)
    else:
        return None
    return np.asarray(series[~np.isnan(series)])


def mann_whitney_p(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    """Two-sided Mann-Whitney U p-value; None when either side has fewer than 3 values."""
    if a is None or b is None or a.size < 3 or b.size < 3:
        return None
    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0
    return float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)


def z_two_sided(alpha: float) -> float:
    return float(sps.norm.ppf(1.0 - alpha / 2.0))


def z_one_sided(p: float) -> float:
    return float(sps.norm.ppf(p))
