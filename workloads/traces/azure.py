"""Azure LLM inference trace (2023 and 2024 releases): TIMESTAMP, ContextTokens, GeneratedTokens."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workloads.schedule import TraceRow
from workloads.traces.base import TraceFormatError, resolve_trace_path

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class AzureTraceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["azure"] = "azure"
    path: Path = Field(
        Path("azure_conv_2023_sample.csv"),
        description="CSV with TIMESTAMP, ContextTokens, GeneratedTokens; relative to the experiment file, "
        "the working directory or the bundled data folder.",
    )
    max_requests: int | None = Field(None, ge=1, description="Use only the first N rows.")


def _parse_timestamp(text: str) -> datetime:
    # The 2023 files carry 7 fractional digits, which datetime does not accept: keep microseconds.
    head, dot, frac = text.strip().partition(".")
    return datetime.fromisoformat(head + (dot + frac[:6] if dot else ""))


def load_azure(spec: AzureTraceSpec, base_dir: Path | None = None) -> list[TraceRow]:
    path = resolve_trace_path(spec.path, base_dir)
    rows: list[TraceRow] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(path, f"missing column(s) {missing}; expected {list(COLUMNS)}", line=1)
        first: datetime | None = None
        for row in reader:
            line = reader.line_num
            try:
                ts = _parse_timestamp(row["TIMESTAMP"])
                ctx, gen = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (ValueError, TypeError) as e:
                raise TraceFormatError(path, f"bad row {row!r}: {e}", line=line) from None
            if ctx < 0 or gen < 0:
                raise TraceFormatError(path, f"negative token count in {row!r}", line=line)
            first = ts if first is None else first
            arrival_s = (ts - first).total_seconds()
            if rows and arrival_s < rows[-1].arrival_s:
                raise TraceFormatError(path, "timestamps go backwards", line=line)
            rows.append(TraceRow(arrival_s=arrival_s, input_tokens=ctx, output_tokens=gen))
            if spec.max_requests is not None and len(rows) >= spec.max_requests:
                break
    if not rows:
        raise TraceFormatError(path, "no requests in trace")
    return rows
