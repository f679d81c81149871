"""Request records of one arm as columns: what the analysis, report and nightly read.

A million requests as pydantic objects (each with a list of token times) cost gigabytes and minutes
to build; as numpy columns they cost their bytes. Missing values follow one rule per type so that no
column needs a mask: floats are NaN, counts and statuses -1, a level of "no sweep" -1. Token arrival
times are one flat array with per-request offsets (CSR), the layout the bootstrap resamples.

``RequestRecord`` stays the unit the client measures and ships; ``from_records`` and ``to_records``
convert at the edges (old result files, tests, the live metrics), never inside the analysis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from workloads.records import RequestRecord

NO_INT = -1
"""A count or status the record does not have (server reported no usage, no HTTP answer, no sweep level)."""

_INT_FIELDS = (
    "index",
    "round",
    "client",
    "level",
    "prompt_tokens_requested",
    "output_tokens_requested",
    "prompt_tokens",
    "output_tokens",
    "http_status",
)
_FLOAT_FIELDS = ("intended_send_s", "actual_send_s", "cap_wait_s", "first_token_s", "end_s")
_BOOL_FIELDS = ("warmup", "tokens_exact")
_TEXT_FIELDS = ("arm", "error_kind", "error")
SCALAR_FIELDS = _INT_FIELDS + _FLOAT_FIELDS + _BOOL_FIELDS + _TEXT_FIELDS
"""Every field of ``RequestRecord`` except ``token_times_s``, which is ``token_times_s`` + ``token_offsets``."""


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def csr_positions(offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the rows ``idx`` (any order, repeats allowed) of a CSR array lie in its flat values, end to end,
    and the offsets of those rows in that order: one gather then serves every flat array of the rows."""
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    new_offsets = _offsets(lengths)
    shift = np.repeat(starts - new_offsets[:-1], lengths)
    return np.arange(int(new_offsets[-1]), dtype=np.int64) + shift, new_offsets


CHUNK_VALUES = 1_000_000
"""Flat values one pass over CSR rows reads at a time: its temporaries (positions, values) stay near 16 MB
however long the run, where a whole-array pass over a million requests' tokens made several 300 MB copies."""


