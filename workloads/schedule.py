"""The replay plan: what to send and when, decided before any engine starts.

Keeping the plan a plain, deterministic list means every arm gets byte-for-byte the same
requests, and client actors can each take a shard of it without talking to each other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PlannedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(description="Position in the schedule; also seeds the prompt.")
    send_offset_s: float = Field(ge=0, description="Intended send time after the common start.")
    prompt_tokens: int = Field(ge=1, description="Exact prompt length in tokens.")
    max_tokens: int = Field(ge=1, description="Output length, forced with ignore_eos.")


class TraceRow(BaseModel):
    """A request as a trace describes it, before scaling to the engine under test."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival_s: float
    input_tokens: int
    output_tokens: int


def shard(requests: list[PlannedRequest], num_shards: int, shard_index: int) -> list[PlannedRequest]:
    """Round-robin by index so every shard sees the whole time span at 1/num_shards of the rate."""
    return [r for r in requests if r.index % num_shards == shard_index]
