"""Mooncake JSONL (FAST'25 traces): timestamp (ms), input_length, output_length, hash_ids.

Each hash id names one block of ``block_tokens`` prompt tokens; two requests with the same id
share that block. The rows keep the ids as shared blocks, so the prompts built from them share
exactly the tokens the trace says they share, and the prefix cache sees the real hit pattern.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from common.strict import FrozenStrictModel
from workloads.schedule import TraceRow
from workloads.traces.base import (
    LoadedTrace,
    TraceFormatError,
    check_order,
    collect,
    json_lines,
    limited_rows,
    resolve_trace_path,
)

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class MooncakeTraceSpec(FrozenStrictModel):
    kind: Literal["mooncake"] = "mooncake"
    path: Path = Field(Path("mooncake_synthetic_sample.jsonl"), description="Mooncake JSON Lines trace.")
    max_requests: int | None = Field(None, ge=1, description="Use only the first N rows.")
    block_tokens: int = Field(512, ge=1, description="Tokens per hash id (512 in the published traces).")


def _field(path: Path, line: int, obj: dict[str, Any], name: str, kind: type) -> Any:
    if name not in obj:
        raise TraceFormatError(path, f"missing field {name!r}; expected {list(FIELDS)}", line=line)
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int | float) or value != int(value)):
        raise TraceFormatError(path, f"{name}: not an integer: {value!r}", line=line)
    if kind is int and value < 0:
        raise TraceFormatError(path, f"{name}: negative value {value}", line=line)
    return value


def _blocks(path: Path, line: int, ids: Any, input_tokens: int, block_tokens: int) -> tuple[tuple[int, int], ...]:
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise TraceFormatError(path, "hash_ids: must be a list of non-negative integers", line=line)
    blocks, left = [], input_tokens
    for i in ids:
        if left <= 0:
            break
        blocks.append((i, min(block_tokens, left)))
        left -= block_tokens
    return tuple(blocks)


def iter_mooncake(spec: MooncakeTraceSpec, base_dir: Path | None, skipped: dict[str, int]) -> Iterator[TraceRow]:
    """Rows as they are read, one line at a time; holds only the first and the last timestamp."""
    path = resolve_trace_path(spec.path, base_dir)
    return limited_rows(path, _rows(path, spec, skipped), spec.max_requests, skipped)


def _rows(path: Path, spec: MooncakeTraceSpec, skipped: dict[str, int]) -> Iterator[TraceRow]:
    t0_s: float | None = None
    # Order is checked on the file's own times, before they are made relative to the first row.
    prev_s: float | None = None
    with path.open() as f:
        for line, obj in json_lines(path, f, skipped):
            if not isinstance(obj, dict):
                raise TraceFormatError(path, "each line must be a JSON object", line=line)
            ts_ms = _field(path, line, obj, "timestamp", int)
            inp = int(_field(path, line, obj, "input_length", int))
            outp = int(_field(path, line, obj, "output_length", int))
            blocks = _blocks(path, line, _field(path, line, obj, "hash_ids", list), inp, spec.block_tokens)
            ts_s = ts_ms / 1000.0
            check_order(path, line, prev_s, ts_s)
            prev_s = ts_s
            t0_s = (ts_s or 0.0) if t0_s is None else t0_s  # ``or 0.0``: -0.0 becomes 0.0, as the list loader had it
            yield TraceRow(
                arrival_s=(ts_s or 0.0) - t0_s, input_tokens=inp, output_tokens=outp, shared_blocks=blocks, line=line
            )


def load_mooncake(spec: MooncakeTraceSpec, base_dir: Path | None = None) -> LoadedTrace:
    skipped: dict[str, int] = {}
    return collect(iter_mooncake(spec, base_dir, skipped), skipped)
