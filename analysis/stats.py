"""The statistics of one engine's requests: metric values, the one bootstrap, batch means, rank tests.

Everything here is *within-engine* error: what would change if the same engines served another draw
of the same kind of requests. The difference between two engine instances is a second level that
no resampling of one engine's requests can see; ``analysis.design`` adds it from the design.

* Quantile metrics: the slot bootstrap. Schedule slots (request i of the replayed schedule, the same
  request in every arm) are redrawn with replacement inside each round, the same draws for every
  arm compared, so the request mix cancels in B/A as it does in the real comparison. With one arm it
  is the plain request bootstrap the nightly gate uses: one implementation for both.
* Rates (one number per window, set by its span): batch means over time blocks
  (``workloads.metrics``, the same code as the console table). For B/A the blocks are paired (block
  j of both arms covers the same part of the schedule), so arrival noise cancels as well.

Everything is driven by an explicit seed, so a report is reproducible.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from analysis.quantile_windows import (
    WindowedFamily,
    once_percentiles,
    weighted_percentiles_batch,
    windowed_family,
    windowed_percentiles,
)
from analysis.resampling_units import Draws, draw_units, unit_layouts
from analysis.samples import ArmSamples
from workloads.metrics import RATE_BLOCKS, block_rates

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
N_QUANTILE = sum(1 for m in METRICS if m.quantile is not None)
"""Quantile metrics come first in METRICS, rates after them."""
RATE_KEYS = tuple(m.key for m in METRICS[N_QUANTILE:])

_CHUNK_ELEMENTS = 4_000_000
"""Bootstrap replicates are evaluated in chunks of at most this many weights (bounded memory)."""


def weighted_percentiles(sorted_values: np.ndarray, weights: np.ndarray, qs: Sequence[int]) -> list[float]:
    """numpy's default (linear) percentiles of the sample in which value i appears weights[i] times."""
    return [float(v) for v in weighted_percentiles_batch(sorted_values, np.asarray(weights)[None, :], qs)[0]]


WINDOW_SIGMAS = 5.0
"""Half-width of a quantile's window, in standard deviations of the replicates' weight below it."""
EXACT_BELOW_VALUES = 8_192
"""Families with fewer values than this take the exact path on every row (cheap there, and the reference)."""


