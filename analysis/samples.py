"""Per-request arrays of one arm, the unit every bootstrap resamples.

Requests (not tokens) are the independent units: the inter-token latencies of one request share
its batch neighbours, so ITL is kept grouped by request (CSR layout) and resampled with it.
Rounds (``RequestRecord.round``, 0 in files written before rounds existed) are the second level.
Output-token arrival times are kept too (CSR, with weights summing to the tokens the server
reported), so rates can be cut into time blocks exactly as ``workloads.metrics`` does.

A request's schedule slot pairs it across arms. With a sweep, request indices restart at 0 at every
level, so the slot is made of the level and the index (``record_slot``), and each round's levels (each
a replay of its own, its clock from 0) are laid end to end in level order (``_level_shifts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from analysis.quantile_windows import Family, merge_runs, owners_of
from experiment.slo import SloSpec, slo_met
from result_format.run_result import ArmResult
from workloads.metrics import csr_block_rates, token_event_weight, token_events
from workloads.record_columns import NO_INT, RecordColumns, as_columns, csr_gaps
from workloads.records import RequestRecord

FloatArray = np.ndarray
FAMILIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
ITL_DTYPE = np.float32
"""Inter-token gaps are kept in single precision: 7 significant digits (1 ns on a 10 ms gap, 0.1 us on a 1 s
one, far below the client's timer and scheduling noise) for half the memory of a long run's largest array.
Ratios of their quantiles move by about 1e-7 against double precision."""


def arm_control_of(arm: ArmResult) -> str | None:
    """Name of the arm an A/A control arm duplicates; None for ordinary arms and older files."""
    value = getattr(arm, "control_of", None)
    return str(value) if value else None


@dataclass(frozen=True)
class ArmSamples:
    """Successful requests of one arm as aligned arrays (index i is one request)."""

    name: str
    ttft_s: FloatArray
    tpot_s: FloatArray  # NaN for requests with fewer than 2 output tokens
    e2e_s: FloatArray
    itl_flat_s: FloatArray  # all inter-token latencies, request after request
    itl_offsets: np.ndarray  # request i owns itl_flat_s[itl_offsets[i]:itl_offsets[i + 1]]
    output_tokens: FloatArray
    start_s: FloatArray  # intended send time: the schedule (with a sweep, levels end to end: ``_level_shifts``)
    end_s: FloatArray
    slo_met: np.ndarray  # bool per request
    rounds: np.ndarray  # int per request
    slots: np.ndarray  # schedule slot per request (``record_slot``): the same request in every arm and round
    token_times_s: FloatArray  # output-token arrivals (``token_events``) of the records the arm was made from
    token_offsets: np.ndarray  # row r of those records owns token_times_s[token_offsets[r]:token_offsets[r + 1]]
    token_rows: np.ndarray  # request i's row there: the records' arrays are shared, not copied per arm
    token_weight: FloatArray  # per request, tokens each of its arrivals stands for (server's count / timed tokens)
    token_shift_s: FloatArray | None  # per request, added to its arrival times (``_level_shifts``); None: none
    _families: dict[tuple[int, ...] | None, dict[str, Family]] = field(default_factory=dict, compare=False, repr=False)
    cache: dict[object, object] = field(default_factory=dict, compare=False, repr=False)
    """Derived values other modules compute once per arm (e.g. a round's rate blocks)."""

    @property
    def n(self) -> int:
        return int(self.ttft_s.size)

    def _in_rounds(self, rounds: tuple[int, ...] | None) -> np.ndarray | None:
        return None if rounds is None else np.isin(self.rounds, rounds)

    def family_size(self, family: str, rounds: tuple[int, ...] | None = None) -> int:
        """Finite values of a latency family over the requests of ``rounds`` (None: all)."""
        key = ("family_size", family, rounds)
        cached = self.cache.get(key)
        if isinstance(cached, int):
            return cached
        mine = self._in_rounds(rounds)
        if family == "itl_s":
            lengths = np.diff(self.itl_offsets)
            size = int(lengths.sum() if mine is None else lengths[mine].sum())
        else:
            finite = ~np.isnan(getattr(self, family))
            size = int(np.count_nonzero(finite if mine is None else finite & mine))
        self.cache[key] = size
        return size

    def raw_family(
        self, family: str, rounds: tuple[int, ...] | None = None
    ) -> tuple[FloatArray, np.ndarray, np.ndarray | None]:
        """A latency family as CSR, in place: (values, per-request offsets into them, which values belong: finite
        and of a request of ``rounds``; None: all). Nothing is copied: a long run's inter-token gaps are its
        largest array."""
        mine = self._in_rounds(rounds)
        if family == "itl_s":
            values, offsets = self.itl_flat_s, self.itl_offsets
            member = None if mine is None else np.repeat(mine, np.diff(offsets))
        else:
            values, offsets = getattr(self, family), np.arange(self.n + 1, dtype=np.int64)
            member = mine
        finite = ~np.isnan(values)
        if not finite.all():
            member = finite if member is None else member & finite
        return values, offsets, member

    def family(self, family: str, rounds: tuple[int, ...] | None = None) -> Family:
        """A latency family over the requests of ``rounds`` (None: all), sorted and merged (cached).

        Resampling then only changes each request's weight (how often it was drawn), so a bootstrap
        replicate costs a gather and a cumulative sum instead of a sort.
        """
        per_rounds = self._families.setdefault(rounds, {})
        if family not in per_rounds:
            values, offsets, member = self.raw_family(family, rounds)
            pos = np.arange(values.size) if member is None else np.flatnonzero(member)
            owners = owners_of(pos, offsets)
            values = values[pos]
            if family == "itl_s":
                per_rounds[family] = merge_runs(values, owners)
            else:  # one value per request, nothing to merge
                order = np.argsort(values, kind="stable")
                per_rounds[family] = (values[order], owners[order], np.ones(order.size, dtype=np.int64))
        return per_rounds[family]

    def token_block_rates(self, idx: np.ndarray, start_s: float, end_s: float, blocks: int) -> FloatArray:
        """Output tokens/s of the requests ``idx`` in each of ``blocks`` time blocks of [start_s, end_s]."""
        shift = None if self.token_shift_s is None else self.token_shift_s[idx]
        events = (self.token_times_s, self.token_offsets)
        return csr_block_rates(start_s, end_s, events, self.token_rows[idx], self.token_weight[idx], blocks, shift)

    @cached_property
    def itl_median_per_request(self) -> FloatArray:
        """Median inter-token latency of each request (NaN for requests with fewer than two tokens).

        Requests of one length are one matrix, a median per row; no sort of every gap by request."""
        lengths = np.diff(self.itl_offsets)
        out = np.full(self.n, np.nan)
        by_length = np.argsort(lengths, kind="stable")
        edges = np.flatnonzero(np.diff(lengths[by_length])) + 1
        for group in np.split(by_length, edges):
            length = int(lengths[group[0]]) if group.size else 0
            if length == 0:
                continue
            step = max(1, 4_000_000 // length)
            for lo in range(0, group.size, step):
                rows = group[lo : lo + step]
                out[rows] = np.median(self.itl_flat_s[self.itl_offsets[rows][:, None] + np.arange(length)], axis=1)
        return out

    def slot_lookup(self, rnd: int, size: int) -> np.ndarray:
        """Position of each schedule slot of round ``rnd`` in this arm's arrays, -1 where it has none."""
        out = np.full(size, -1, dtype=np.int64)
        mine = np.flatnonzero(self.rounds == rnd)
        out[self.slots[mine]] = mine
        return out

    def round_ids(self) -> list[int]:
        return sorted({int(r) for r in self.rounds})


def slot_stride(arms_records: Sequence[RecordColumns | Sequence[RequestRecord]]) -> int:
    """Slots one sweep level takes: the run's largest request index plus one (every arm, every record)."""
    biggest = [int(c.index.max()) for recs in arms_records if len(c := as_columns(recs))]
    return 1 + max(biggest, default=0)


def record_slots(records: RecordColumns, stride: int) -> np.ndarray:
    """The schedule slot of each record, unique per (level, index): a sweep level's indices restart at 0, so
    level ``k`` takes slots ``[k * stride, (k + 1) * stride)``. Without a sweep the slot is the index."""
    return np.maximum(records.level, 0) * stride + records.index


def _level_shifts(cols: RecordColumns, rows: np.ndarray) -> np.ndarray:
    """Per record of ``rows``, the shift laying a round's sweep levels end to end in level order.

    Every level is its own replay with its clock restarting at 0; shifted, a round's window is the sum
    of its levels' windows (first intended send to last end of each level's requests here), the rate over
    it is what ``workloads.metrics.arm_rates`` counts (total over the summed windows), and the rate blocks
    of two arms cover the same levels. The first level of a round stays where it is, so a run without a
    sweep, or a view of one level, is unchanged.
    """
    out = np.zeros(rows.size)
    level, rnd_of, end_s = cols.level[rows], cols.round[rows], cols.end_s[rows]
    swept = (level != NO_INT) & ~np.isnan(end_s)
    if not swept.any():
        return out
    send = cols.intended_send_s[rows]
    keys = sorted({(int(r), int(lv)) for r, lv in zip(rnd_of[swept], level[swept], strict=True)})
    cursor: dict[int, float] = {}
    for rnd, lv in keys:
        here = (rnd_of == rnd) & (level == lv)
        mine = swept & here
        start, end = float(send[mine].min()), float(end_s[mine].max())
        shift = cursor.get(rnd, start) - start
        out[here] = shift
        cursor[rnd] = end + shift
    return out


def arm_samples(
    name: str,
    records: RecordColumns | Sequence[RequestRecord],
    slo: SloSpec,
    stride: int | None = None,
    keep: np.ndarray | None = None,
) -> ArmSamples:
    """Arrays of the arm's successful requests with a first token (of the rows ``keep`` marks; None: all);
    failures count against goodput only through their absence (they never meet the SLOs).

    ``stride``: slots per sweep level (``slot_stride`` over every arm of the run, so all arms agree on
    the slots); None: from these records alone. With a sweep, times are laid out as ``_level_shifts``
    says; latencies are differences and do not move. The records' token times are shared, not copied
    (a long run's largest array); only the inter-token gaps are made.
    """
    cols = as_columns(records)
    stride = slot_stride([cols]) if stride is None else stride
    usable = cols.ok & ~np.isnan(cols.ttft_s) & ~np.isnan(cols.e2e_s)
    rows = np.flatnonzero(usable if keep is None else usable & keep)
    shift = _level_shifts(cols, rows)
    itl_flat, itl_offsets = csr_gaps(cols.token_times_s, cols.token_offsets, rows, dtype=ITL_DTYPE)
    times, tok_offsets = token_events(cols)
    tokens = np.where(cols.output_tokens > 0, cols.output_tokens, cols.token_counts)
    return ArmSamples(
        name=name,
        ttft_s=cols.ttft_s[rows],
        tpot_s=cols.tpot_s[rows],
        e2e_s=cols.e2e_s[rows],
        itl_flat_s=itl_flat,
        itl_offsets=itl_offsets,
        output_tokens=tokens[rows].astype(np.float64),
        start_s=cols.intended_send_s[rows] + shift,
        end_s=cols.end_s[rows] + shift,
        slo_met=slo_met(cols, slo)[rows],
        rounds=cols.round[rows].astype(np.int64),
        slots=record_slots(cols, stride)[rows],
        token_times_s=times,
        token_offsets=tok_offsets,
        token_rows=rows,
        token_weight=token_event_weight(cols)[rows],
        token_shift_s=shift if shift.any() else None,
    )


def from_arrays(
    name: str,
    ttft_s: Sequence[float] | np.ndarray,
    tpot_s: Sequence[float] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    start_s: Sequence[float] | np.ndarray,
    rounds: Sequence[int] | np.ndarray | None = None,
    slo: SloSpec | None = None,
    slots: Sequence[int] | np.ndarray | None = None,
) -> ArmSamples:
    """Synthetic arms for tests and simulations: constant ITL = TPOT per request, E2E derived, sent at
    ``start_s``; ``slots`` default to the position in the arrays."""
    ttft = np.asarray(ttft_s, dtype=np.float64)
    tpot = np.asarray(tpot_s, dtype=np.float64)
    tokens = np.asarray(output_tokens, dtype=np.int64)
    start = np.asarray(start_s, dtype=np.float64)
    e2e = ttft + tpot * np.maximum(tokens - 1, 0)
    lengths = np.maximum(tokens - 1, 0)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = np.repeat(tpot, lengths)
    tok_offsets = np.concatenate(([0], np.cumsum(tokens))).astype(np.int64)
    owner = np.repeat(np.arange(ttft.size), tokens)
    step = np.arange(int(tokens.sum())) - tok_offsets[owner]
    token_times = (start + ttft)[owner] + step * tpot[owner]
    spec = slo or SloSpec()
    met = np.ones(ttft.size, dtype=bool)
    for values, limit in ((ttft, spec.ttft_s), (tpot, spec.tpot_s), (e2e, spec.e2e_s)):
        if limit is not None:
            met &= values <= limit
    return ArmSamples(
        name=name,
        ttft_s=ttft,
        tpot_s=np.where(tokens >= 2, tpot, np.nan),
        e2e_s=e2e,
        itl_flat_s=flat,
        itl_offsets=offsets,
        output_tokens=tokens.astype(np.float64),
        start_s=start,
        end_s=start + e2e,
        slo_met=met,
        rounds=np.zeros(ttft.size, dtype=np.int64) if rounds is None else np.asarray(rounds, dtype=np.int64),
        slots=np.arange(ttft.size, dtype=np.int64) if slots is None else np.asarray(slots, dtype=np.int64),
        token_times_s=token_times,
        token_offsets=tok_offsets,
        token_rows=np.arange(ttft.size),
        token_weight=np.ones(ttft.size),
        token_shift_s=None,
    )
