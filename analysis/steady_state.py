"""Warm-up excluded by a steady-state check (MSER-5), not by a fixed request count.

A cold engine pays one-off costs in its first requests (JIT compiles, allocator growth, caches);
how many requests that takes depends on the arm, the model and the trace, so a fixed count either
keeps warm-up or throws away steady state. MSER-5 (White, 1997) truncates the prefix of batch means
that minimises the standard error of the mean of what is left, searching only the first half.

The same schedule slots are dropped from every arm of a round (the latest cut of any arm), so arms
stay paired request for request.

``judged_arms`` is the one entry point: the report's verdicts and the nightly gate both take the
requests they judge from it, so one night's gate and report always judge the same requests.

Records marked ``warmup`` (a sweep level's warm-up share: sent, never measured) are never judged, in
any run. A sweep run gets no MSER-5 cut: each level's warm-up share is its warm-up already, and a
cut on request indices would cut every level at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.samples import ArmSamples, arm_samples, slot_stride
from experiment.config import SteadyStateRule
from experiment.slo import SloSpec
from result_format.run_result import RunResult
from workloads.record_columns import RecordColumns, as_columns
from workloads.records import RequestRecord

BATCH = 5
MIN_BATCHES = 4


def mser5_cut(values: Sequence[float], batch: int = BATCH, max_fraction: float = 0.5) -> int:
    """How many leading observations to drop (a multiple of ``batch``; 0 for short series)."""
    x = np.asarray(values, dtype=np.float64)
    n_batches = x.size // batch
    if n_batches < MIN_BATCHES:
        return 0
    means = x[: n_batches * batch].reshape(n_batches, batch).mean(axis=1)
    # The statistic of every truncation d at once, from suffix sums of the batch means (centred first, so the
    # variance is not a difference of two large numbers): var(means[d:]) / (n_batches - d).
    centred = means - means.mean()
    d = np.arange(int(n_batches * max_fraction) + 1)
    rest = (n_batches - d).astype(np.float64)
    s1 = np.cumsum(centred[::-1])[::-1][d]
    s2 = np.cumsum((centred**2)[::-1])[::-1][d]
    stat = np.maximum(s2 / rest - (s1 / rest) ** 2, 0.0) / rest
    # The first truncation within 1e-15 of the smallest, as the search in order took it.
    return int(np.flatnonzero(stat < stat.min() + 1e-15)[0]) * batch


def _ttft_by_slot(records: RecordColumns, rnd: int) -> np.ndarray:
    """TTFT of the round's successful requests in schedule order, and their indices."""
    mine = np.flatnonzero((records.round == rnd) & records.ok & ~np.isnan(records.ttft_s))
    return mine[np.argsort(records.index[mine], kind="stable")]


def warmup_slots(arms_records: Sequence[RecordColumns | Sequence[RequestRecord]]) -> dict[int, int]:
    """Per round, the schedule index below which requests count as warm-up in every arm."""
    arms = [as_columns(recs) for recs in arms_records]
    rounds = sorted({rnd for cols in arms for rnd in cols.rounds()})
    cuts: dict[int, int] = {}
    for rnd in rounds:
        cut_index = 0
        for cols in arms:
            in_round = np.sort(cols.index[(cols.round == rnd) & cols.ok])
            k = mser5_cut(cols.ttft_s[_ttft_by_slot(cols, rnd)])
            if k and k <= in_round.size:
                cut_index = max(cut_index, int(in_round[k - 1]) + 1)
        cuts[rnd] = cut_index
    return cuts


def steady_rows(records: RecordColumns | Sequence[RequestRecord], cuts: dict[int, int]) -> np.ndarray | None:
    """Which records are past their round's warm-up cut (None: every record, no cut)."""
    cols = as_columns(records)
    if not cuts:
        return None
    floor = np.zeros(len(cols), dtype=np.int64)
    for rnd, cut in cuts.items():
        floor[cols.round == rnd] = cut
    return cols.index >= floor


def steady(records: RecordColumns | Sequence[RequestRecord], cuts: dict[int, int]) -> RecordColumns:
    cols = as_columns(records)
    keep = steady_rows(cols, cuts)
    return cols if keep is None else cols.select(keep)


@dataclass(frozen=True)
class JudgedArms:
    """The requests a run is judged on: steady-state samples of every usable arm."""

    samples: dict[str, ArmSamples]
    skipped: dict[str, str]  # arm -> why it has no samples
    cuts: dict[int, int]  # round -> schedule slots excluded as warm-up (0 where none)


def measured(records: RecordColumns | Sequence[RequestRecord]) -> RecordColumns:
    """The records that can be judged: all but a sweep level's warm-up share."""
    return as_columns(records).measured


def judged_arms(result: RunResult, slo: SloSpec, rule: SteadyStateRule = "mser5") -> JudgedArms:
    """Steady-state samples of the run's ok arms with at least two successful requests (warm-up share
    records never; a sweep run without the MSER-5 cut)."""
    ok_arms = [a.columns.measured for a in result.arms if a.status == "ok"]
    cuts = warmup_slots(ok_arms) if rule == "mser5" and result.config.sweep is None else {}
    stride = slot_stride([a.columns for a in result.arms])
    samples: dict[str, ArmSamples] = {}
    skipped: dict[str, str] = {}
    for arm in result.arms:
        if arm.status != "ok":
            skipped[arm.name] = f"arm {arm.status}: {arm.failure_reason or 'no reason recorded'}"
            continue
        measured_cols = arm.columns.measured
        s = arm_samples(arm.name, measured_cols, slo, stride, keep=steady_rows(measured_cols, cuts))
        if s.n < 2:
            skipped[arm.name] = f"only {s.n} successful request(s)"
        else:
            samples[arm.name] = s
    return JudgedArms(samples, skipped, cuts)
