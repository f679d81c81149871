"""BurstGPT CSV: Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type.

Failed requests show up as zero response tokens; they carry no decode work, so by default they
are dropped, and the count is reported with the schedule.
"""

from __future__ import annotations

from collections.abc import Iterator
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
    count_skip,
    csv_rows,
    limited_rows,
    parse_int,
    resolve_trace_path,
)

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")


class BurstGptTraceSpec(FrozenStrictModel):
    kind: Literal["burstgpt"] = "burstgpt"
    path: Path = Field(Path("burstgpt_sample.csv"), description="BurstGPT CSV (same lookup as every trace path).")
    max_requests: int | None = Field(None, ge=1, description="Use only the first N kept rows.")
    drop_failed: bool = Field(True, description="Drop rows with zero response tokens (failed requests); counted.")
    models: list[str] | None = Field(None, description="Keep only these Model values (e.g. ['ChatGPT']); counted.")
    log_types: list[str] | None = Field(
        None, description="Keep only these Log Type values (e.g. ['Conversation log']); counted."
    )


def iter_burstgpt(spec: BurstGptTraceSpec, base_dir: Path | None, skipped: dict[str, int]) -> Iterator[TraceRow]:
    """Rows as they are read; holds only the first timestamp and the last kept arrival."""
    path = resolve_trace_path(spec.path, base_dir)
    return limited_rows(path, _rows(path, spec, skipped), spec.max_requests, skipped)


def _rows(path: Path, spec: BurstGptTraceSpec, skipped: dict[str, int]) -> Iterator[TraceRow]:
    t0: float | None = None
    # Order is checked against the last *kept* row (as the list loader did): t0 is the first row read, kept or not.
    prev_arrival_s: float | None = None
    for line, row in csv_rows(path, COLUMNS):
        try:
            ts = float(row["Timestamp"])
        except ValueError:
            raise TraceFormatError(path, f"Timestamp: not a number: {row['Timestamp']!r}", line=line) from None
        req = parse_int(path, line, "Request tokens", row["Request tokens"])
        resp = parse_int(path, line, "Response tokens", row["Response tokens"])
        t0 = ts if t0 is None else t0
        check_order(path, line, prev_arrival_s, ts - t0)
        if spec.models is not None and row["Model"] not in spec.models:
            count_skip(skipped, "model not selected")
            continue
        if spec.log_types is not None and row["Log Type"] not in spec.log_types:
            count_skip(skipped, "log type not selected")
            continue
        if spec.drop_failed and resp == 0:
            count_skip(skipped, "failed request (zero response tokens)")
            continue
        prev_arrival_s = ts - t0
        yield TraceRow(arrival_s=ts - t0, input_tokens=req, output_tokens=resp, line=line)


def load_burstgpt(spec: BurstGptTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    skipped: dict[str, int] = {}
    return collect(iter_burstgpt(spec, base_dir, skipped), skipped)
