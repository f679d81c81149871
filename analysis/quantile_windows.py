"""Quantiles of a large family (a production-length run's inter-token gaps) in every bootstrap replicate,
from the values near each quantile alone, with exactly the result of weighing and sorting all of them.

A replicate only reweighs requests (how often it drew each), so its quantile falls within a few standard
deviations of the estimate's: the weight a replicate has below the estimate's quantile position is
sum_i c_i a_i (c_i: draws of request i, a_i: its values below), its target rank moves with q * sum_i c_i t_i
(t_i: its values), and their difference has a variance of about sum_i (a_i - q t_i)^2. So each quantile
keeps a window of values (sorted) around the estimate's position and, per request, how many of its values
lie below the window: a replicate's cumulative weight at the window's start is one dot product with its
draws, the rest is the window's own values. The family itself is never sorted (``np.partition`` finds
the windows' edges), so it costs its values once, transiently. A replicate whose quantile falls outside
its window (about one in a million at 5 SD) takes the exact path on the sorted family.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from analysis.resampling_units import Draws
from workloads.record_columns import row_chunks

Family = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(finite values ascending, the request owning each, how many equal values of that request it stands for)."""


@dataclass(frozen=True)
class Window:
    """Where one quantile falls in nearly every replicate: the family's values between two ranks."""

    start: int  # values of the family below the window
    end: int  # values of the family below the window's end
    values: np.ndarray  # the window's values, ascending (equal values of one request merged)
    owners: np.ndarray  # the request owning each
    mult: np.ndarray  # how many equal values of that request each stands for
    below: np.ndarray  # (n,) per request, its values below the window


@dataclass(frozen=True)
class WindowedFamily:
    size: int  # values in the family
    per_request: np.ndarray  # (n,) values of each request
    windows: tuple[Window, ...]  # one per quantile


def merge_runs(values: np.ndarray, owners: np.ndarray) -> Family:
    """Sorted by value, equal neighbours of one request merged into one weighted entry: a request whose tokens
    came at a steady pace costs one entry instead of one per token. Equal values are interchangeable in a
    percentile, so any sort by value serves."""
    order = np.argsort(values)
    v, o = values[order], owners[order]
    if v.size == 0:
        return v, o, np.empty(0, dtype=np.int64)
    new = np.concatenate(([True], (v[1:] != v[:-1]) | (o[1:] != o[:-1])))
    starts = np.flatnonzero(new)
    mult = np.diff(np.concatenate((starts, [v.size])))
    return v[starts], o[starts], mult.astype(np.int64)


SIGMA_SAMPLE_REQUESTS = 20_000
"""Requests (evenly spaced) a window's width is estimated from: the width only needs to be about right."""


def count_dtype(offsets: np.ndarray) -> np.dtype[np.signedinteger[Any]]:
    """The smallest integer type that holds a count of one request's values (CSR ``offsets``): these per-request
    counts are kept per family and round set for the whole bootstrap, and a request has tens of tokens."""
    longest = int(np.diff(offsets).max()) if offsets.size > 1 else 0
    return np.dtype(np.result_type(np.min_scalar_type(-longest - 1), np.int8))


