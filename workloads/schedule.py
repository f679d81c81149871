"""The replay plan: what to send and when, decided before any engine starts.

Keeping the plan a plain, deterministic list means every arm gets byte-for-byte the same
requests, and client actors can each take a shard of it without talking to each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import Field

from common.strict import FrozenStrictModel


class PlannedRequest(FrozenStrictModel):
    index: int = Field(description="Position in the schedule; also seeds the prompt.")
    send_offset_s: float = Field(
        ge=0, description="Intended send time after the common start (for a chained request: its earliest time)."
    )
    prompt_tokens: int = Field(ge=1, description="Exact prompt length in tokens.")
    max_tokens: int = Field(ge=1, description="Output length, forced with ignore_eos.")
    shared_blocks: tuple[tuple[int, int], ...] = Field(
        (),
        description="(key, tokens) blocks that open the prompt; equal keys give identical tokens, so the "
        "engine's prefix cache sees the trace's real sharing. The rest of the prompt is unique to the request.",
    )
    after_index: int | None = Field(
        None,
        description="Send only when this request has finished (multi-turn chats, closed-loop users); "
        "the intended send time is then its end plus think_time_s.",
    )
    think_time_s: float = Field(0.0, ge=0, description="Pause between after_index finishing and this send.")
    warmup: bool = Field(
        False, description="Sent like any other but excluded from measurement (a sweep level's warm-up share)."
    )


class TraceRow(FrozenStrictModel):
    """A request as a trace describes it, before scaling to the engine under test."""

    arrival_s: float | None = Field(description="Offset from the trace's first request; null: the trace has no times.")
    input_tokens: int = Field(ge=0, description="Prompt length in the trace's tokens.")
    output_tokens: int = Field(ge=0, description="Output length in the trace's tokens.")
    shared_blocks: tuple[tuple[int, int], ...] = Field(
        (), description="(key, tokens) blocks that open the prompt and may be shared with other requests."
    )
    follows: int | None = Field(
        None, description="Position (in this trace) of the request whose answer this one continues."
    )
    line: int | None = Field(None, description="Line of the trace file it came from, for error messages.")


def chain_root(requests: list[PlannedRequest], index: int) -> int:
    by_index = {r.index: r for r in requests}
    r = by_index[index]
    while r.after_index is not None:
        r = by_index[r.after_index]
    return r.index


T = TypeVar("T")


def fold_chains(
    requests: Sequence[PlannedRequest], root: Callable[[PlannedRequest], T], step: Callable[[T, PlannedRequest], T]
) -> dict[int, T]:
    """A value for every request, carried down its ``after_index`` chain: ``root(r)`` for a request that waits
    on nothing in ``requests``, ``step(value of the request it waits on, r)`` for the others. Chains are walked
    up iteratively (they can be long) and each value is computed once; a cycle raises ``ValueError``."""
    by_index = {r.index: r for r in requests}
    values: dict[int, T] = {}
    for r in requests:
        chain = []
        while r.index not in values and r.after_index is not None and r.after_index in by_index:
            chain.append(r)
            if len(chain) > len(by_index):
                raise ValueError(f"request #{r.index}: after_index chain has a cycle")
            r = by_index[r.after_index]
        if r.index not in values:
            values[r.index] = root(r)
        v = values[r.index]
        for c in reversed(chain):
            v = values[c.index] = step(v, c)
    return values


def shard(requests: list[PlannedRequest], num_shards: int, shard_index: int) -> list[PlannedRequest]:
    """Round-robin by chain so every shard sees the whole time span at 1/num_shards of the rate.

    A request chained to another (``after_index``) must be sent by the client that sees its
    predecessor finish, so whole chains go to one shard: the shard of their first request.
    """
    root: dict[int, int] = {}
    for r in requests:  # schedules list a predecessor before what follows it
        root[r.index] = r.index if r.after_index is None else root.get(r.after_index, r.after_index)
    return [r for r in requests if root[r.index] % num_shards == shard_index]
