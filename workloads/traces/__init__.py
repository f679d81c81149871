"""Trace kinds: a discriminated union on ``kind``, one module per kind, loaders chosen by lookup."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from workloads.schedule import TraceRow
from workloads.traces.azure import AzureTraceSpec, load_azure
from workloads.traces.base import TraceFormatError
from workloads.traces.synthetic import SyntheticTraceSpec, load_synthetic

TraceSpec = Annotated[AzureTraceSpec | SyntheticTraceSpec, Field(discriminator="kind")]

LOADERS: dict[str, Callable[[Any, Path | None], list[TraceRow]]] = {
    "azure": load_azure,
    "synthetic": load_synthetic,
}


def load_trace(spec: AzureTraceSpec | SyntheticTraceSpec, base_dir: Path | None = None) -> list[TraceRow]:
    return LOADERS[spec.kind](spec, base_dir)


__all__ = ["TraceSpec", "TraceFormatError", "load_trace", "LOADERS"]