def quantile_values(arm: ArmSamples, counts: np.ndarray | Draws, rounds: Sequence[int] | None = None) -> np.ndarray:
    """Quantile metrics (METRICS order) of the requests of ``rounds`` (None: all), each request weighted by how
    often a replicate drew it: per request (B, n), or per resampling unit (``Draws``) -> (B, N_QUANTILE).

    Small families (most runs) weigh and sort every value exactly; large ones (a production-length run's
    tokens) look only at the values near each quantile (``analysis.quantile_windows``), with the same result."""
    draws = counts if isinstance(counts, Draws) else Draws.of(counts)
    key = None if rounds is None else tuple(rounds)
    out = np.full((draws.rows, N_QUANTILE), np.nan)
    for f, (family, _) in enumerate(LATENCY_FAMILIES):
        cols = slice(f * len(QUANTILES), (f + 1) * len(QUANTILES))
        large = arm.family_size(family, key) >= EXACT_BELOW_VALUES
        if large and draws.is_every_request_once():
            out[0, cols] = once_percentiles(*arm.raw_family(family, key), QUANTILES)  # the estimate: no windows
            continue
        if large:
            cache_key = ("quantile_windows", family, key, WINDOW_SIGMAS)
            fam = arm.cache.get(cache_key)
            if not isinstance(fam, WindowedFamily):
                fam = windowed_family(*arm.raw_family(family, key), QUANTILES, WINDOW_SIGMAS)
                arm.cache[cache_key] = fam
            exact = functools.partial(arm.family, family, key)
            out[:, cols] = windowed_percentiles(fam, draws, cache_key, QUANTILES, exact)
            continue
        values, owners, mult = arm.family(family, key)
        units = draws.layout.unit_of[owners]
        step = max(1, _CHUNK_ELEMENTS // max(1, values.size))
        for c0 in range(0, draws.rows, step):
            weights = np.take(draws.counts[c0 : c0 + step], units, axis=1) * mult
            out[c0 : c0 + step, cols] = weighted_percentiles_batch(values, weights, QUANTILES)
    return out


# --- rates: batch means ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundBlocks:
    """One round of one arm cut into time blocks: its span and the block rates of each rate metric."""

    span_s: float
    blocks: np.ndarray  # (len(RATE_KEYS), K)


def round_blocks(arm: ArmSamples, rnd: int, blocks: int = RATE_BLOCKS) -> RoundBlocks:
    """The window of round ``rnd`` (first intended send to last end of the arm's requests) in blocks.

    Output tokens count when they arrived; a request counts (for requests and goodput) when it ended.
    """
    key = ("round_blocks", rnd, blocks)
    cached = arm.cache.get(key)
    if isinstance(cached, RoundBlocks):
        return cached
    idx = np.flatnonzero(arm.rounds == rnd)
    if idx.size == 0:
        out = RoundBlocks(0.0, np.full((len(RATE_KEYS), blocks), np.nan))
    else:
        start, end = float(arm.start_s[idx].min()), float(arm.end_s[idx].max())
        tok = arm.token_block_rates(idx, start, end, blocks)
        good = block_rates(start, end, arm.end_s[idx], arm.slo_met[idx].astype(np.float64), blocks)
        out = RoundBlocks(end - start, np.stack([tok, good]))
    arm.cache[key] = out
    return out


def _pooled_rate(rb: Sequence[RoundBlocks]) -> tuple[np.ndarray, np.ndarray]:
    """(rate per metric over the rounds: total / total time, the rounds' time weights)."""
    spans = np.array([r.span_s for r in rb])
    if spans.sum() <= 0:
        return np.full(len(RATE_KEYS), np.nan), spans
    w = spans / spans.sum()
    means = np.stack([r.blocks.mean(axis=1) for r in rb])  # (R, n_rates)
    return w @ means, w


def rate_values(arm: ArmSamples, rounds: Sequence[int] | None = None) -> np.ndarray:
    """Rate metrics over ``rounds`` (None: all): total count / total measured time, the rounds' spans summed."""
    rb = [round_blocks(arm, r) for r in (arm.round_ids() if rounds is None else rounds)]
    return _pooled_rate(rb)[0] if rb else np.full(len(RATE_KEYS), np.nan)


def rate_log_se(arm: ArmSamples, rounds: Sequence[int] | None = None) -> np.ndarray:
    """Batch-means standard error of log(rate) of one arm, per rate metric (delta method)."""
    rb = [round_blocks(arm, r) for r in (arm.round_ids() if rounds is None else rounds)]
    if not rb:
        return np.full(len(RATE_KEYS), np.nan)
    value, w = _pooled_rate(rb)
    var = sum(wr**2 * np.var(r.blocks, axis=1, ddof=1) / r.blocks.shape[1] for wr, r in zip(w, rb, strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(var) / value


def paired_rate_log_ratio(a: ArmSamples, b: ArmSamples, rounds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """log(B/A) of every rate over ``rounds`` and its paired batch-means standard error.

    Block j of each arm covers the same share of its window, so (nearly) the same requests of the
    schedule: z_j = x_Bj / rate_B - x_Aj / rate_A is the block's contribution to log(B/A) (delta
    method), and var(mean z) = var(z) / K per round, weighted by the rounds' share of the time.
    """
    ra, rb = [round_blocks(a, r) for r in rounds], [round_blocks(b, r) for r in rounds]
    va, wa = _pooled_rate(ra)
    vb, wb = _pooled_rate(rb)
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log(vb) - np.log(va)
        w = (wa + wb) / 2
        var = np.zeros(len(RATE_KEYS))
        for wr, xa, xb in zip(w, ra, rb, strict=True):
            z = xb.blocks / vb[:, None] - xa.blocks / va[:, None]
            var = var + wr**2 * np.var(z, axis=1, ddof=1) / z.shape[1]
    return lr, np.sqrt(var)


# --- the one bootstrap ----------------------------------------------------------------------------


def slot_bootstrap(
    arms: Sequence[ArmSamples], rounds: Sequence[int], resamples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per arm, a (resamples, n) matrix: how often each of its requests was drawn in each replicate.

    Inside every round the slots any arm served are redrawn with replacement (in a production-length round,
    random groups of them: ``analysis.resampling_units``), the same draws for all ``arms``; a slot an arm lost
    (failed request) is skipped in that arm. One arm: the request bootstrap.
    """
    return [d.at(np.arange(d.layout.unit_of.size)) for d in unit_bootstrap(arms, rounds, resamples, rng)]


def unit_bootstrap(
    arms: Sequence[ArmSamples], rounds: Sequence[int], resamples: int, rng: np.random.Generator
) -> list[Draws]:
    """``slot_bootstrap`` as per-unit draws, one ``Draws`` per arm sharing the same counts."""
    layouts, sizes = unit_layouts(arms, rounds)
    counts = draw_units(sizes, resamples, rng)
    shared: dict[str, np.ndarray] = {}
    return [Draws(counts, layout, shared) for layout in layouts]


BOOTSTRAP_CHUNK_ELEMENTS = 8_000_000
"""Unit counts drawn at once (rows x units; each chunk also holds a few temporaries of that size): a run of up
to 8,000 slots is bootstrapped in one go (then the draws are exactly those of one call), a production-length
run (20,000 units per round) 400 replicates at a time divided by its rounds."""


def slot_bootstrap_chunks(
    arms: Sequence[ArmSamples], rounds: Sequence[int], resamples: int, rng: np.random.Generator
) -> Iterator[list[Draws]]:
    """``unit_bootstrap`` in chunks of replicates, so memory is bounded whatever the number of requests."""
    layouts, sizes = unit_layouts(arms, rounds)
    rows = max(1, BOOTSTRAP_CHUNK_ELEMENTS // max(1, sum(sizes)))
    done = 0
    while done < resamples:
        k = min(rows, resamples - done)
        counts = draw_units(sizes, k, rng)  # one draw, shared by every arm: the pairing
        shared: dict[str, np.ndarray] = {}
        chunk = [Draws(counts, layout, shared) for layout in layouts]
        del counts, shared
        yield chunk
        del chunk  # the next chunk is drawn with this one gone (the caller drops its names too)
        done += k


def log_se(boot: np.ndarray) -> np.ndarray:
    """Standard error per column of a (resamples, m) matrix of logs; NaN where too many are undefined."""
    se = np.full(boot.shape[1], np.nan)
    finite = np.isfinite(boot)
    for j in range(boot.shape[1]):
        col = boot[finite[:, j], j]
        if col.size >= max(10, int(0.95 * boot.shape[0])):
            se[j] = float(np.std(col, ddof=1))
    return se


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.where(x > 0, x, np.nan))


def point_values(arm: ArmSamples, rounds: Sequence[int] | None = None) -> np.ndarray:
    """Every metric (METRICS order) of the arm's requests of ``rounds`` (None: all); NaN when undefined."""
    q = quantile_values(arm, Draws.of(np.ones((1, arm.n), dtype=np.int64)), rounds)[0]
    return np.concatenate([q, rate_values(arm, rounds)])


def arm_log_se(arm: ArmSamples, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Within-engine standard error of log(metric) of one arm (bootstrap for quantiles, batch means for
    rates): what the nightly gate compares one night with its history by."""
    chunks = slot_bootstrap_chunks([arm], arm.round_ids(), resamples, rng)
    parts = [quantile_values(arm, counts) for (counts,) in chunks]
    q = log_se(_log(np.vstack(parts)) if parts else np.empty((0, N_QUANTILE)))
    return np.concatenate([q, rate_log_se(arm)])


@dataclass(frozen=True)
class PairedEstimates:
    """B against A, per metric (METRICS order): the estimate and one estimate per engine pair."""

    log_ratio: np.ndarray  # (m,) log(B/A): the mean of the engine pairs' log ratios
    se_within: np.ndarray  # (m,) its within-engine standard error
    pair_log_ratios: np.ndarray  # (k, m) log(B/A) of each engine pair on its own
    pair_se: np.ndarray  # (k, m) within-engine standard error of each

    @property
    def pairs(self) -> int:
        return int(self.pair_log_ratios.shape[0])


def paired_estimates(
    a: ArmSamples,
    b: ArmSamples,
    pairs: Sequence[Sequence[int]],
    resamples: int,
    rng: np.random.Generator,
) -> PairedEstimates:
    """B/A of each engine pair (a group of rounds served by one engine of each arm) and their mean.

    Each engine pair weighs the same in the mean: when engines differ, a pair is one observation of
    the engine term however many requests it served. The pairs' bootstraps are independent (disjoint
    rounds), so the mean's within-engine variance is sum_k s_k^2 / K^2.
    """
    shared = [r for p in pairs for r in p]

    def log_ratios(ca: np.ndarray | Draws, cb: np.ndarray | Draws) -> list[np.ndarray]:
        return [_log(quantile_values(b, cb, rounds)) - _log(quantile_values(a, ca, rounds)) for rounds in pairs]

    # Row 0: every request once (the estimate itself); then the replicates, a chunk at a time.
    per_pair = [[x] for x in log_ratios(np.ones((1, a.n), dtype=np.int64), np.ones((1, b.n), dtype=np.int64))]
    for ca, cb in slot_bootstrap_chunks([a, b], shared, resamples, rng):
        for acc, x in zip(per_pair, log_ratios(ca, cb), strict=True):
            acc.append(x)
        del ca, cb  # not held while the next chunk is drawn
    lrs, ses = [], []
    for rounds, parts in zip(pairs, per_pair, strict=True):
        lq_all = np.vstack(parts)
        lq, se_q = lq_all[0], log_se(lq_all[1:])
        lr_rate, se_rate = paired_rate_log_ratio(a, b, rounds)
        lrs.append(np.concatenate([lq, lr_rate]))
        ses.append(np.concatenate([se_q, se_rate]))
    d, s = np.stack(lrs), np.stack(ses)
    k = len(pairs)
    return PairedEstimates(d.mean(axis=0), np.sqrt(np.sum(s**2, axis=0)) / k, d, s)


# --- ranks and quantiles of reference distributions ------------------------------------------------


def per_request_series(arm: ArmSamples, family: str) -> np.ndarray | None:
    """The per-request values a rank test compares for a latency family; None for rate metrics."""
    if family == "itl_s":
        series = arm.itl_median_per_request
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


@lru_cache(maxsize=4096)
def t_two_sided(alpha: float, dof: int) -> float:
    return float(sps.t.ppf(1.0 - alpha / 2.0, dof))


@lru_cache(maxsize=4096)
def t_one_sided(p: float, dof: int) -> float:
    return float(sps.t.ppf(p, dof))
