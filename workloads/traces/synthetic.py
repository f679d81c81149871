"""Fixed-length requests at a constant rate: the smallest trace that exercises the whole path."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workloads.schedule import TraceRow


class SyntheticTraceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["synthetic"] = "synthetic"
    num_requests: int = Field(ge=1, description="How many requests.")
    input_tokens: int = Field(ge=1, description="Prompt length of every request.")
    output_tokens: int = Field(ge=1, description="Output length of every request.")
    rate_rps: float = Field(gt=0, description="Constant arrival rate, requests per second.")


def load_synthetic(spec: SyntheticTraceSpec, base_dir: Path | None = None) -> list[TraceRow]:
    return [
        TraceRow(arrival_s=i / spec.rate_rps, input_tokens=spec.input_tokens, output_tokens=spec.output_tokens)
        for i in range(spec.num_requests)
    ]
