"""From a trace to the replay schedule: scale lengths into the engine, scale time, count clipping."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from workloads.schedule import PlannedRequest
from workloads.traces import TraceSpec, load_trace
from workloads.traces.azure import AzureTraceSpec


class WorkloadSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: TraceSpec = Field(default_factory=AzureTraceSpec, description="Where requests come from (by `kind`).")
    speedup: float = Field(1.0, gt=0, description="Replay the trace's timestamps this many times faster.")
    input_scale: float = Field(1.0, gt=0, description="Multiply every prompt length by this (then round).")
    output_scale: float = Field(1.0, gt=0, description="Multiply every output length by this (then round).")
    max_input_tokens: int | None = Field(
        None, ge=1, description="Clip prompt lengths to this; clipped rows are counted."
    )
    max_output_tokens: int | None = Field(
        None, ge=1, description="Clip output lengths to this; clipped rows are counted."
    )
    seed: int = Field(0, description="Seed of prompt token synthesis: same seed, same prompts.")


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: list[PlannedRequest]
    clipped_input: int = Field(description="Requests whose prompt was clipped to max_input_tokens.")
    clipped_output: int = Field(description="Requests whose output was clipped to max_output_tokens.")

    @property
    def duration_s(self) -> float:
        return self.requests[-1].send_offset_s if self.requests else 0.0


def _scaled(value: int, scale: float, cap: int | None) -> tuple[int, bool]:
    n = max(1, round(value * scale))
    if cap is not None and n > cap:
        return cap, True
    return n, False


def build_schedule(spec: WorkloadSpec, base_dir: Path | None = None) -> Schedule:
    rows = load_trace(spec.trace, base_dir)
    requests, clipped_in, clipped_out = [], 0, 0
    for i, row in enumerate(rows):
        prompt, ci = _scaled(row.input_tokens, spec.input_scale, spec.max_input_tokens)
        out, co = _scaled(row.output_tokens, spec.output_scale, spec.max_output_tokens)
        clipped_in += ci
        clipped_out += co
        requests.append(
            PlannedRequest(index=i, send_offset_s=row.arrival_s / spec.speedup, prompt_tokens=prompt, max_tokens=out)
        )
    return Schedule(requests=requests, clipped_input=clipped_in, clipped_output=clipped_out)
