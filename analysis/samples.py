"""Per-request arrays of one arm, the unit every bootstrap resamples.

Requests (not tokens) are the independent units: the inter-token latencies of one request share
its batch neighbours, so ITL is kept grouped by request (CSR layout) and resampled with it.
Rounds (``RequestRecord.round``, 0 in files written before rounds existed) are the second level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from experiment.slo import SloSpec, meets_slo
from result_format.run_result import ArmResult
from workloads.records import RequestRecord

FloatArray = np.ndarray


def record_round(record: RequestRecord) -> int:
    """The interleaving round of a record; files from before rounds existed are one round (0)."""
    return int(getattr(record, "round", 0) or 0)


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
    start_s: FloatArray  # intended send time: the schedule, identical across arms
    end_s: FloatArray
    slo_met: np.ndarray  # bool per request
    rounds: np.ndarray  # int per request
    slots: np.ndarray  # schedule index per request: the same request in every arm and round

    @property
    def n(self) -> int:
        return int(self.ttft_s.size)

    def itl_of(self, idx: np.ndarray) -> FloatArray:
        """Inter-token latencies of the requests ``idx`` (with repeats), concatenated."""
        starts = self.itl_offsets[idx]
        lengths = self.itl_offsets[idx + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.empty(0)
        shift = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        return self.itl_flat_s[np.arange(total) + shift]

    @cached_property
    def sorted_by_family(self) -> dict[str, tuple[FloatArray, np.ndarray]]:
        """Per latency family: (finite values ascending, the request that owns each value).

        Resampling then only changes each request's weight (how often it was drawn), so a bootstrap
        replicate costs a gather and a cumulative sum instead of a sort.
        """
        owners_itl = np.repeat(np.arange(self.n), np.diff(self.itl_offsets))
        out: dict[str, tuple[FloatArray, np.ndarray]] = {}
        for family, values, owners in (
            ("ttft_s", self.ttft_s, np.arange(self.n)),
            ("tpot_s", self.tpot_s, np.arange(self.n)),
            ("itl_s", self.itl_flat_s, owners_itl),
            ("e2e_s", self.e2e_s, np.arange(self.n)),
        ):
            keep = ~np.isnan(values)
            order = np.argsort(values[keep], kind="stable")
            out[family] = (values[keep][order], owners[keep][order])
        return out

    def itl_median_per_request(self) -> FloatArray:
        out = np.full(self.n, np.nan)
        for i in range(self.n):
            seg = self.itl_flat_s[self.itl_offsets[i] : self.itl_offsets[i + 1]]
            if seg.size:
                out[i] = float(np.median(seg))
        return out

    def slot_lookup(self, rnd: int, size: int) -> np.ndarray:
        """Position of each schedule slot of round ``rnd`` in this arm's arrays, -1 where it has none."""
        out = np.full(size, -1, dtype=np.int64)
        mine = np.flatnonzero(self.rounds == rnd)
        out[self.slots[mine]] = mine
        return out

    def round_ids(self) -> list[int]:
        return sorted({int(r) for r in self.rounds})


def arm_samples(name: str, records: Sequence[RequestRecord], slo: SloSpec) -> ArmSamples:
    """Arrays of the arm's successful requests with a first token; failures count against goodput only
    through their absence (they never meet the SLOs)."""
    ok = [r for r in records if r.ok and r.ttft_s is not None and r.e2e_s is not None]
    itl_lists = [r.itl_s for r in ok]
    offsets = np.concatenate(([0], np.cumsum([len(x) for x in itl_lists]))).astype(np.int64)
    flat = np.fromiter((v for x in itl_lists for v in x), dtype=np.float64, count=int(offsets[-1]))
    return ArmSamples(
        name=name,
        ttft_s=np.array([r.ttft_s for r in ok], dtype=np.float64),
        tpot_s=np.array([np.nan if r.tpot_s is None else r.tpot_s for r in ok], dtype=np.float64),
        e2e_s=np.array([r.e2e_s for r in ok], dtype=np.float64),
        itl_flat_s=flat,
        itl_offsets=offsets,
        output_tokens=np.array([r.output_tokens or len(r.token_times_s) for r in ok], dtype=np.float64),
        start_s=np.array([r.intended_send_s for r in ok], dtype=np.float64),
        end_s=np.array([r.end_s for r in ok], dtype=np.float64),
        slo_met=np.array([meets_slo(r, slo) for r in ok], dtype=bool),
        rounds=np.array([record_round(r) for r in ok], dtype=np.int64),
        slots=np.array([r.index for r in ok], dtype=np.int64),
    )


def from_arrays(
    name: str,
    ttft_s: Sequence[float],
    tpot_s: Sequence[float],
    output_tokens: Sequence[int],
    start_s: Sequence[float],
    rounds: Sequence[int] | None = None,
    slo: SloSpec | None = None,
) -> ArmSamples:
    """Synthetic arms for tests and simulations: constant ITL = TPOT per request, E2E derived."""
    ttft = np.asarray(ttft_s, dtype=np.float64)
    tpot = np.asarray(tpot_s, dtype=np.float64)
    tokens = np.asarray(output_tokens, dtype=np.int64)
    start = np.asarray(start_s, dtype=np.float64)
    e2e = ttft + tpot * np.maximum(tokens - 1, 0)
    lengths = np.maximum(tokens - 1, 0)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    flat = np.repeat(tpot, lengths)
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
        slots=np.arange(ttft.size, dtype=np.int64),
    )
