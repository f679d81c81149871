"""Trace kinds: a discriminated union on ``kind``, one module per kind, loaders chosen by lookup."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from workloads.schedule import TraceRow
from workloads.traces.azure import AzureTraceSpec, iter_azure, load_azure
from workloads.traces.base import LoadedTrace, TraceFormatError
from workloads.traces.burstgpt import BurstGptTraceSpec, iter_burstgpt, load_burstgpt
from workloads.traces.columns import TraceColumns, columns_from_rows
from workloads.traces.mooncake import MooncakeTraceSpec, iter_mooncake, load_mooncake
from workloads.traces.sharegpt import ShareGptTraceSpec, iter_sharegpt, load_sharegpt
from workloads.traces.synthetic import SyntheticTraceSpec, iter_synthetic, load_synthetic, synthetic_columns

AnyTraceSpec = AzureTraceSpec | BurstGptTraceSpec | MooncakeTraceSpec | ShareGptTraceSpec | SyntheticTraceSpec
TraceSpec = Annotated[AnyTraceSpec, Field(discriminator="kind")]

LOADERS: dict[str, Callable[[Any, Path | None], LoadedTrace]] = {
    "azure": load_azure,
    "burstgpt": load_burstgpt,
    "mooncake": load_mooncake,
    "sharegpt": load_sharegpt,
    "synthetic": load_synthetic,
}

# The same kinds as streams: (spec, base_dir, skipped) -> rows, filling ``skipped`` as they are read.
ITERATORS: dict[str, Callable[[Any, Path | None, dict[str, int]], Iterator[TraceRow]]] = {
    "azure": iter_azure,
    "burstgpt": iter_burstgpt,
    "mooncake": iter_mooncake,
    "sharegpt": iter_sharegpt,
    "synthetic": iter_synthetic,
}


def read_trace(spec: AnyTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    """Rows and the counts of what was skipped on purpose."""
    try:
        return LOADERS[spec.kind](spec, base_dir)
    except UnicodeDecodeError as e:
        raise _not_text(spec, e) from None


def load_trace(spec: AnyTraceSpec, base_dir: Path | None = None) -> list[TraceRow]:
    return read_trace(spec, base_dir).rows


def iter_trace(
    spec: AnyTraceSpec, base_dir: Path | None = None, skipped: dict[str, int] | None = None
) -> Iterator[TraceRow]:
    """Rows one at a time, so memory does not grow with the trace; ``skipped`` (if given) is complete once the
    rows are. Raises what ``read_trace`` raises, but as the rows are read: an empty trace at the end."""
    try:
        rows = ITERATORS[spec.kind](spec, base_dir, {} if skipped is None else skipped)
    except UnicodeDecodeError as e:
        raise _not_text(spec, e) from None
    return _text_errors(spec, rows)


def read_trace_columns(spec: AnyTraceSpec, base_dir: Path | None = None) -> tuple[TraceColumns, dict[str, int]]:
    """The trace as columns and what was skipped: ``read_trace``'s rows, value for value, read as a stream (a
    synthetic trace is drawn whole-array), so planning a long trace holds numbers, not row objects."""
    skipped: dict[str, int] = {}
    if isinstance(spec, SyntheticTraceSpec):
        return synthetic_columns(spec, base_dir), skipped
    return columns_from_rows(iter_trace(spec, base_dir, skipped), getattr(spec, "path", spec.kind)), skipped


def _text_errors(spec: AnyTraceSpec, rows: Iterator[TraceRow]) -> Iterator[TraceRow]:
    try:
        yield from rows
    except UnicodeDecodeError as e:
        raise _not_text(spec, e) from None


def _not_text(spec: AnyTraceSpec, e: UnicodeDecodeError) -> TraceFormatError:
    return TraceFormatError(getattr(spec, "path", "?"), f"not a text file: {e}")


__all__ = [
    "TraceSpec",
    "AnyTraceSpec",
    "TraceFormatError",
    "LoadedTrace",
    "load_trace",
    "read_trace",
    "iter_trace",
    "read_trace_columns",
    "TraceColumns",
    "LOADERS",
    "ITERATORS",
]
