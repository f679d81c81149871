"""The replay plan as columns: one numpy array per field of ``PlannedRequest``, shared blocks in CSR form.

A week-long trace or a million synthetic requests is a million plans. As pydantic objects that is about
1.2 kB each, held by the driver for the whole run, pickled one dict each to every client and re-validated
there; as columns it is 57 bytes a request (plus 16 a shared block), built, sharded, shipped through Ray
and written to the run folder without one Python object per request. ``PlannedRequest`` stays the model of
one request (its field descriptions are the schema); ``request(i)`` and iteration make them one at a time,
when a request is about to be sent.

``after_index`` is -1 where the model has None. Shared blocks: request ``i`` opens with the blocks
``block_keys[block_offsets[i]:block_offsets[i + 1]]`` of ``block_tokens[...]`` tokens each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workloads.record_columns import csr_positions
from workloads.schedule import PlannedRequest

SCHEDULE_FILE = "schedule.parquet"
LEGACY_SCHEDULE_FILE = "schedule.json"
"""What run folders written before 2026-12 hold instead: the whole plan as one JSON object."""
_META_KEY = b"moeperf.schedule"

_INT_COLUMNS = ("index", "prompt_tokens", "max_tokens", "after_index")
_FLOAT_COLUMNS = ("send_offset_s", "think_time_s")
_BLOCK_COLUMNS = ("block_keys", "block_tokens", "block_offsets")


def _i64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _f64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class ScheduleColumns:
    """Requests in schedule order (a predecessor before what follows it); checked once, vectorised, when made.

    Indexable and iterable like a list of ``PlannedRequest`` (not a ``Sequence``: its ``index`` is the column)."""

    index: np.ndarray
    send_offset_s: np.ndarray
    prompt_tokens: np.ndarray
    max_tokens: np.ndarray
    after_index: np.ndarray
    think_time_s: np.ndarray
    warmup: np.ndarray
    block_keys: np.ndarray
    block_tokens: np.ndarray
    block_offsets: np.ndarray

    def __post_init__(self) -> None:
        for name in _INT_COLUMNS + ("block_keys", "block_tokens", "block_offsets"):
            object.__setattr__(self, name, _i64(getattr(self, name)))
        for name in _FLOAT_COLUMNS:
            object.__setattr__(self, name, _f64(getattr(self, name)))
        object.__setattr__(self, "warmup", np.ascontiguousarray(self.warmup, dtype=bool))
        self._check()

    def _check(self) -> None:
        """The model's constraints, on whole columns: what ``PlannedRequest`` would refuse, this refuses."""
        n = len(self.index)
        for name in _INT_COLUMNS + _FLOAT_COLUMNS + ("warmup",):
            col = getattr(self, name)
            if col.ndim != 1 or len(col) != n:
                raise ValueError(f"schedule column {name}: {col.shape} values for {n} requests")
        off = self.block_offsets
        if off.ndim != 1 or len(off) != n + 1 or off[0] != 0 or np.any(np.diff(off) < 0):
            raise ValueError("schedule column block_offsets: not the offsets of one block list per request")
        if len(self.block_keys) != off[-1] or len(self.block_tokens) != off[-1]:
            raise ValueError(f"schedule blocks: {off[-1]} blocks by the offsets, {len(self.block_keys)} keys")
        for name, lo in (("prompt_tokens", 1), ("max_tokens", 1)):
            if n and getattr(self, name).min() < lo:
                raise ValueError(f"schedule column {name}: a value below {lo}")
        for name in _FLOAT_COLUMNS:
            col = getattr(self, name)
            if n and not (np.all(np.isfinite(col)) and col.min() >= 0):
                raise ValueError(f"schedule column {name}: a negative or non-finite value")
        if n and self.after_index.min() < -1:
            raise ValueError("schedule column after_index: below -1 (-1 stands for none)")

    # --- to and from the model ---------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> ScheduleColumns:
        return cls.from_requests([])

    @classmethod
    def from_requests(cls, requests: Sequence[PlannedRequest]) -> ScheduleColumns:
        """Columns of a list (tests, small hand-made schedules, an old run folder's ``schedule.json``)."""
        if isinstance(requests, ScheduleColumns):
            return requests
        counts = np.fromiter((len(r.shared_blocks) for r in requests), dtype=np.int64, count=len(requests))
        blocks = [b for r in requests for b in r.shared_blocks]
        return cls(
            index=np.fromiter((r.index for r in requests), np.int64, len(requests)),
            send_offset_s=np.fromiter((r.send_offset_s for r in requests), np.float64, len(requests)),
            prompt_tokens=np.fromiter((r.prompt_tokens for r in requests), np.int64, len(requests)),
            max_tokens=np.fromiter((r.max_tokens for r in requests), np.int64, len(requests)),
            after_index=np.fromiter(
                (-1 if r.after_index is None else r.after_index for r in requests), np.int64, len(requests)
            ),
            think_time_s=np.fromiter((r.think_time_s for r in requests), np.float64, len(requests)),
            warmup=np.fromiter((r.warmup for r in requests), bool, len(requests)),
            block_keys=np.array([k for k, _ in blocks], dtype=np.int64),
            block_tokens=np.array([n for _, n in blocks], dtype=np.int64),
            block_offsets=np.concatenate([[0], np.cumsum(counts)]),
        )

    def to_requests(self) -> list[PlannedRequest]:
        return list(self)

    def request(self, i: int) -> PlannedRequest:
        """The request at position ``i``, as the model; unvalidated (``model_construct``): the columns were
        checked whole when they were made, and this runs once per request sent."""
        lo, hi = int(self.block_offsets[i]), int(self.block_offsets[i + 1])
        after = int(self.after_index[i])
        return PlannedRequest.model_construct(
            index=int(self.index[i]),
            send_offset_s=float(self.send_offset_s[i]),
            prompt_tokens=int(self.prompt_tokens[i]),
            max_tokens=int(self.max_tokens[i]),
            shared_blocks=tuple(zip(self.block_keys[lo:hi].tolist(), self.block_tokens[lo:hi].tolist(), strict=True)),
            after_index=None if after < 0 else after,
            think_time_s=float(self.think_time_s[i]),
            warmup=bool(self.warmup[i]),
        )

    def __len__(self) -> int:
        return len(self.index)

    @overload
    def __getitem__(self, i: int) -> PlannedRequest: ...
    @overload
    def __getitem__(self, i: slice) -> ScheduleColumns: ...
    def __getitem__(self, i: int | slice) -> PlannedRequest | ScheduleColumns:
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"request position {i} out of range for {n} requests")
        return self.request(i % n)

    def __iter__(self) -> Iterator[PlannedRequest]:
        for i in range(len(self)):
            yield self.request(i)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScheduleColumns):
            return NotImplemented
        return all(np.array_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside: equal by value, never a dict key

    def __repr__(self) -> str:
        return f"ScheduleColumns({len(self)} requests, {len(self.block_keys)} shared blocks)"

    # --- whole-column views ------------------------------------------------------------------------------
    @property
    def duration_s(self) -> float:
        return float(self.send_offset_s.max()) if len(self) else 0.0

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))

    def take(self, positions: np.ndarray) -> ScheduleColumns:
        """The requests at ``positions`` (in that order), their blocks with them."""
        pos = _i64(positions)
        flat, offsets = csr_positions(self.block_offsets, pos)
        return ScheduleColumns(
            index=self.index[pos],
            send_offset_s=self.send_offset_s[pos],
            prompt_tokens=self.prompt_tokens[pos],
            max_tokens=self.max_tokens[pos],
            after_index=self.after_index[pos],
            think_time_s=self.think_time_s[pos],
            warmup=self.warmup[pos],
            block_keys=self.block_keys[flat],
            block_tokens=self.block_tokens[flat],
            block_offsets=offsets,
        )

    def with_warmup(self, warmup: np.ndarray) -> ScheduleColumns:
        return ScheduleColumns(**{**self.to_arrays(), "warmup": warmup})

    @staticmethod
    def concat(parts: Sequence[ScheduleColumns]) -> ScheduleColumns:
        if not parts:
            return ScheduleColumns.empty()
        arrays: dict[str, Any] = {
            name: np.concatenate([getattr(p, name) for p in parts])
            for name in (*_INT_COLUMNS, *_FLOAT_COLUMNS, "warmup", "block_keys", "block_tokens")
        }
        shifts = np.cumsum([0] + [p.block_offsets[-1] for p in parts[:-1]])
        arrays["block_offsets"] = np.concatenate(
            [[0]] + [p.block_offsets[1:] + s for p, s in zip(parts, shifts, strict=True)]
        )
        return ScheduleColumns(**arrays)

    # --- chains ------------------------------------------------------------------------------------------
    def parent_positions(self, earlier_only: bool = False) -> np.ndarray:
        """Position of each request's ``after_index`` among these requests, -1 where it waits on none of them
        (or, with ``earlier_only``, on none listed before it). Indices must be unique."""
        n = len(self)
        order = np.argsort(self.index, kind="stable")
        sorted_index = self.index[order]
        if n > 1 and np.any(sorted_index[1:] == sorted_index[:-1]):
            raise ValueError("schedule: two requests share an index")
        slot = np.minimum(np.searchsorted(sorted_index, self.after_index), max(n - 1, 0))
        found = (self.after_index >= 0) & (sorted_index[slot] == self.after_index) if n else np.zeros(0, bool)
        parent = np.where(found, order[slot] if n else slot, -1)
        if earlier_only:
            parent = np.where(parent < np.arange(n), parent, -1)
        return parent.astype(np.int64)

    def chain_depths(self, timeout_s: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per request: the position of the first request of its chain (within these requests), its depth in
        the chain, and the think time plus ``timeout_s`` summed over the chain's links up to it. Pointer
        jumping: log2(longest chain) whole-array steps; a cycle raises ``ValueError``."""
        n = len(self)
        parent = self.parent_positions()
        linked = parent >= 0
        top = np.where(linked, parent, np.arange(n))
        depth = linked.astype(np.int64)
        extra_s = np.where(linked, self.think_time_s + timeout_s, 0.0)
        steps = 0
        while True:
            up = top[top]
            moving = up != top
            if not moving.any():
                break
            steps += 1
            if steps > 64:
                raise ValueError("schedule: after_index chains have a cycle")
            depth = depth + np.where(moving, depth[top], 0)
            extra_s = extra_s + np.where(moving, extra_s[top], 0.0)
            top = up
        cyclic = linked & (parent[top] >= 0)
        if cyclic.any():
            first = int(np.flatnonzero(cyclic)[0])
            raise ValueError(f"request #{int(self.index[first])}: after_index chain has a cycle")
        return top, depth, extra_s

    def shard(self, num_shards: int, shard_index: int) -> ScheduleColumns:
        """``workloads.schedule.shard`` on columns: whole ``after_index`` chains go to the shard of their root
        (the request they start from; a predecessor not in the schedule counts as the root), round robin by
        the root's index, so every shard sees the whole time span at 1/num_shards of the rate."""
        return self.take(np.flatnonzero(self.chain_roots() % num_shards == shard_index))

    def chain_roots(self) -> np.ndarray:
        """The root index of every request's chain, as ``shard`` counts it: chains followed through requests
        listed earlier; a predecessor not among them is itself the root."""
        n = len(self)
        parent = self.parent_positions(earlier_only=True)
        top = np.where(parent >= 0, parent, np.arange(n))
        while True:  # parents come earlier, so there is no cycle: this ends within log2(n) + 1 steps
            up = top[top]
            if np.array_equal(up, top):
                break
            top = up
        return np.where(self.after_index[top] < 0, self.index[top], self.after_index[top])

    # --- through Ray and on disk ------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (what goes through Ray: numpy arrays pickle as their buffers)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any]) -> ScheduleColumns:
        return cls(**{f.name: arrays[f.name] for f in fields(cls)})

    def to_table(self, meta: dict[str, Any] | None = None) -> pa.Table:
        """One row per request; the blocks as two list columns sharing the offsets."""
        offsets = pa.array(
            self.block_offsets.astype(np.int32) if self.block_offsets[-1] < 2**31 else self.block_offsets
        )
        list_type = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
        columns = {
            "index": self.index,
            "send_offset_s": self.send_offset_s,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "after_index": self.after_index,
            "think_time_s": self.think_time_s,
            "warmup": self.warmup,
            "shared_block_keys": list_type.from_arrays(offsets, pa.array(self.block_keys)),
            "shared_block_tokens": list_type.from_arrays(offsets, pa.array(self.block_tokens)),
        }
        table = pa.table(columns)
        return table.replace_schema_metadata({_META_KEY: json.dumps(meta or {}).encode()})

    @classmethod
    def from_table(cls, table: pa.Table) -> tuple[ScheduleColumns, dict[str, Any]]:
        def col(name: str) -> np.ndarray:
            return table.column(name).to_numpy()

        keys = table.column("shared_block_keys").combine_chunks()
        tokens = table.column("shared_block_tokens").combine_chunks()
        offsets = keys.offsets.to_numpy().astype(np.int64) if len(keys) else np.zeros(1, np.int64)
        base = offsets[0]
        cols = cls(
            index=col("index"),
            send_offset_s=col("send_offset_s"),
            prompt_tokens=col("prompt_tokens"),
            max_tokens=col("max_tokens"),
            after_index=col("after_index"),
            think_time_s=col("think_time_s"),
            warmup=col("warmup"),
            block_keys=keys.values.to_numpy()[base : offsets[-1]] if len(keys) else np.zeros(0, np.int64),
            block_tokens=tokens.values.to_numpy()[base : offsets[-1]] if len(tokens) else np.zeros(0, np.int64),
            block_offsets=offsets - base,
        )
        raw = (table.schema.metadata or {}).get(_META_KEY)
        return cols, (json.loads(raw) if raw else {})

    def write_parquet(self, path: Path, meta: dict[str, Any] | None = None) -> None:
        """zstd-compressed Parquet: a million requests in a few megabytes, readable by any Arrow tool."""
        pq.write_table(self.to_table(meta), path, compression="zstd")

    @classmethod
    def read_parquet(cls, path: Path) -> tuple[ScheduleColumns, dict[str, Any]]:
        return cls.from_table(pq.read_table(path))


def as_columns(requests: ScheduleColumns | Sequence[PlannedRequest]) -> ScheduleColumns:
    """Columns as they are, or of a list of requests (the tests' and benches' hand-made schedules)."""
    return requests if isinstance(requests, ScheduleColumns) else ScheduleColumns.from_requests(requests)


def most_within(times_s: np.ndarray, window_s: float) -> int:
    """Most of the (sorted) times inside any window of ``window_s``: the count a two-pointer loop finds with
    ``t[hi] - t[lo] > window_s``, by the same float subtraction. ``searchsorted`` finds each window's start to
    within a rounding step, which is then settled (the difference is monotone in ``lo``, so this ends)."""
    t = np.asarray(times_s, dtype=np.float64)
    if not len(t):
        return 0
    hi = np.arange(len(t))
    lo = np.searchsorted(t, t - window_s, side="left")
    while True:
        late = (lo < hi) & (t - t[lo] > window_s)
        early = (lo > 0) & (t - t[np.maximum(lo - 1, 0)] <= window_s)
        if not (late.any() or early.any()):
            return int((hi - lo + 1).max())
        lo = lo + late.astype(np.int64) - early.astype(np.int64)
