"""What the slot bootstrap redraws: schedule slots, or, in a production-length round, random groups of them.

Redrawing a million slots a thousand times is a billion draws per round, and every statistic then
weighs a million requests per replicate. The statistics are smooth in the slots' weights, so their
bootstrap variance is a sum of per-slot influences squared; grouping the slots at random into G equal
units and redrawing units leaves that sum's expectation unchanged (the cross terms of a random group
average to zero) and adds relative noise of about sqrt(2 / G) to the standard error. With G = 20,000
units per round that is 1%, below the 2% a thousand replicates already carry. A round with fewer
slots than that redraws its slots one by one, exactly the plain slot bootstrap (every run measured so
far, every test).

Units are the same for every arm (a slot's unit depends only on the round's slots), so B/A stays
paired, and they are fixed by the round's size, not by the bootstrap's generator, so every chunk of
replicates agrees on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

UNITS_PER_ROUND = 20_000
"""Most units one round's slots are grouped into; a round with fewer slots redraws each slot."""
_UNIT_SEED_DOMAIN = 0x0517


class _HasSlots(Protocol):
    @property
    def rounds(self) -> np.ndarray: ...

    @property
    def slots(self) -> np.ndarray: ...

    @property
    def n(self) -> int: ...


def round_units(size: int) -> np.ndarray:
    """Unit of each of a round's ``size`` slots (in slot order): the slot itself, or a random equal-sized group."""
    if size <= UNITS_PER_ROUND:
        return np.arange(size, dtype=np.int64)
    return np.random.default_rng([size, _UNIT_SEED_DOMAIN]).permutation(size) % UNITS_PER_ROUND


@dataclass(frozen=True, eq=False)
class UnitLayout:
    """Which unit each request of one arm falls in; requests outside the drawn rounds fall in ``units``, the
    last column of every count matrix, which is always zero."""

    unit_of: np.ndarray  # (n,) int64 in [0, units]
    units: int
    cache: dict[object, np.ndarray] = field(default_factory=dict, repr=False)
    """Per-unit sums of per-request weights (``aggregate``), kept for every chunk of one bootstrap."""

    @classmethod
    def identity(cls, n: int) -> UnitLayout:
        return cls(np.arange(n, dtype=np.int64), n)

    def aggregate(self, key: object, per_request: Callable[[], np.ndarray]) -> np.ndarray:
        """(units + 1, k) sums of the (n, k) per-request weights ``per_request()`` over each unit's requests
        (cached by ``key``: the weights are built only once per bootstrap)."""
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        weights = per_request()
        w = weights.reshape(weights.shape[0], -1)
        if np.array_equal(self.unit_of, np.arange(self.unit_of.size)) and self.units == self.unit_of.size:
            out = np.vstack([w, np.zeros((1, w.shape[1]))]).astype(np.float64)
        else:
            out = np.stack(
                [np.bincount(self.unit_of, weights=w[:, j], minlength=self.units + 1) for j in range(w.shape[1])],
                axis=1,
            )
        self.cache[key] = out
        return out


@dataclass(frozen=True, eq=False)
class Draws:
    """One chunk of replicates for one arm: how often each unit was drawn (rows: replicates)."""

    counts: np.ndarray  # (B, units + 1); the last column is zero
    layout: UnitLayout
    shared: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """What is derived from ``counts`` alone, shared by every arm's ``Draws`` of one chunk (they pair the arms by
    holding the same counts): the float transpose is made once, not once per arm."""

    @classmethod
    def of(cls, per_request: np.ndarray) -> Draws:
        """Draws given per request (B, n): every request its own unit (tests, the estimate's all-ones row)."""
        c = np.atleast_2d(per_request)
        return cls(np.hstack([c, np.zeros((c.shape[0], 1), dtype=c.dtype)]), UnitLayout.identity(c.shape[1]))

    def is_every_request_once(self) -> bool:
        """One replicate that weighs every request once: the estimate itself."""
        ids = self.layout.unit_of
        return self.rows == 1 and self.layout.units == ids.size and bool(np.all(self.counts[0, :-1] == 1))

    @property
    def rows(self) -> int:
        return int(self.counts.shape[0])

    def at(self, requests: np.ndarray) -> np.ndarray:
        """(B, len(requests)): how often each replicate drew each of ``requests`` (C-ordered: ``take`` along the
        columns, where ``counts[:, idx]`` would give a Fortran-ordered array that every later row-wise pass
        copies)."""
        return np.take(self.counts, self.layout.unit_of[requests], axis=1)

    @property
    def counts_by_unit(self) -> np.ndarray:
        """(units + 1, B) floats (exact: integers far below 2^53), C-ordered: the side a sparse product per unit
        wants, laid out once per chunk; its transpose serves the dense products."""
        if "by_unit" not in self.shared:
            self.shared["by_unit"] = np.ascontiguousarray(self.counts.T, dtype=np.float64)
        return self.shared["by_unit"]

    def dot(self, weights: np.ndarray) -> np.ndarray:
        """(B, k): each replicate's sum of the (units + 1, k) per-unit weights, exact for integer weights."""
        return np.rint(self.counts_by_unit.T @ weights).astype(np.int64)


def unit_layouts(arms: Sequence[_HasSlots], rounds: Sequence[int]) -> tuple[list[UnitLayout], list[int]]:
    """Per arm its layout, and the units of each round (in ``rounds`` order, laid end to end in the columns).

    A round's slots are those any arm served; an arm's request takes its slot's unit."""
    per_round: list[tuple[int, np.ndarray, np.ndarray]] = []
    sizes: list[int] = []
    offset = 0
    for r in rounds:
        slots: np.ndarray = np.empty(0, dtype=np.int64)
        for arm in arms:
            slots = np.union1d(slots, arm.slots[arm.rounds == r])
        units = round_units(slots.size)
        sizes.append(int(units.max()) + 1 if units.size else 0)
        per_round.append((r, slots, units + offset))
        offset += sizes[-1]
    layouts = []
    for arm in arms:
        unit_of = np.full(arm.n, offset, dtype=np.int64)
        for r, slots, units in per_round:
            mine = np.flatnonzero(arm.rounds == r)
            if slots.size:
                unit_of[mine] = units[np.searchsorted(slots, arm.slots[mine])]
        layouts.append(UnitLayout(unit_of, offset))
    return layouts, sizes


def draw_units(sizes: Sequence[int], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, sum(sizes) + 1) counts: each round's units redrawn with replacement, rounds end to end."""
    total = int(sum(sizes))
    out = np.zeros((resamples, total + 1), dtype=np.int32)  # a unit drawn 2^31 times in one replicate: never
    lo = 0
    for size in sizes:
        if size == 0:
            continue
        drawn = rng.integers(0, size, (resamples, size))
        drawn += np.arange(resamples)[:, None] * size
        out[:, lo : lo + size] = np.bincount(drawn.ravel(), minlength=resamples * size).reshape(resamples, size)
        lo += size
    return out
