"""Trace kinds: a discriminated union on ``kind``, one module per kind, loaders chosen by lookup."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from workloads.schedule import TraceRow
from workloads.traces.azure import AzureTraceSpec, load_azure
from workloads.traces.base import LoadedTrace, TraceFormatError
from workloads.traces.burstgpt import BurstGptTraceSpec, load_burstgpt
from workloads.traces.mooncake import MooncakeTraceSpec, load_mooncake
from workloads.traces.sharegpt import ShareGptTraceSpec, load_sharegpt
from workloads.traces.synthetic import SyntheticTraceSpec, load_synthetic

AnyTraceSpec = AzureTraceSpec | BurstGptTraceSpec | MooncakeTraceSpec | ShareGptTraceSpec | SyntheticTraceSpec
TraceSpec = Annotated[AnyTraceSpec, Field(discriminator="kind")]

LOADERS: dict[str, Callable[[Any, Path | None], LoadedTrace]] = {
    "azure": load_azure,
    "burstgpt": load_burstgpt,
    "mooncake": load_mooncake,
    "sharegpt": load_sharegpt,
    "synthetic": load_synthetic,
}


def read_trace(spec: AnyTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    """Rows and the counts of what was skipped on purpose."""
    try:
        return LOADERS[spec.kind](spec, base_dir)
    except UnicodeDecodeError as e:
        raise TraceFormatError(getattr(spec, "path", "?"), f"not a text file: {e}") from None


def load_trace(spec: AnyTraceSpec, base_dir: Path | None = None) -> list[TraceRow]:
    return read_trace(spec, base_dir).rows


__all__ = ["TraceSpec", "AnyTraceSpec", "TraceFormatError", "LoadedTrace", "load_trace", "read_trace", "LOADERS"]
