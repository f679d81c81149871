"""Azure LLM inference trace (2023 and 2024 releases): TIMESTAMP, ContextTokens, GeneratedTokens.

2023 timestamps carry 7 fractional digits and no zone; 2024 ones carry a zone (``+00:00``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import (
    LoadedTrace,
    TraceFormatError,
    check_order,
    collect,
    csv_rows,
    limited_rows,
    parse_int,
    resolve_trace_path,
)

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_FRACTION = re.compile(r"\.(\d+)")


class AzureTraceSpec(FrozenStrictModel):
    kind: Literal["azure"] = "azure"
    path: Path = Field(
        Path("azure_conv_2023_sample.csv"),
        description="CSV with TIMESTAMP, ContextTokens, GeneratedTokens (2023 or 2024 release); relative to the "
        "experiment file, the working directory or the bundled data folder.",
    )
    max_requests: int | None = Field(None, ge=1, description="Use only the first N rows.")


def parse_timestamp(text: str) -> datetime:
    # datetime accepts at most 6 fractional digits: keep microseconds, keep any zone suffix.
    return datetime.fromisoformat(_FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text.strip(), count=1))


def iter_azure(spec: AzureTraceSpec, base_dir: Path | None, skipped: dict[str, int]) -> Iterator[TraceRow]:
    """Rows as they are read; holds only the first timestamp and the last arrival."""
    path = resolve_trace_path(spec.path, base_dir)
    return limited_rows(path, _rows(path), spec.max_requests, skipped)


def _rows(path: Path) -> Iterator[TraceRow]:
    first: datetime | None = None
    prev_arrival_s: float | None = None
    for line, row in csv_rows(path, COLUMNS):
        try:
            ts = parse_timestamp(row["TIMESTAMP"])
        except ValueError as e:
            raise TraceFormatError(path, f"TIMESTAMP: {e}", line=line) from None
        ctx = parse_int(path, line, "ContextTokens", row["ContextTokens"])
        gen = parse_int(path, line, "GeneratedTokens", row["GeneratedTokens"])
        first = ts if first is None else first
        try:
            arrival_s = (ts - first).total_seconds()
        except TypeError:
            raise TraceFormatError(path, "TIMESTAMP: mixes times with and without a zone", line=line) from None
        check_order(path, line, prev_arrival_s, arrival_s)
        prev_arrival_s = arrival_s
        yield TraceRow(arrival_s=arrival_s, input_tokens=ctx, output_tokens=gen, line=line)


def load_azure(spec: AzureTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    skipped: dict[str, int] = {}
    return collect(iter_azure(spec, base_dir, skipped), skipped)
