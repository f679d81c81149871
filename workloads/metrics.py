"""Summary statistics over request records: the numbers in the per-arm table and result file.

Rates are per round, then combined. Every round's clock restarts at 0 (the replay starts again), so
one span over all records would be about one round's length and multiply every rate by the number
of rounds. A rate here is total count / total measured time, the measured time of a round being
its first intended send to its last response end.

Each rate has a sampling interval from batch means: a round's window is cut into ``RATE_BLOCKS``
equal time blocks, each block's rate is one observation, and the spread of the block rates gives the
error of their mean (which is exactly the round's rate). It sees the randomness of arrivals and
lengths inside the measured window, which one number per round cannot; it does not see the
difference between two engine instances (the analysis adds that term to every B/A comparison).
With several rounds the per-round rates give a second interval (``ci_rounds``): with a fresh engine
per round (interleaved placement) it includes engine-to-engine differences, at R - 1 degrees of
freedom.

The same functions serve the console table (through ``ArmSummary``), the report and the analysis,
so they cannot disagree about what a rate is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field
from scipy import stats as sps

from common.strict import StrictModel
from experiment.slo import SloSpec, slo_met
from workloads.record_columns import RecordColumns, as_columns, csr_positions, gather_csr, row_chunks
from workloads.records import RequestRecord

QUANTILES = (50, 90, 99)
RATE_BLOCKS = 10
"""Time blocks per round for batch means: 9 degrees of freedom per round, blocks long against a request."""
RATE_CI_LEVEL = 0.95


class Distribution(StrictModel):
    """Quantiles of one latency metric in seconds; all null when there were no samples."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class RateEstimate(StrictModel):
    """One rate of one arm over its measured windows, with its intervals."""

    per_s: float = Field(description="Total count over total measured time (sum of the rounds' spans).")
    ci: tuple[float, float] | None = Field(
        description="Batch-means interval (RATE_BLOCKS time blocks per round): the sampling error inside the "
        "measured windows; no engine-to-engine term. Null when a window is too short to cut into blocks."
    )
    ci_rounds: tuple[float, float] | None = Field(
        description="Interval from the spread of the per-round rates (t, rounds - 1 degrees of freedom); includes "
        "engine-to-engine differences when each round is a fresh engine. Null with one round."
    )
    by_round: list[float] = Field(description="The rate of each round on its own, in round order.")


class ArmRates(StrictModel):
    ci_level: float = Field(RATE_CI_LEVEL, description="Coverage of every interval here.")
    blocks_per_round: int = Field(RATE_BLOCKS, description="Batch-means time blocks per round.")
    round_durations_s: list[float] = Field(
        description="Measured time of each replay (a round, or a sweep level of a round): first intended send to "
        "last end."
    )
    output_tokens_per_s: RateEstimate
    requests_per_s: RateEstimate = Field(description="Successful requests per second.")
    goodput_rps: RateEstimate | None = Field(
        None, description="Successful requests meeting the SLO per second; null when no SLO was given."
    )


class ArmSummary(StrictModel):
    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    send_lag_ms: Distribution = Field(description="Actual minus intended send time: the client's own lag.")
    duration_s: float = Field(
        description="Measured time: the sum over rounds of first intended send to last response end (each round's "
        "clock starts at 0). Files written before rates were per round hold one span over all rounds."
    )
    requests_per_s: float = Field(description="Successful requests per second over duration_s.")
    output_tokens_per_s: float = Field(description="Output tokens of successful requests per second.")
    goodput_rps: float | None = Field(None, description="Requests meeting the SLO per second; null without an SLO.")
    rounds: int = Field(1, description="Rounds the records came from.")
    rates: ArmRates | None = Field(None, description="The rates with their intervals; null in older files.")


def distribution(values: Sequence[float] | np.ndarray) -> Distribution:
    """Linear-interpolated percentiles (numpy's default), the convention vllm bench serve uses."""
    if len(values) == 0:
        return Distribution(count=0, mean=None, p50=None, p90=None, p99=None)
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, QUANTILES))
    return Distribution(count=len(arr), mean=float(arr.mean()), p50=p50, p90=p90, p99=p99)


# --- rates ----------------------------------------------------------------------------------------


def block_rates(
    start_s: float, end_s: float, times_s: np.ndarray, weights: np.ndarray, blocks: int = RATE_BLOCKS
) -> np.ndarray:
    """Rate in each of ``blocks`` equal time blocks of [start_s, end_s]: weight of the events in the
    block over the block's length. Their mean is exactly total weight / (end_s - start_s)."""
    span = end_s - start_s
    if span <= 0 or blocks < 1:
        return np.full(max(blocks, 1), np.nan)
    idx = _block_of(np.asarray(times_s), start_s, span, blocks)
    return np.bincount(idx, weights=np.asarray(weights, dtype=np.float64), minlength=blocks) / (span / blocks)


