"""Which requests waited for each Triton JIT compile that happened while an engine served.

The engine counters say an arm compiled N kernels in its measured window; a claim such as "no Triton
re-specialisation gives -9% TTFT" needs more: which requests were held up, and how their TTFT compares
with the rest. Each compile the worker ranks logged (``ArmResult.compile_events``) ends at a Unix time
and took ``wall_s`` before it, during which that rank's model step, and so every request in the batch,
waited. Request records hold times relative to their shard's common start (``ShardResult.start_epoch_s``
per round, level and client), so they are put on the same clock here, then each serving compile of a
round is matched against the requests of that round (the same engine instance under interleaved
placement): in flight when their [send, end] overlaps the compile, waiting for their first token when
they were sent before it ended and had no first token before it started.

Pure numpy, one vectorised pass per event: events are few, requests may be a million.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from common.strict import FrozenStrictModel, StrictModel
from result_format.run_result import ArmResult, CompileEventRecord, ShardResult
from workloads.record_columns import NO_INT, RecordColumns

EVENT_ROWS_PER_ARM = 50
"""Per-event rows a report shows per arm; the rest are counted, not listed."""


class AttributedCompile(FrozenStrictModel):
    """One serving compile and the requests of its round it held up."""

    round: int
    rank: int
    kernel: str
    cache_hit: bool | None = Field(description="True: a load from the on-disk cache, not a real compile.")
    at_s: float | None = Field(
        description="Compile start, seconds after the round's first send (negative: before it); null: the round "
        "sent nothing."
    )
    wall_s: float = Field(description="How long the kernel launch waited for it.")
    in_flight: int = Field(description="Requests of the round sent before it ended and not ended before it started.")
    waiting_first_token: int = Field(
        description="Of those, requests with no first token before it started: their TTFT includes (part of) it."
    )


class CompileAttributionSummary(StrictModel):
    """One arm's serving compiles and the TTFT of the measured requests that waited for one, against the rest."""

    serving_compiles: int = Field(description="Compile events logged after a rank's first step (cache hits included).")
    serving_cache_hits: int = Field(description="Of which loads from the on-disk cache.")
    compile_s: float = Field(description="Their wall time summed over events (ranks compile concurrently).")
    requests_waited: int = Field(
        description="Measured requests whose TTFT window (send to first token) overlapped at least one compile."
    )
    requests_other: int = Field(description="Measured requests with a TTFT that overlapped none.")
    ttft_p50_waited_s: float | None = Field(description="Median TTFT of requests_waited; null: none had a TTFT.")
    ttft_p50_other_s: float | None = Field(description="Median TTFT of the other measured requests; null: none.")


@dataclass(frozen=True)
class ArmCompileAttribution:
    arm: str
    summary: CompileAttributionSummary
    events: list[AttributedCompile]  # by round, then by start


def serving_events(arm: ArmResult) -> list[CompileEventRecord]:
    return [e for e in arm.compile_events if e.phase == "serving"]


def has_serving_compiles(arms: Sequence[ArmResult]) -> bool:
    return any(serving_events(a) for a in arms)


def shard_starts_epoch_s(columns: RecordColumns, shards: Sequence[ShardResult]) -> np.ndarray:
    """Each record's shard start (Unix s), by (round, level, client); NaN where no shard matches."""
    out = np.full(len(columns), np.nan)
    if not len(columns):
        return out
    starts = {(s.round, NO_INT if s.level is None else s.level, s.client): s.start_epoch_s for s in shards}
    keys = np.stack([columns.round, columns.level, columns.client], axis=1).astype(np.int64)
    combos, inverse = np.unique(keys, axis=0, return_inverse=True)
    per_combo = np.array([starts.get((int(r), int(lv), int(c)), np.nan) for r, lv, c in combos])
    out[:] = per_combo[inverse.reshape(-1)]
    return out


@dataclass(frozen=True)
class _EpochTimes:
    """The records' times on the Unix clock; a stream never closed is in flight until the end of time."""

    round: np.ndarray
    send: np.ndarray  # NaN: never sent (or no shard to place it)
    first: np.ndarray  # NaN: no first token
    end: np.ndarray  # +inf: the stream never closed

    @classmethod
    def of(cls, columns: RecordColumns, shards: Sequence[ShardResult]) -> _EpochTimes:
        base = shard_starts_epoch_s(columns, shards)
        end = base + columns.end_s
        return cls(
            columns.round,
            base + columns.actual_send_s,
            base + columns.first_token_s,
            np.where(np.isnan(end), np.inf, end),
        )


