"""From a trace to the replay schedule: select, time, scale and clip, counting everything dropped or cut.

Order of the steps: load (loaders count what they skip) -> time window -> seeded sample -> arrival
process (send offsets of independent requests; chains for multi-turn and closed loops) -> time
scaling -> lengths scaled into the engine and clipped (each clip counted, never silent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from common.strict import FrozenStrictModel
from workloads.arrivals import ArrivalError, ArrivalSpec, plan_arrivals
from workloads.arrivals.trace import TraceArrivalSpec
from workloads.record_columns import csr_positions
from workloads.schedule_columns import ScheduleColumns
from workloads.traces import TraceColumns, TraceFormatError, TraceSpec, read_trace_columns
from workloads.traces.azure import AzureTraceSpec


class WorkloadSpec(FrozenStrictModel):
    trace: TraceSpec = Field(default_factory=AzureTraceSpec, description="Where requests come from (by `kind`).")
    arrival: ArrivalSpec = Field(
        default_factory=TraceArrivalSpec,
        description="When to send (by `kind`): the trace's timestamps, poisson, gamma, constant or closed_loop.",
    )
    speedup: float = Field(1.0, gt=0, description="Divide every send offset by this (replay N times faster).")
    window_start_s: float | None = Field(
        None, ge=0, description="Keep requests the trace sends at or after this offset (trace time); shifted to 0."
    )
    window_end_s: float | None = Field(None, gt=0, description="Keep requests the trace sends before this offset.")
    sample_requests: int | None = Field(
        None, ge=1, description="Keep this many requests (whole conversations), drawn with `seed`, in trace order."
    )
    first_requests: int | None = Field(
        None,
        ge=1,
        description="Keep only the first N requests (trace order) left after the window and the sample; a sweep "
        "level's request count. A kept request's predecessor in its conversation always comes before it.",
    )
    input_scale: float = Field(1.0, gt=0, description="Multiply every prompt length by this (then round).")
    output_scale: float = Field(1.0, gt=0, description="Multiply every output length by this (then round).")
    max_input_tokens: int | None = Field(
        None, ge=1, description="Clip prompt lengths to this; clipped rows are counted."
    )
    max_output_tokens: int | None = Field(
        None, ge=1, description="Clip output lengths to this; clipped rows are counted."
    )
    max_model_len: int | None = Field(
        None,
        ge=2,
        description="Clip prompt + output to the engine's context (prompt first keeps one output token); counted.",
    )
    think_time_s: float = Field(0.0, ge=0, description="Pause before a chained request (next turn of a chat).")
    seed: int = Field(0, description="Seed of prompt tokens, sampling and arrivals: same seed, same requests.")

    @model_validator(mode="after")
    def _window_ordered(self) -> WorkloadSpec:
        if self.window_start_s is not None and self.window_end_s is not None:
            if self.window_end_s <= self.window_start_s:
                raise ValueError("window_end_s must be after window_start_s")
        return self


@dataclass(frozen=True)
class Schedule:
    """The replay plan (``requests``, as columns) and what building it cut or left out, counted."""

    requests: ScheduleColumns
    clipped_input: int  # requests whose prompt was clipped to max_input_tokens
    clipped_output: int  # requests whose output was clipped to max_output_tokens
    clipped_context: int = 0  # requests cut to fit max_model_len (prompt + output)
    skipped: dict[str, int] = field(default_factory=dict)  # trace rows left out on purpose, by reason

    @property
    def duration_s(self) -> float:
        return self.requests.duration_s

    def counts(self) -> dict[str, Any]:
        """Everything but the requests: what the run folder keeps beside the columns."""
        return {
            "clipped_input": self.clipped_input,
            "clipped_output": self.clipped_output,
            "clipped_context": self.clipped_context,
            "skipped": dict(self.skipped),
        }


_SAMPLE_SEED_DOMAIN = 0x5A3


def _roots(follows: np.ndarray) -> np.ndarray:
    """Root position of every row's chain (a row's predecessor always comes before it): pointer jumping, log2 of
    the longest chain whole-array steps."""
    root = np.where(follows >= 0, follows, np.arange(len(follows)))
    while True:
        up = root[root]
        if np.array_equal(up, root):
            return root
        root = up


def _select(trace: TraceColumns, spec: WorkloadSpec, skipped: dict[str, int]) -> np.ndarray:
    """Positions of the kept rows, in trace order."""
    root = _roots(trace.follows)
    keep = np.arange(len(trace))
    if spec.window_start_s is not None or spec.window_end_s is not None:
        lo = spec.window_start_s or 0.0
        hi = spec.window_end_s if spec.window_end_s is not None else float("inf")
        if not trace.timed.all():
            raise ArrivalError("a time window needs a trace with timestamps")
        t = trace.arrival_s[root]
        keep = keep[(lo <= t) & (t < hi)]
        skipped["outside time window"] = len(trace) - len(keep)
    if spec.sample_requests is not None:
        roots = np.unique(root[keep])
        if spec.sample_requests < len(roots):
            rng = np.random.default_rng([spec.seed, _SAMPLE_SEED_DOMAIN])
            chosen = rng.choice(roots, size=spec.sample_requests, replace=False)
            before = len(keep)
            keep = keep[np.isin(root[keep], chosen)]
            skipped["not sampled"] = before - len(keep)
    if spec.first_requests is not None and spec.first_requests < len(keep):
        skipped["beyond first_requests"] = len(keep) - spec.first_requests
        keep = keep[: spec.first_requests]
    return keep


def _segment_starts(offsets: np.ndarray) -> np.ndarray:
    """For every block of a CSR layout, the cumulative sum of its values before its own request starts."""
    return np.repeat(offsets[:-1], np.diff(offsets))


def _blocks_before(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """For every block, the sum of the values of the blocks before it in its own request."""
    cum = np.concatenate([[0], np.cumsum(values)])
    return cum[:-1] - cum[_segment_starts(offsets)]


def _scaled_blocks(
    keys: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, total: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each prompt's blocks scaled like the prompt, each at least one token, cut to its unscaled length."""
    return _truncate(keys, np.maximum(1, np.rint(tokens * scale).astype(np.int64)), offsets, total)


