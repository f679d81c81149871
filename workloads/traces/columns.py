"""A trace as columns: what the schedule builder needs of every row, in arrays, read from the row stream.

The builder used to hold the whole trace as ``TraceRow`` objects (about 1 kB each) while it planned; here
each row is read, copied into growing typed buffers (``array.array``: 8 bytes a value) and dropped, so a
week-long trace costs its numbers, not its objects.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.schedule import TraceRow
from workloads.traces.base import TraceFormatError


@dataclass(frozen=True)
class TraceColumns:
    """``arrival_s`` is NaN where the row has no time; ``follows`` -1 where it continues nothing. Row ``i``'s
    shared blocks are ``block_keys[block_offsets[i]:block_offsets[i + 1]]`` (and their ``block_tokens``)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    follows: np.ndarray
    block_keys: np.ndarray
    block_tokens: np.ndarray
    block_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.input_tokens)

    @property
    def timed(self) -> np.ndarray:
        return ~np.isnan(self.arrival_s)


def columns_from_rows(rows: Iterable[TraceRow], path: Path | str) -> TraceColumns:
    """Copy a stream of rows into columns, one row in memory at a time. ``path`` names the trace in the
    error for a block key that does not fit 64 bits (with the row's line)."""
    arrival, inputs, outputs, follows = array("d"), array("q"), array("q"), array("q")
    keys, tokens, offsets = array("q"), array("q"), array("q", [0])
    nan = float("nan")
    for r in rows:
        arrival.append(nan if r.arrival_s is None else r.arrival_s)
        inputs.append(r.input_tokens)
        outputs.append(r.output_tokens)
        follows.append(-1 if r.follows is None else r.follows)
        try:
            for k, n in r.shared_blocks:
                keys.append(k)
                tokens.append(n)
        except OverflowError:
            raise TraceFormatError(path, "shared block key or size does not fit in 64 bits", line=r.line) from None
        offsets.append(len(keys))
    return TraceColumns(
        arrival_s=np.frombuffer(arrival, dtype=np.float64),
        input_tokens=np.frombuffer(inputs, dtype=np.int64),
        output_tokens=np.frombuffer(outputs, dtype=np.int64),
        follows=np.frombuffer(follows, dtype=np.int64),
        block_keys=np.frombuffer(keys, dtype=np.int64),
        block_tokens=np.frombuffer(tokens, dtype=np.int64),
        block_offsets=np.frombuffer(offsets, dtype=np.int64),
    )
