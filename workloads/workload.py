"""From a trace to the replay schedule: select, time, scale and clip, counting everything dropped or cut.

Order of the steps: load (loaders count what they skip) -> time window -> seeded sample -> arrival
process (send offsets of independent requests; chains for multi-turn and closed loops) -> time
scaling -> lengths scaled into the engine and clipped (each clip counted, never silent).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, model_validator

from common.strict import FrozenStrictModel, StrictModel
from workloads.arrivals import ArrivalError, ArrivalSpec, plan_arrivals
from workloads.arrivals.trace import TraceArrivalSpec
from workloads.schedule import PlannedRequest, TraceRow
from workloads.traces import TraceFormatError, TraceSpec, read_trace
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


class Schedule(StrictModel):
    requests: list[PlannedRequest]
    clipped_input: int = Field(description="Requests whose prompt was clipped to max_input_tokens.")
    clipped_output: int = Field(description="Requests whose output was clipped to max_output_tokens.")
    clipped_context: int = Field(0, description="Requests cut to fit max_model_len (prompt + output).")
    skipped: dict[str, int] = Field(
        default_factory=dict, description="Trace rows left out on purpose, by reason (loader, window, sample)."
    )

    @property
    def duration_s(self) -> float:
        return max((r.send_offset_s for r in self.requests), default=0.0)


_SAMPLE_SEED_DOMAIN = 0x5A3


def _roots(rows: list[TraceRow]) -> list[int]:
    """Root position of every row's chain (a row's predecessor always comes before it)."""
    root: list[int] = []
    for i, r in enumerate(rows):
        root.append(i if r.follows is None else root[r.follows])
    return root


def _select(rows: list[TraceRow], spec: WorkloadSpec, skipped: dict[str, int]) -> list[int]:
    root = _roots(rows)
    keep = list(range(len(rows)))
    if spec.window_start_s is not None or spec.window_end_s is not None:
        lo = spec.window_start_s or 0.0
        hi = spec.window_end_s if spec.window_end_s is not None else float("inf")
        if any(r.arrival_s is None for r in rows):
            raise ArrivalError("a time window needs a trace with timestamps")
        keep = [i for i in keep if lo <= (rows[root[i]].arrival_s or 0.0) < hi]
        skipped["outside time window"] = len(rows) - len(keep)
    if spec.sample_requests is not None:
        roots = sorted({root[i] for i in keep})
        if spec.sample_requests < len(roots):
            rng = np.random.default_rng([spec.seed, _SAMPLE_SEED_DOMAIN])
            chosen = set(rng.choice(roots, size=spec.sample_requests, replace=False).tolist())
            before = len(keep)
            keep = [i for i in keep if root[i] in chosen]
            skipped["not sampled"] = before - len(keep)
    if spec.first_requests is not None and spec.first_requests < len(keep):
        skipped["beyond first_requests"] = len(keep) - spec.first_requests
        keep = keep[: spec.first_requests]
    return keep


def _prompt(row: TraceRow, spec: WorkloadSpec) -> tuple[int, tuple[tuple[int, int], ...]]:
    total = max(1, round(row.input_tokens * spec.input_scale))
    blocks, used = [], 0
    for key, n in row.shared_blocks:
        n = min(max(1, round(n * spec.input_scale)), total - used)
        if n <= 0:
            break
        blocks.append((key, n))
        used += n
    return total, tuple(blocks)


def _truncate(blocks: tuple[tuple[int, int], ...], total: int) -> tuple[tuple[int, int], ...]:
    out, used = [], 0
    for key, n in blocks:
        if used >= total:
            break
        out.append((key, min(n, total - used)))
        used += n
    return tuple(out)


def build_schedule(spec: WorkloadSpec, base_dir: Path | None = None) -> Schedule:
    """The schedule; every problem with the trace or how it is replayed raises TraceFormatError."""
    try:
        return _build(spec, base_dir)
    except ArrivalError as e:  # callers already report TraceFormatError: name the trace with it
        raise TraceFormatError(getattr(spec.trace, "path", spec.trace.kind), f"workload.arrival: {e}") from None


def _build(spec: WorkloadSpec, base_dir: Path | None) -> Schedule:
    loaded = read_trace(spec.trace, base_dir)
    skipped = {k: v for k, v in loaded.skipped.items()}
    rows = loaded.rows
    keep = _select(rows, spec, skipped)
    if not keep:
        raise TraceFormatError(getattr(spec.trace, "path", spec.trace.kind), f"no requests left (skipped: {skipped})")
    new_index = {pos: i for i, pos in enumerate(keep)}
    offsets, after = _timing(rows, keep, new_index, spec)
    requests: list[PlannedRequest] = []
    clips = _Clips()
    for p in keep:
        i = new_index[p]
        prompt, out, blocks = _lengths(rows[p], spec, clips)
        requests.append(
            PlannedRequest(
                index=i,
                send_offset_s=offsets.get(p, 0.0),
                prompt_tokens=prompt,
                max_tokens=out,
                shared_blocks=_truncate(blocks, prompt),
                after_index=after.get(i),
                think_time_s=spec.think_time_s if i in after else 0.0,
            )
        )
    return Schedule(
        requests=requests,
        clipped_input=clips.input,
        clipped_output=clips.output,
        clipped_context=clips.context,
        skipped={k: v for k, v in skipped.items() if v},
    )


def _timing(
    rows: list[TraceRow], keep: list[int], new_index: dict[int, int], spec: WorkloadSpec
) -> tuple[dict[int, float], dict[int, int]]:
    """Send offsets of the requests that open a chain (by trace position), and who waits for whom.

    A request whose predecessor was kept is chained to it; every other one gets its time from the
    arrival process. A closed loop adds chains of its own: each user sends its next request when
    its last one has finished.
    """
    open_pos = [p for p in keep if rows[p].follows is None or rows[p].follows not in new_index]
    t0 = spec.window_start_s or 0.0
    times = [None if rows[p].arrival_s is None else (rows[p].arrival_s or 0.0) - t0 for p in open_pos]
    plan = plan_arrivals(spec.arrival, times, spec.seed)
    offsets = {p: plan.offsets_s[k] / spec.speedup for k, p in enumerate(open_pos)}
    after: dict[int, int] = {new_index[p]: new_index[rows[p].follows] for p in keep if p not in offsets}  # type: ignore[index]
    if plan.users is not None:
        after.update(_closed_loop_chains([new_index[p] for p in open_pos], after, plan.users))
    return offsets, after


@dataclass
class _Clips:
    """How many requests each limit cut: counted, never silent."""

    input: int = 0
    output: int = 0
    context: int = 0


def _lengths(row: TraceRow, spec: WorkloadSpec, clips: _Clips) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """Prompt and output lengths scaled into the engine and clipped to the limits, and the prompt's blocks."""
    prompt, blocks = _prompt(row, spec)
    out = max(1, round(row.output_tokens * spec.output_scale))
    if spec.max_input_tokens is not None and prompt > spec.max_input_tokens:
        prompt, clips.input = spec.max_input_tokens, clips.input + 1
    if spec.max_output_tokens is not None and out > spec.max_output_tokens:
        out, clips.output = spec.max_output_tokens, clips.output + 1
    if spec.max_model_len is not None and prompt + out > spec.max_model_len:
        prompt = min(prompt, spec.max_model_len - 1)
        out = min(out, spec.max_model_len - prompt)
        clips.context += 1
    return prompt, out, blocks


def _closed_loop_chains(roots: list[int], after: dict[int, int], users: int) -> dict[int, int]:
    """Root k waits for the last request of root (k - users)'s chain: one user, one request at a time."""
    tail = {r: r for r in roots}
    root_of: dict[int, int] = {}
    for i in sorted(after):
        root_of[i] = root_of.get(after[i], after[i])
        tail[root_of[i]] = i
    return {roots[k]: tail[roots[k - users]] for k in range(users, len(roots))}