def row_chunks(lengths: np.ndarray, chunk_values: int = CHUNK_VALUES) -> list[slice]:
    """Consecutive slices of rows (of these ``lengths``) holding about ``chunk_values`` values each."""
    if lengths.size == 0:
        return []
    ends = np.cumsum(lengths)
    cuts = np.searchsorted(ends, np.arange(chunk_values, int(ends[-1]), chunk_values), side="left") + 1
    bounds = [0, *sorted({int(c) for c in cuts if 0 < c < lengths.size}), int(lengths.size)]
    return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def csr_gaps(
    flat: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    chunk_values: int = CHUNK_VALUES,
    dtype: type[np.floating[Any]] = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """Differences of consecutive values inside each of the rows ``rows`` (inter-token gaps from token times),
    end to end, with their offsets; read in chunks, so nothing the size of all the values is made but the
    result. The same subtractions as ``np.diff`` over the whole array, so the same bits (then rounded to
    ``dtype``)."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = _offsets(np.maximum(lengths - 1, 0))
    out = np.empty(int(new_offsets[-1]), dtype=dtype)
    for part in row_chunks(lengths, chunk_values):
        positions, part_offsets = csr_positions(offsets, rows[part])
        gaps = np.diff(flat[positions])
        inside = np.ones(gaps.size, dtype=bool)
        ends = part_offsets[1:][lengths[part] > 0] - 1
        inside[ends[ends < gaps.size]] = False
        out[new_offsets[part.start] : new_offsets[part.stop]] = gaps[inside]
    return out, new_offsets


def gather_csr(flat: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``idx`` (any order, repeats allowed) of a CSR array: (their values end to end, new offsets)."""
    positions, new_offsets = csr_positions(offsets, idx)
    if positions.size == 0:
        return flat[:0].copy(), new_offsets
    return flat[positions], new_offsets


@dataclass(frozen=True, eq=False)
class RecordColumns:
    """Aligned columns, row i one request. Build with ``from_records``/``from_arrays``; filter with ``select``."""

    index: np.ndarray
    round: np.ndarray
    client: np.ndarray
    level: np.ndarray  # NO_INT: the run has no sweep
    prompt_tokens_requested: np.ndarray
    output_tokens_requested: np.ndarray
    prompt_tokens: np.ndarray  # NO_INT: the server reported no usage
    output_tokens: np.ndarray  # NO_INT: the server reported no usage
    http_status: np.ndarray  # NO_INT: no answer came
    intended_send_s: np.ndarray
    actual_send_s: np.ndarray  # NaN: never sent
    cap_wait_s: np.ndarray
    first_token_s: np.ndarray  # NaN: no token came
    end_s: np.ndarray  # NaN: the stream never closed
    warmup: np.ndarray
    tokens_exact: np.ndarray
    arm: np.ndarray  # object: str
    error_kind: np.ndarray  # object: str or None
    error: np.ndarray  # object: str or None
    token_times_s: np.ndarray  # every timed output token, request after request
    token_offsets: np.ndarray  # request i owns token_times_s[token_offsets[i]:token_offsets[i + 1]]

    # --- building --------------------------------------------------------------------------------

    @classmethod
    def from_arrays(cls, columns: dict[str, Any], token_times_s: Any, token_offsets: Any) -> RecordColumns:
        """Columns under their ``RequestRecord`` names, missing values already in this module's convention."""
        n = len(columns["index"])
        out: dict[str, Any] = {}
        for name in _INT_FIELDS:
            out[name] = np.asarray(columns[name], dtype=np.int64).reshape(n)
        for name in _FLOAT_FIELDS:
            out[name] = np.asarray(columns[name], dtype=np.float64).reshape(n)
        for name in _BOOL_FIELDS:
            out[name] = np.asarray(columns[name], dtype=bool).reshape(n)
        for name in _TEXT_FIELDS:
            arr = np.empty(n, dtype=object)
            arr[:] = list(columns[name]) if n else []
            out[name] = arr
        offsets = np.asarray(token_offsets, dtype=np.int64)
        if offsets.size != n + 1:
            raise ValueError(f"token_offsets has {offsets.size} entries for {n} records (want {n + 1})")
        return cls(**out, token_times_s=np.asarray(token_times_s, dtype=np.float64), token_offsets=offsets)

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> RecordColumns:
        recs = list(records)
        cols: dict[str, Any] = {}
        for name in _INT_FIELDS:
            cols[name] = [NO_INT if (v := getattr(r, name)) is None else v for r in recs]
        for name in _FLOAT_FIELDS:
            cols[name] = [np.nan if (v := getattr(r, name)) is None else v for r in recs]
        for name in _BOOL_FIELDS + _TEXT_FIELDS:
            cols[name] = [getattr(r, name) for r in recs]
        lengths = np.fromiter((len(r.token_times_s) for r in recs), dtype=np.int64, count=len(recs))
        offsets = _offsets(lengths)
        flat = np.fromiter((t for r in recs for t in r.token_times_s), dtype=np.float64, count=int(offsets[-1]))
        return cls.from_arrays(cols, flat, offsets)

    @classmethod
    def empty(cls) -> RecordColumns:
        return cls.from_records([])

    @classmethod
    def concat(cls, parts: Sequence[RecordColumns]) -> RecordColumns:
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        cols = {name: np.concatenate([getattr(p, name) for p in parts]) for name in SCALAR_FIELDS}
        lengths = np.concatenate([np.diff(p.token_offsets) for p in parts])
        return cls.from_arrays(cols, np.concatenate([p.token_times_s for p in parts]), _offsets(lengths))

    def to_records(self) -> list[RequestRecord]:
        """Back to pydantic records, for the edges that still want them (tests, small tools)."""
        out = []
        for i in range(len(self)):
            d: dict[str, Any] = {}
            for name in _INT_FIELDS:
                v = int(getattr(self, name)[i])
                d[name] = (
                    None if v == NO_INT and name in ("level", "prompt_tokens", "output_tokens", "http_status") else v
                )
            for name in _FLOAT_FIELDS:
                fv = float(getattr(self, name)[i])
                d[name] = None if np.isnan(fv) and name != "intended_send_s" else fv
            for name in _BOOL_FIELDS:
                d[name] = bool(getattr(self, name)[i])
            for name in _TEXT_FIELDS:
                d[name] = getattr(self, name)[i]
            lo, hi = self.token_offsets[i], self.token_offsets[i + 1]
            d["token_times_s"] = self.token_times_s[lo:hi].tolist()
            out.append(RequestRecord.model_construct(**d))
        return out

    # --- selecting -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.index.size)

    def select(self, which: np.ndarray) -> RecordColumns:
        """The rows a boolean mask or an index array picks, in that order."""
        if which.dtype == bool and which.size == len(self) and which.all():
            return self  # nothing left out: columns are never written to, so sharing costs nothing
        idx = np.flatnonzero(which) if which.dtype == bool else np.asarray(which, dtype=np.int64)
        cols = {name: getattr(self, name)[idx] for name in SCALAR_FIELDS}
        flat, offsets = gather_csr(self.token_times_s, self.token_offsets, idx)
        return RecordColumns(**cols, token_times_s=flat, token_offsets=offsets)

    @property
    def measured(self) -> RecordColumns:
        """Without the sweep levels' warm-up shares: the requests every statistic is about."""
        return self if not self.warmup.any() else self.select(~self.warmup)

    def at_level(self, level: int) -> RecordColumns:
        return self.select(self.level == level)

    # --- derived per-request values (NaN where a record has none) -----------------------------------

    @cached_property
    def ok(self) -> np.ndarray:
        """Finished without error: the record's stream closed and nothing went wrong."""
        return np.array([e is None for e in self.error], dtype=bool) & ~np.isnan(self.end_s)

    @cached_property
    def token_counts(self) -> np.ndarray:
        return np.diff(self.token_offsets)

    @cached_property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.actual_send_s

    @cached_property
    def e2e_s(self) -> np.ndarray:
        return self.end_s - self.actual_send_s

    @cached_property
    def tpot_s(self) -> np.ndarray:
        """Mean time per output token after the first, as vLLM's own benchmark defines it."""
        n = self.token_counts
        out = np.full(len(self), np.nan)
        has = n >= 2
        first = self.token_times_s[self.token_offsets[:-1][has]]
        last = self.token_times_s[self.token_offsets[1:][has] - 1]
        out[has] = (last - first) / (n[has] - 1)
        return out

    @cached_property
    def send_lag_ms(self) -> np.ndarray:
        return (self.actual_send_s - self.intended_send_s) * 1000.0

    @cached_property
    def dispatch_lag_ms(self) -> np.ndarray:
        """Send lag the client itself caused: without the wait for the in-flight cap."""
        return self.send_lag_ms - self.cap_wait_s * 1000.0

    @cached_property
    def itl(self) -> tuple[np.ndarray, np.ndarray]:
        """(every inter-token latency, request after request; per-request offsets into it)."""
        return csr_gaps(self.token_times_s, self.token_offsets, np.arange(len(self)))

    @cached_property
    def output_token_count(self) -> np.ndarray:
        """Output tokens the server reported, else the chunks counted (``tokens_exact`` false)."""
        return np.where(self.output_tokens >= 0, self.output_tokens, self.token_counts)

    def rounds(self) -> list[int]:
        return sorted({int(r) for r in np.unique(self.round)})

    def levels(self) -> list[int]:
        return sorted({int(v) for v in np.unique(self.level) if v != NO_INT})


def as_columns(records: RecordColumns | Iterable[RequestRecord]) -> RecordColumns:
    """Columns as they are, or built from records (tests and old callers hand lists of ``RequestRecord``)."""
    return records if isinstance(records, RecordColumns) else RecordColumns.from_records(records)