def attribute_arm(arm: ArmResult) -> ArmCompileAttribution | None:
    """None when the arm logged no serving compile (its records are then not even read)."""
    events = sorted(serving_events(arm), key=lambda e: (e.round, e.end_epoch_s - e.wall_s))
    if not events:
        return None
    columns = arm.columns
    t = _EpochTimes.of(columns, arm.shards)
    in_round = {r: np.flatnonzero(t.round == r) for r in sorted({e.round for e in events})}
    waited = np.zeros(len(columns), dtype=bool)
    rows = []
    for e in events:
        idx = in_round[e.round]
        start_s, end_s = e.end_epoch_s - e.wall_s, e.end_epoch_s
        send, first = t.send[idx], t.first[idx]
        flight = (send <= end_s) & (t.end[idx] >= start_s)  # NaN sends compare False: never sent, never in flight
        waiting = flight & (np.isnan(first) | (first >= start_s))
        waited[idx[waiting]] = True
        sent = send[~np.isnan(send)]
        rows.append(
            AttributedCompile(
                round=e.round,
                rank=e.rank,
                kernel=e.kernel,
                cache_hit=e.cache_hit,
                at_s=float(start_s - sent.min()) if sent.size else None,
                wall_s=e.wall_s,
                in_flight=int(flight.sum()),
                waiting_first_token=int(waiting.sum()),
            )
        )
    ttft = t.first - t.send
    measured = ~columns.warmup & np.isfinite(ttft)
    mine, rest = ttft[measured & waited], ttft[measured & ~waited]
    summary = CompileAttributionSummary(
        serving_compiles=len(events),
        serving_cache_hits=sum(1 for e in events if e.cache_hit),
        compile_s=float(sum(e.wall_s for e in events)),
        requests_waited=int(mine.size),
        requests_other=int(rest.size),
        ttft_p50_waited_s=float(np.median(mine)) if mine.size else None,
        ttft_p50_other_s=float(np.median(rest)) if rest.size else None,
    )
    return ArmCompileAttribution(arm.name, summary, rows)


def attribute_run(arms: Sequence[ArmResult]) -> list[ArmCompileAttribution]:
    """Every arm that logged a serving compile, in the result's order."""
    return [x for a in arms if (x := attribute_arm(a)) is not None]


# --- tables shared by the Markdown and HTML reports -----------------------------------------------------------

SUMMARY_HEADERS = ["arm", "serving compiles (cache loads)", "compile s", "requests waited", "TTFT p50 waited",
                   "other requests", "TTFT p50 other"]  # fmt: skip
EVENT_HEADERS = ["round", "rank", "kernel", "cache load", "at s", "wall s", "in flight", "waiting for 1st token"]


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.4g} ms"


def summary_rows(attributions: Sequence[ArmCompileAttribution]) -> list[list[str]]:
    rows = []
    for x in attributions:
        s = x.summary
        rows.append(
            [
                x.arm,
                f"{s.serving_compiles} ({s.serving_cache_hits})",
                f"{s.compile_s:.3g}",
                str(s.requests_waited),
                _ms(s.ttft_p50_waited_s),
                str(s.requests_other),
                _ms(s.ttft_p50_other_s),
            ]
        )
    return rows


def event_rows(x: ArmCompileAttribution, cap: int = EVENT_ROWS_PER_ARM) -> tuple[list[list[str]], int]:
    """The first ``cap`` events of an arm as table rows, and how many were left out."""
    hit = {True: "yes", False: "no", None: "?"}
    rows = [
        [
            str(e.round),
            str(e.rank),
            e.kernel,
            hit[e.cache_hit],
            "n/a" if e.at_s is None else f"{e.at_s:.3f}",
            f"{e.wall_s:.3g}",
            str(e.in_flight),
            str(e.waiting_first_token),
        ]
        for e in x.events[:cap]
    ]
    return rows, max(0, len(x.events) - cap)


SECTION_TITLE = "Compiles while serving and the requests that waited"
SECTION_INTRO = (
    "Triton compiles the engines' ranks logged after their first model step, matched with the requests of the same "
    "round on the Unix clock: in flight when sent before the compile ended and not finished before it started; "
    "waiting for their first token when that token had not come before it started. 'waited' counts measured "
    "requests whose TTFT window overlapped at least one compile."
)