def _truncate(
    keys: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, total: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks cut to their prompt's length ``total``: one starting at or past it dropped, the one crossing it
    shortened (CSR in, CSR out)."""
    owner = np.repeat(np.arange(len(total)), np.diff(offsets))
    room = total[owner] - _blocks_before(tokens, offsets)
    keep = room > 0
    counts = np.bincount(owner[keep], minlength=len(total))
    return keys[keep], np.minimum(tokens, room)[keep], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def build_schedule(spec: WorkloadSpec, base_dir: Path | None = None) -> Schedule:
    """The schedule; every problem with the trace or how it is replayed raises TraceFormatError."""
    try:
        return _build(spec, base_dir)
    except ArrivalError as e:  # callers already report TraceFormatError: name the trace with it
        raise TraceFormatError(getattr(spec.trace, "path", spec.trace.kind), f"workload.arrival: {e}") from None


def _build(spec: WorkloadSpec, base_dir: Path | None) -> Schedule:
    trace, loaded_skipped = read_trace_columns(spec.trace, base_dir)
    skipped = dict(loaded_skipped)
    keep = _select(trace, spec, skipped)
    if not len(keep):
        raise TraceFormatError(getattr(spec.trace, "path", spec.trace.kind), f"no requests left (skipped: {skipped})")
    send_offset_s, after = _timing(trace, keep, spec)
    kept = _rows(trace, keep)
    clips = _Clips()
    prompt, out, (keys, tokens, offsets) = _lengths(kept, spec, clips)
    keys, tokens, offsets = _truncate(keys, tokens, offsets, prompt)
    requests = ScheduleColumns(
        index=np.arange(len(keep)),
        send_offset_s=send_offset_s,
        prompt_tokens=prompt,
        max_tokens=out,
        after_index=after,
        think_time_s=np.where(after >= 0, spec.think_time_s, 0.0),
        warmup=np.zeros(len(keep), dtype=bool),
        block_keys=keys,
        block_tokens=tokens,
        block_offsets=offsets,
    )
    return Schedule(
        requests=requests,
        clipped_input=clips.input,
        clipped_output=clips.output,
        clipped_context=clips.context,
        skipped={k: v for k, v in skipped.items() if v},
    )


def _rows(trace: TraceColumns, keep: np.ndarray) -> TraceColumns:
    """The kept rows (``follows`` left as trace positions)."""
    flat, offsets = csr_positions(trace.block_offsets, keep)
    return TraceColumns(
        arrival_s=trace.arrival_s[keep],
        input_tokens=trace.input_tokens[keep],
        output_tokens=trace.output_tokens[keep],
        follows=trace.follows[keep],
        block_keys=trace.block_keys[flat],
        block_tokens=trace.block_tokens[flat],
        block_offsets=offsets,
    )


def _timing(trace: TraceColumns, keep: np.ndarray, spec: WorkloadSpec) -> tuple[np.ndarray, np.ndarray]:
    """Send offsets (0 for a chained request: its time comes from its predecessor's end) and who waits for whom
    (``after_index``, -1: nobody), by new index.

    A request whose predecessor was kept is chained to it; every other one gets its time from the
    arrival process. A closed loop adds chains of its own: each user sends its next request when
    its last one has finished.
    """
    new_index = np.full(len(trace), -1, dtype=np.int64)
    new_index[keep] = np.arange(len(keep))
    follows = trace.follows[keep]
    pred = np.where(follows >= 0, new_index[np.maximum(follows, 0)], -1)
    is_open = pred < 0
    t0 = spec.window_start_s or 0.0
    arrival = trace.arrival_s[keep][is_open]
    untimed = np.isnan(arrival)
    times: list[float | None]
    if untimed.all():  # no timestamps (synthetic without a rate, ShareGPT): the process makes every time
        times = [None] * len(arrival)
    else:
        times = (arrival + 0.0 - t0).tolist()  # + 0.0: -0.0 becomes 0.0, as ``or 0.0`` had it
        if untimed.any():
            times = [None if u else t for u, t in zip(untimed.tolist(), times, strict=True)]
    plan = plan_arrivals(spec.arrival, times, spec.seed)
    send_offset_s = np.zeros(len(keep))
    send_offset_s[is_open] = np.asarray(plan.offsets_s, dtype=np.float64) / spec.speedup
    after = pred.copy()
    if plan.users is not None:
        _closed_loop_chains(np.flatnonzero(is_open), after, plan.users)
    return send_offset_s, after


@dataclass
class _Clips:
    """How many requests each limit cut: counted, never silent."""

    input: int = 0
    output: int = 0
    context: int = 0


def _lengths(
    rows: TraceColumns, spec: WorkloadSpec, clips: _Clips
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Prompt and output lengths scaled into the engine and clipped to the limits, and the prompts' blocks
    (cut to the unclipped prompt). ``np.rint`` rounds half to even, as ``round`` did."""
    total = np.maximum(1, np.rint(rows.input_tokens * spec.input_scale).astype(np.int64))
    blocks = _scaled_blocks(rows.block_keys, rows.block_tokens, rows.block_offsets, total, spec.input_scale)
    prompt = total
    out = np.maximum(1, np.rint(rows.output_tokens * spec.output_scale).astype(np.int64))
    if spec.max_input_tokens is not None:
        over = prompt > spec.max_input_tokens
        clips.input = int(over.sum())
        prompt = np.where(over, spec.max_input_tokens, prompt)
    if spec.max_output_tokens is not None:
        over = out > spec.max_output_tokens
        clips.output = int(over.sum())
        out = np.where(over, spec.max_output_tokens, out)
    if spec.max_model_len is not None:
        over = prompt + out > spec.max_model_len
        clips.context = int(over.sum())
        prompt = np.where(over, np.minimum(prompt, spec.max_model_len - 1), prompt)
        out = np.where(over, np.minimum(out, spec.max_model_len - prompt), out)
    return prompt, out, blocks


def _closed_loop_chains(roots: np.ndarray, after: np.ndarray, users: int) -> None:
    """Root k waits for the last request of root (k - users)'s chain: one user, one request at a time. The
    chains are the trace's (``after`` as it comes in); ``after`` is filled in place."""
    chain_root = _roots(after)
    tail = np.arange(len(after))
    np.maximum.at(tail, chain_root, np.arange(len(after)))  # a chain's last request is its highest index
    after[roots[users:]] = tail[roots[: len(roots) - users]]