def _block_of(times_s: np.ndarray, start_s: float, span_s: float, blocks: int) -> np.ndarray:
    """The block of [start_s, start_s + span_s] each time falls in (times outside count in the end blocks)."""
    return np.clip(((times_s - start_s) / span_s * blocks).astype(np.int64), 0, blocks - 1)


def t_interval(value: float, se: float, dof: float, level: float = RATE_CI_LEVEL) -> tuple[float, float] | None:
    if not (np.isfinite(value) and np.isfinite(se) and dof >= 1):
        return None
    half = float(sps.t.ppf(0.5 + level / 2, dof)) * se
    return (value - half, value + half)


def combine_rounds(
    spans_s: Sequence[float], per_round_blocks: Sequence[np.ndarray], level: float = RATE_CI_LEVEL
) -> RateEstimate:
    """Total over total time, with the batch-means interval and (two or more rounds) the rounds interval.

    The rate is sum_r T_r x_r / sum_r T_r (x_r the mean of round r's blocks, T_r its span), so its batch-
    means variance is sum_r (T_r / T)^2 s_r^2 / K, at R (K - 1) degrees of freedom.
    """
    spans = np.asarray(spans_s, dtype=np.float64)
    keep = [i for i, s in enumerate(spans) if s > 0 and np.all(np.isfinite(per_round_blocks[i]))]
    if not keep:
        return RateEstimate(per_s=0.0, ci=None, ci_rounds=None, by_round=[0.0] * len(spans))
    total = float(spans[keep].sum())
    means = np.array([float(np.mean(per_round_blocks[i])) for i in keep])
    weights = spans[keep] / total
    value = float(weights @ means)
    k = min(per_round_blocks[i].size for i in keep)
    ci = None
    if k >= 2:
        var = sum(w**2 * float(np.var(per_round_blocks[i], ddof=1)) / per_round_blocks[i].size
                  for w, i in zip(weights, keep, strict=True))  # fmt: skip
        ci = t_interval(value, float(np.sqrt(var)), len(keep) * (k - 1), level)
    ci_rounds = None
    if len(keep) >= 2:
        ci_rounds = t_interval(value, float(np.std(means, ddof=1) / np.sqrt(len(keep))), len(keep) - 1, level)
    by_round = [float(np.mean(b)) if s > 0 else 0.0 for s, b in zip(spans, per_round_blocks, strict=True)]
    return RateEstimate(per_s=value, ci=ci, ci_rounds=ci_rounds, by_round=by_round)


def token_event_weight(records: RecordColumns) -> np.ndarray:
    """Per request, the tokens each of its events stands for (``token_events``): the count the server reported
    over the tokens timed, or that count on the one event at its end when no token was timed."""
    counts = records.token_counts
    n = records.output_token_count.astype(np.float64)
    return np.where(counts > 0, n / np.maximum(counts, 1), n)


def token_events(records: RecordColumns) -> tuple[np.ndarray, np.ndarray]:
    """When each request's output tokens arrived (each weighing ``token_event_weight``, so a request's total is
    the count the server reported); one event at the end when no token was timed. Returns (times, offsets):
    request i owns entries ``offsets[i]:offsets[i + 1]``."""
    counts = records.token_counts
    has_end = ~np.isnan(records.end_s)
    timed = counts > 0
    lengths = np.where(timed, counts, has_end.astype(np.int64))
    if np.array_equal(lengths, counts):  # every event is a timed token: the times as they are, no copy
        return records.token_times_s, records.token_offsets
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    times = np.empty(int(offsets[-1]))
    from_tokens = np.repeat(timed, lengths)
    times[from_tokens] = gather_csr(records.token_times_s, records.token_offsets, np.flatnonzero(timed))[0]
    times[~from_tokens] = records.end_s[~timed & has_end]
    return times, offsets


