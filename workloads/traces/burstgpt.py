"""BurstGPT CSV: Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type.

Failed requests show up as zero response tokens; they carry no decode work, so by default they
are dropped, and the count is reported with the schedule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import (
    LoadedTrace,
    TraceFormatError,
    check_order,
    csv_rows,
    non_empty,
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


def load_burstgpt(spec: BurstGptTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    path = resolve_trace_path(spec.path, base_dir)
    out = LoadedTrace(rows=[])
    t0: float | None = None
    for line, row in csv_rows(path, COLUMNS):
        try:
            ts = float(row["Timestamp"])
        except ValueError:
            raise TraceFormatError(path, f"Timestamp: not a number: {row['Timestamp']!r}", line=line) from None
        req = parse_int(path, line, "Request tokens", row["Request tokens"])
        resp = parse_int(path, line, "Response tokens", row["Response tokens"])
        t0 = ts if t0 is None else t0
        check_order(path, line, out.rows, ts - t0)
        if spec.models is not None and row["Model"] not in spec.models:
            out.skip("model not selected")
            continue
        if spec.log_types is not None and row["Log Type"] not in spec.log_types:
            out.skip("log type not selected")
            continue
        if spec.drop_failed and resp == 0:
            out.skip("failed request (zero response tokens)")
            continue
        out.rows.append(TraceRow(arrival_s=ts - t0, input_tokens=req, output_tokens=resp, line=line))
        if spec.max_requests is not None and len(out.rows) >= spec.max_requests:
            break
    return non_empty(path, out)
