"""The replay plan: what to send and when, decided before any engine starts.

Keeping the plan deterministic means every arm gets byte-for-byte the same requests, and client
actors can each take a shard of it without talking to each other. ``PlannedRequest`` is the model
of one request (its field descriptions are the schema); a whole plan is held as columns
(``workloads.schedule_columns.ScheduleColumns``), and ``shard`` here is the list form of its
sharding rule, the reference the columns are tested against.
"""

from __future__ import annotations

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


def shard(requests: list[PlannedRequest], num_shards: int, shard_index: int) -> list[PlannedRequest]:
    """Round-robin by chain so every shard sees the whole time span at 1/num_shards of the rate.

    A request chained to another (``after_index``) must be sent by the client that sees its
    predecessor finish, so whole chains go to one shard: the shard of their first request.
    """
    root: dict[int, int] = {}
    for r in requests:  # schedules list a predecessor before what follows it
        root[r.index] = r.index if r.after_index is None else root.get(r.after_index, r.after_index)
    return [r for r in requests if root[r.index] % num_shards == shard_index]
