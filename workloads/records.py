"""One finished request, as measured by the client, and the per-request metrics derived from it.

Times are seconds from the run's common start (a monotonic clock mapped onto a shared wall-clock
epoch), so records from different client actors line up without trusting clock deltas inside them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from common.strict import StrictModel

ErrorKind = Literal["timeout", "reset", "http", "bad_sse", "connect", "not_sent", "other"]


class RequestRecord(StrictModel):
    index: int = Field(description="Position of the request in the replayed schedule.")
    arm: str = Field(description="Arm the request was sent to.")
    round: int = Field(0, ge=0, description="Round of the experiment (arms interleaved A B C, C B A, B C A, ...).")
    client: int = Field(0, ge=0, description="Client actor (shard) that sent it.")
    level: int | None = Field(
        None, ge=0, description="Sweep level (position in sweep.levels) it was sent at; null: the run has no sweep."
    )
    warmup: bool = Field(False, description="Part of its level's warm-up share: sent, but not measured.")
    intended_send_s: float = Field(description="When the arrival process said to send it.")
    actual_send_s: float | None = Field(description="When the client sent it; null if never sent.")
    cap_wait_s: float = Field(
        0.0, ge=0, description="Part of the send lag spent waiting for the in-flight cap (not client lag)."
    )
    first_token_s: float | None = Field(None, description="Arrival of the first output token.")
    token_times_s: list[float] = Field(
        default_factory=list,
        description="Arrival time of every output token: a chunk holding k tokens adds its time k times.",
    )
    end_s: float | None = Field(None, description="When the response stream closed.")
    prompt_tokens_requested: int = Field(description="Prompt length the schedule asked for.")
    output_tokens_requested: int = Field(description="max_tokens sent (with ignore_eos).")
    prompt_tokens: int | None = Field(None, description="Prompt tokens the server reported in usage.")
    output_tokens: int | None = Field(None, description="Completion tokens the server reported in usage.")
    tokens_exact: bool = Field(
        True, description="False when the server sent no per-chunk usage and chunks were counted as one token."
    )
    http_status: int | None = Field(None, description="HTTP status of the response; null if none came.")
    error_kind: ErrorKind | None = Field(None, description="Class of the failure; null on success.")
    error: str | None = Field(None, description="Why the request failed; null on success.")

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None

    @property
    def send_lag_ms(self) -> float | None:
        if self.actual_send_s is None:
            return None
        return (self.actual_send_s - self.intended_send_s) * 1000.0

    @property
    def dispatch_lag_ms(self) -> float | None:
        """Send lag the client itself caused: without the wait for the in-flight cap."""
        lag = self.send_lag_ms
        return None if lag is None else lag - self.cap_wait_s * 1000.0

    @property
    def ttft_s(self) -> float | None:
        if self.first_token_s is None or self.actual_send_s is None:
            return None
        return self.first_token_s - self.actual_send_s

    @property
    def e2e_s(self) -> float | None:
        if self.end_s is None or self.actual_send_s is None:
            return None
        return self.end_s - self.actual_send_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first, as vLLM's own benchmark defines it."""
        if len(self.token_times_s) < 2:
            return None
        return (self.token_times_s[-1] - self.token_times_s[0]) / (len(self.token_times_s) - 1)

    @property
    def itl_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:], strict=False)]