def per_request_count(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many values of each request (CSR ``offsets``) ``mask`` keeps (``count_dtype``); requests a few million
    values at a time, as ``reduceat`` first casts what it sums to int64."""
    n = offsets.size - 1
    out = np.zeros(n, dtype=count_dtype(offsets))
    if n == 0 or mask.size == 0:
        return out
    for part in row_chunks(np.diff(offsets), _PASS_VALUES):
        lo, hi = int(offsets[part.start]), int(offsets[part.stop])
        starts = offsets[part.start : part.stop] - lo
        # A trailing zero lets every request's start be a valid index, an empty request's included.
        sums = np.add.reduceat(np.append(mask[lo:hi], False), starts, dtype=np.int64)
        has = offsets[part.start + 1 : part.stop + 1] > offsets[part.start : part.stop]
        out[part][has] = sums[has]
    return out


def owners_of(positions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, positions, side="right") - 1


def _sigma(values: np.ndarray, offsets: np.ndarray, member: np.ndarray, per_request: np.ndarray, q: int) -> float:
    """SD of a replicate's weight below the q-quantile minus q times its total, sqrt(sum_i (a_i - q t_i)^2),
    from an evenly spaced sample of the family's requests, scaled to all of them."""
    requests = np.flatnonzero(per_request > 0)
    sample = requests[:: max(1, requests.size // SIGMA_SAMPLE_REQUESTS)]
    starts, lengths = offsets[sample], offsets[sample + 1] - offsets[sample]
    pos = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(lengths.sum())
    keep = member[pos]
    v = values[pos][keep]
    owner = np.repeat(np.arange(sample.size), lengths)[keep]
    if v.size == 0:
        return 0.0
    estimate = np.quantile(v, q / 100.0)
    a = np.bincount(owner[v < estimate], minlength=sample.size)
    t = np.bincount(owner, minlength=sample.size)
    return float(np.sqrt(np.sum((a - q / 100.0 * t) ** 2) * requests.size / sample.size))


_PASS_VALUES = 1_000_000


def _counts_below(
    values: np.ndarray, offsets: np.ndarray, member: np.ndarray, edges: Sequence[float]
) -> list[np.ndarray]:
    """Per edge, per request: how many of its member values are below the edge; one pass for every edge."""
    n = offsets.size - 1
    cuts = np.unique(edges)
    width = cuts.size + 2  # buckets: 0..cuts.size by how many cuts are at or below a value, then "not a member"
    per = np.zeros((n, width), dtype=np.int32)  # a request's values: far below 2^31
    lengths = np.diff(offsets)
    for part in row_chunks(lengths, _PASS_VALUES):  # so the per-value temporaries stay small
        r0, r1 = part.start, part.stop
        lo, hi = int(offsets[r0]), int(offsets[r1])
        if hi <= lo:
            continue
        bucket = np.searchsorted(cuts, values[lo:hi], side="right")
        bucket[~member[lo:hi]] = cuts.size + 1
        bucket += np.repeat(np.arange(r1 - r0, dtype=np.int64) * width, lengths[r0:r1])
        per[r0:r1] += np.bincount(bucket, minlength=(r1 - r0) * width).reshape(r1 - r0, width)
    cum = np.cumsum(per, axis=1, dtype=np.int32)
    # A value is below cut k exactly when fewer than k + 1 cuts are at or below it: buckets 0..k.
    return [cum[:, int(np.searchsorted(cuts, e))].astype(count_dtype(offsets)) for e in edges]


SELECT_SAMPLE_VALUES = 1_000_000
"""Above this many values, order statistics are bracketed from a random sample of this many, then found among the
values inside the brackets: a partition needs a copy of every value (a million requests' inter-token gaps)."""


def _between(values: np.ndarray, member: np.ndarray | None, lo: float, hi: float) -> np.ndarray:
    """Positions of the member values in [lo, hi], ascending; a few million values at a time."""
    parts = []
    for c0 in range(0, values.size, _PASS_VALUES):
        v = values[c0 : c0 + _PASS_VALUES]
        inside = (v >= lo) & (v <= hi)
        if member is not None:
            inside &= member[c0 : c0 + _PASS_VALUES]
        parts.append(np.flatnonzero(inside) + c0)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def order_statistics(values: np.ndarray, member: np.ndarray | None, size: int, ranks: Sequence[int]) -> np.ndarray:
    """The member values (``size`` of them) at ``ranks`` (0-based) of their ascending order: what
    ``np.partition`` of a copy of them gives. A large family is bracketed instead: each rank's value lies, all but
    surely, between two order statistics of a random sample; counting the values below a bracket and partitioning
    those inside finds it exactly, and a bracket that missed (its count shows it) falls back to the copy."""
    want = np.asarray(ranks, dtype=np.int64)
    if values.size > SELECT_SAMPLE_VALUES and size > 0:
        found = _bracketed(values, member, size, want)
        if found is not None:
            return found
    kept = values[member] if member is not None else values.copy()
    kept.partition(np.unique(want))
    return kept[want]


def _bracketed(values: np.ndarray, member: np.ndarray | None, size: int, want: np.ndarray) -> np.ndarray | None:
    pos = np.random.default_rng(0x5E1EC7).integers(0, values.size, SELECT_SAMPLE_VALUES)
    sample = np.sort(values[pos] if member is None else values[pos[member[pos]]])
    if sample.size < 1000:
        return None
    out = np.empty(want.size)
    for i, rank in enumerate(want.tolist()):
        p = min(max(rank / size, 0.0), 1.0)
        guard = 6.0 * np.sqrt(sample.size * p * (1 - p)) + 8  # sample ranks: 6 SD
        j_lo, j_hi = int(p * sample.size - guard), int(p * sample.size + guard)
        lo = float(sample[j_lo]) if j_lo >= 0 else -np.inf
        hi = float(sample[j_hi]) if j_hi < sample.size else np.inf
        inside = values[_between(values, member, lo, hi)]
        if inside.size > max(SELECT_SAMPLE_VALUES, size // 8):
            return None  # a wide bracket (ties, a tiny family): the copy is cheaper
        below = size - inside.size - _count_above(values, member, hi)
        if not below <= rank < below + inside.size:
            return None
        inside.partition(rank - below)
        out[i] = inside[rank - below]
    return out


def _count_above(values: np.ndarray, member: np.ndarray | None, hi: float) -> int:
    total = 0
    for c0 in range(0, values.size, _PASS_VALUES):
        above = values[c0 : c0 + _PASS_VALUES] > hi
        if member is not None:
            above &= member[c0 : c0 + _PASS_VALUES]
        total += int(np.count_nonzero(above))
    return total


def windowed_family(
    values: np.ndarray, offsets: np.ndarray, member: np.ndarray | None, quantiles: Sequence[int], sigmas: float
) -> WindowedFamily:
    """The windows of ``quantiles`` over a family held as CSR (request i owns ``values[offsets[i]:offsets[i+1]]``),
    of which ``member`` (None: all) says which values belong (finite, in the rounds), ``sigmas`` SDs either side.

    One partition of the members finds every window's edges exactly; per request, its values below a window
    are one masked pass."""
    member = np.ones(values.size, dtype=bool) if member is None else member
    per_request = per_request_count(member, offsets)
    size = int(per_request.sum())
    if size == 0:
        return WindowedFamily(0, per_request, ())
    ranks = []
    for q in quantiles:
        t = (size - 1) * q / 100.0
        half = sigmas * _sigma(values, offsets, member, per_request, q)
        ranks.append((max(0, int(np.floor(t - half)) - 2), min(size - 1, int(np.ceil(t + half)) + 2)))
    at = order_statistics(values, member, size, [k for pair in ranks for k in pair])
    edges = [float(v) for v in at[0::2]]
    belows = _counts_below(values, offsets, member, edges)
    windows = []
    for lo, hi, below in zip(at[0::2], at[1::2], belows, strict=True):
        pos = _between(values, member, lo, hi)  # every value equal to an edge is inside
        start = int(below.sum())
        v, o, m = merge_runs(values[pos], owners_of(pos, offsets))
        windows.append(Window(start, start + int(m.sum()), v, o, m, below))
    return WindowedFamily(size, per_request, tuple(windows))


def weighted_percentiles_batch(sorted_values: np.ndarray, weights: np.ndarray, qs: Sequence[int]) -> np.ndarray:
    """numpy's default (linear) percentiles, row by row, of the sample in which value i appears weights[r, i]
    times: integer weights (B, N) -> (B, len(qs)), NaN for an all-zero row."""
    cw = np.cumsum(weights, axis=1, dtype=np.int64)
    b, n = cw.shape
    out = np.full((b, len(qs)), np.nan)
    if n == 0:
        return out
    total = cw[:, -1]
    live = total > 0
    for i, q in enumerate(qs):
        h = (total - 1) * q / 100.0
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, total - 1)
        i_lo, i_hi = _positions(cw, lo), _positions(cw, hi)
        i_lo, i_hi = np.minimum(i_lo, n - 1), np.minimum(i_hi, n - 1)
        v_lo, v_hi = sorted_values[i_lo], sorted_values[i_hi]
        out[live, i] = (v_lo + (h - lo) * (v_hi - v_lo))[live]
    return out


def once_percentiles(
    values: np.ndarray, offsets: np.ndarray, member: np.ndarray | None, qs: Sequence[int]
) -> np.ndarray:
    """``weighted_percentiles_batch`` with every value weighed once (the estimate), by selection rather than a
    sort, with the same arithmetic (so the same bits)."""
    size = values.size if member is None else int(np.count_nonzero(member))
    out = np.full(len(qs), np.nan)
    if size == 0:
        return out
    h = np.array([(size - 1) * q / 100.0 for q in qs])
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    at = order_statistics(values, member, size, np.concatenate((lo, hi)))
    v_lo, v_hi = at[: len(qs)], at[len(qs) :]
    return v_lo + (h - lo) * (v_hi - v_lo)


def _positions(cw: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Per row, the first column whose cumulative weight exceeds the row's rank. Rows are non-decreasing:
    shifted apart by more than their largest total they are one sorted array, so one searchsorted serves
    every row (O(B log BN) instead of O(BN))."""
    b, n = cw.shape
    shift = np.arange(b, dtype=np.int64) * (int(cw[:, -1].max()) + 1)
    flat = (cw + shift[:, None]).ravel()
    return np.searchsorted(flat, ranks + shift, side="right") - np.arange(b, dtype=np.int64) * n


BLOCK_VALUES = 256
"""Values of a window per block: a replicate's weight per block is one sparse product, then it reads one block."""


class _WindowBlocks:
    """A window cut into blocks of ``BLOCK_VALUES``: every replicate's weight in every block, at the cost of one
    sparse product with the draws instead of a cumulative sum over the whole window per replicate."""

    def __init__(self, w: Window, draws: Draws) -> None:
        self.window, self.draws = w, draws
        self.units = draws.layout.unit_of[w.owners]
        size = w.values.size
        block = np.arange(size) // BLOCK_VALUES
        self.blocks = int(block[-1]) + 1 if size else 0
        incidence = sparse.csr_matrix(
            (w.mult.astype(np.float64), (block, self.units)), shape=(self.blocks, draws.counts.shape[1])
        )
        per_block = np.rint(incidence @ draws.counts_by_unit).T.astype(np.int64)  # (B, blocks)
        self.cum = np.cumsum(per_block, axis=1)  # weight up to each block's end (from the window's start)
        self.row_weight = self.cum[:, -1] if self.blocks else np.zeros(draws.rows, dtype=np.int64)

    def value_at(self, below: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Per replicate, the window's value at ``rank`` of the whole family (``below``: its weight before the
        window); clipped to the window's ends when the rank lies outside it (those rows take the exact path)."""
        w, size = self.window, self.window.values.size
        # The first block whose end passes the rank, then the first value inside it that does.
        k = np.clip(_positions(self.cum, rank - below), 0, self.blocks - 1)
        base = below + np.where(k > 0, np.take_along_axis(self.cum, np.maximum(k - 1, 0)[:, None], 1)[:, 0], 0)
        idx = k[:, None] * BLOCK_VALUES + np.arange(BLOCK_VALUES)
        valid = idx < size
        idx = np.minimum(idx, size - 1)
        weights = self.draws.counts[np.arange(self.draws.rows)[:, None], self.units[idx]] * w.mult[idx] * valid
        inside = np.count_nonzero(base[:, None] + np.cumsum(weights, axis=1) <= rank[:, None], axis=1)
        return w.values[np.minimum(k * BLOCK_VALUES + inside, size - 1)]


def windowed_percentiles(
    fam: WindowedFamily, draws: Draws, key: object, quantiles: Sequence[int], exact: Callable[[], Family]
) -> np.ndarray:
    """``weighted_percentiles_batch`` of every replicate of ``draws`` over the whole family, from its windows.
    ``key`` names the family for the draws' per-unit sums; ``exact()`` gives the sorted family for a replicate
    whose quantile falls outside a window."""
    b = draws.rows
    out = np.full((b, len(quantiles)), np.nan)
    if fam.size == 0:
        return out
    per_unit = draws.layout.aggregate(key, lambda: np.column_stack([fam.per_request, *(w.below for w in fam.windows)]))
    dots = draws.dot(per_unit)
    totals = dots[:, 0]
    live = totals > 0
    outside = np.zeros(b, dtype=bool)
    for i, (q, w) in enumerate(zip(quantiles, fam.windows, strict=True)):
        blocks = _WindowBlocks(w, draws)
        below = dots[:, 1 + i]
        h = (totals - 1) * q / 100.0
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, totals - 1)
        # Outside: the quantile lies before the window (the weight below it already passes lo), or after it.
        outside |= live & ((lo < below) | ((hi >= below + blocks.row_weight) & (w.end < fam.size)))
        v_lo, v_hi = blocks.value_at(below, lo), blocks.value_at(below, hi)
        out[:, i] = np.where(live, v_lo + (h - lo) * (v_hi - v_lo), np.nan)
    if outside.any():
        rows_out = np.flatnonzero(outside)
        values, owners, mult = exact()
        sub = Draws(draws.counts[rows_out], draws.layout)
        out[rows_out] = weighted_percentiles_batch(values, sub.at(owners) * mult, quantiles)
    return out