def csr_block_rates(
    start_s: float,
    end_s: float,
    events: tuple[np.ndarray, np.ndarray],
    rows: np.ndarray,
    row_weight: np.ndarray,
    blocks: int = RATE_BLOCKS,
    row_shift_s: np.ndarray | None = None,
) -> np.ndarray:
    """``block_rates`` of the events (times, CSR offsets) of ``rows``, each row's events weighing its
    ``row_weight`` and moved by its ``row_shift_s``; read in chunks (``row_chunks``), so no copy of every
    event's time or weight is made."""
    span = end_s - start_s
    if span <= 0 or blocks < 1:
        return np.full(max(blocks, 1), np.nan)
    flat, offsets = events
    lengths = offsets[rows + 1] - offsets[rows]
    total = np.zeros(blocks)
    for part in row_chunks(lengths):
        times = flat[csr_positions(offsets, rows[part])[0]]
        if row_shift_s is not None:
            times = times + np.repeat(row_shift_s[part], lengths[part])
        idx = _block_of(times, start_s, span, blocks)
        total += np.bincount(idx, weights=np.repeat(row_weight[part], lengths[part]), minlength=blocks)
    return total / (span / blocks)


def round_window(
    records: RecordColumns | Sequence[RequestRecord], which: np.ndarray | None = None
) -> tuple[float, float]:
    """A round's measured window: its first intended send (of any request) to its last successful end.
    ``which``: the rows (mask or indices) of ``records`` that are the round; None: all of them."""
    cols = as_columns(records)
    sent = cols.intended_send_s if which is None else cols.intended_send_s[which]
    ends = cols.end_s[cols.ok] if which is None else cols.end_s[which][cols.ok[which]]
    if not sent.size or not ends.size:
        return (0.0, 0.0)
    return (float(sent.min()), float(ends.max()))


def replay_keys(records: RecordColumns) -> np.ndarray:
    """One key per replay (a round, or a sweep level of a round; each one's clock starts at 0)."""
    return records.round * (1 << 20) + (records.level + 1)


def arm_rates(
    records: RecordColumns | Sequence[RequestRecord], slo: SloSpec | None = None, blocks: int = RATE_BLOCKS
) -> ArmRates:
    """Output tokens/s, requests/s and (with an SLO) goodput of one arm, per round then combined."""
    cols = as_columns(records)
    keys = replay_keys(cols)
    events = token_events(cols)
    weight = token_event_weight(cols)
    met_all = slo_met(cols, slo) if slo is not None else None
    spans, tok_b, req_b, good_b = [], [], [], []
    for key in np.unique(keys):
        mine = keys == key
        start, end = round_window(cols, mine)
        ok = mine & cols.ok
        ends = cols.end_s[ok]
        spans.append(end - start)
        rows = np.flatnonzero(ok)
        tok_b.append(csr_block_rates(start, end, events, rows, weight[rows], blocks))
        req_b.append(block_rates(start, end, ends, np.ones(ends.size), blocks))
        if met_all is not None:
            good_b.append(block_rates(start, end, ends, met_all[ok].astype(np.float64), blocks))
    return ArmRates(
        blocks_per_round=blocks,
        round_durations_s=[float(s) for s in spans],
        output_tokens_per_s=combine_rounds(spans, tok_b),
        requests_per_s=combine_rounds(spans, req_b),
        goodput_rps=combine_rounds(spans, good_b) if slo is not None else None,
    )


def summarize(records: RecordColumns | Sequence[RequestRecord], slo: SloSpec | None = None) -> ArmSummary:
    """The per-arm numbers of the result file and the console table; ``slo`` adds goodput."""
    cols = as_columns(records)
    ok = cols.ok

    def finite(values: np.ndarray) -> np.ndarray:
        return values[~np.isnan(values)]

    itl_flat, itl_offsets = cols.itl
    rates = arm_rates(cols, slo)
    return ArmSummary(
        ttft_s=distribution(finite(cols.ttft_s[ok])),
        tpot_s=distribution(finite(cols.tpot_s[ok])),
        itl_s=distribution(gather_csr(itl_flat, itl_offsets, np.flatnonzero(ok))[0]),
        e2e_s=distribution(finite(cols.e2e_s[ok])),
        send_lag_ms=distribution(finite(cols.send_lag_ms)),
        duration_s=float(sum(rates.round_durations_s)),
        requests_per_s=rates.requests_per_s.per_s,
        output_tokens_per_s=rates.output_tokens_per_s.per_s,
        goodput_rps=rates.goodput_rps.per_s if rates.goodput_rps is not None else None,
        rounds=len(cols.rounds()) or 1,
        rates=rates,
    )


def summarize_level(records: RecordColumns, level: int, slo: SloSpec | None = None) -> ArmSummary | None:
    """One sweep level's measured records (its warm-up share left out), summarised like an arm's; None when
    none of them finished. What a run's result and a combined result both write per level."""
    measured = records.measured.at_level(level)
    return summarize(measured, slo) if measured.ok.any() else None
